"""Model FLOPs per token and MFU, as torchtitan and PaLM count them.

FLOPs per token of training = 6 x N (non-embedding parameters: forward 2N, backward 4N)
                            + 12 x layers x heads x head_dim x seq_len (attention scores and values).
MFU = achieved FLOP/s per device / the device's dense bf16 peak.
"""

from __future__ import annotations

import torch

# Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's datasheets, TFLOP/s.
PEAK_BF16_TFLOPS = {
    "H100 SXM": 989.4,
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H200": 989.4,
    "A100": 312.0,
    "L40S": 362.05,
    "L4": 121.0,
    "A10": 125.0,
}


def peak_tflops(device_name: str) -> float | None:
    """Match a torch.cuda.get_device_name() string; None for CPUs and unknown devices (no MFU then)."""
    name = device_name.upper()
    if "H100" in name:
        return PEAK_BF16_TFLOPS["H100 PCIe" if "PCIE" in name else "H100 NVL" if "NVL" in name else "H100 SXM"]
    for key in ("H200", "A100", "L40S", "L4"):
        if key in name:
            return PEAK_BF16_TFLOPS[key]
    if "A10" in name and "A100" not in name and "A10G" not in name:  # A10G's peak is not published
        return PEAK_BF16_TFLOPS["A10"]
    return None


def flops_per_token(non_embedding_params: int, layers: int, heads: int, head_dim: int, seq_len: int) -> float:
    return 6.0 * non_embedding_params + 12.0 * layers * heads * head_dim * seq_len


def non_embedding_params(model) -> int:
    embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    embedding_ids = {id(p) for m in embeddings for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in embedding_ids)
