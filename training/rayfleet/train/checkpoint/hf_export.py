"""Write a consolidated Hugging Face folder that `from_pretrained` loads, and verify it before calling it done.

The strategy gathers the full state dict to rank 0 (FSDP2: get_model_state_dict; ZeRO-3: its 16-bit
consolidation) and the sharded model's logits on a probe batch (every rank takes part). Rank 0 writes
model.safetensors in the config's dtype, config.json and the tokenizer, reloads the folder with
from_pretrained and compares logits. The folder goes to `<run>/export/`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from rayfleet.core.run_dir import RunDir

# Largest logit difference, relative to the largest logit, that still counts as the same model: fp32
# everywhere must match to rounding; bf16 compute or 16-bit storage leaves about 2-3 significant digits.
TOLERANCE_FP32, TOLERANCE_16BIT = 1e-5, 2e-2


@torch.no_grad()
def write_and_verify(
    full: dict,
    sharded_logits: torch.Tensor,
    probe: torch.Tensor,
    tokenizer,
    model_dir: Path,
    run_dir: RunDir,
    bf16_compute: bool = False,
) -> dict:
    """Rank 0 only."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    dtype = getattr(config, "dtype", None) or torch.float32
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    with tempfile.TemporaryDirectory() as tmp:
        tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in full.items()}
        save_file(tensors, f"{tmp}/model.safetensors", metadata={"format": "pt"})
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        reloaded = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        diff = (reloaded(input_ids=probe.cpu()).logits.float() - sharded_logits.cpu()).abs().max().item()
        torch.save({"probe": probe.cpu(), "logits": sharded_logits.cpu()}, f"{tmp}/probe_logits.pt")
        run_dir.upload("export", Path(tmp))
    relative = diff / max(1.0, sharded_logits.abs().max().item())
    tolerance = TOLERANCE_FP32 if dtype == torch.float32 and not bf16_compute else TOLERANCE_16BIT
    if not relative <= tolerance:  # NaN fails too
        raise RuntimeError(
            f"export check failed: logits differ by {diff:.3g} ({relative:.2e} relative) "
            f"from the sharded model's, above {tolerance:g}"
        )
    return {"export": run_dir.display("export"), "export_max_logit_diff": diff}
