"""Write a consolidated Hugging Face folder that `from_pretrained` loads, and verify it before calling it done.

The strategy gathers the full state dict to rank 0 (FSDP2: get_model_state_dict; ZeRO-3: its 16-bit
consolidation) and the sharded model's logits on a probe batch (every rank takes part). Rank 0 writes
model.safetensors in the config's dtype, config.json and the tokenizer, reloads the folder with
from_pretrained and compares logits. The folder goes to `<run>/export/`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow.fs as pafs
import torch

from training.storage import Storage

TOLERANCE = 1e-4


@torch.no_grad()
def write_and_verify(full: dict, sharded_logits: torch.Tensor, probe: torch.Tensor, tokenizer, model_dir: Path,
                     storage: Storage, run_name: str) -> dict:  # fmt: skip
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
        destination = storage.run_path(run_name, "export")
        fs = storage.filesystem()
        fs.create_dir(destination, recursive=True)
        pafs.copy_files(tmp, destination, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    if not diff <= TOLERANCE * (1 if dtype == torch.float32 else 1000):  # NaN fails too
        raise RuntimeError(f"export check failed: logits differ by {diff:.3g} from the sharded model's")
    return {"export": storage.display(run_name, "export"), "export_max_logit_diff": diff}
