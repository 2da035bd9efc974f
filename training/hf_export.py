"""Export a sharded model as a consolidated Hugging Face folder that `from_pretrained` loads, and verify it.

All ranks gather the full state dict to rank 0's CPU (one tensor at a time, in the config's dtype); rank 0
writes model.safetensors, config.json and the tokenizer, loads the folder back with from_pretrained and
compares its logits on a probe batch with the sharded model's. The folder goes to `<run>/export/`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow.fs as pafs
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from training.storage import Storage

TOLERANCE = 1e-4


@torch.no_grad()
def export(model, tokenizer, model_dir: Path, probe: torch.Tensor, storage: Storage, run_name: str, rank: int) -> dict:
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    model.eval()
    sharded_logits = model(input_ids=probe).logits.float().cpu()  # every rank takes part in the forward
    model.train()
    if rank != 0:
        return {}
    config = AutoConfig.from_pretrained(model_dir)
    dtype = getattr(config, "dtype", None) or torch.float32
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    with tempfile.TemporaryDirectory() as tmp:
        save_file({k: v.to(dtype).contiguous() for k, v in full.items()}, f"{tmp}/model.safetensors",
                  metadata={"format": "pt"})  # fmt: skip
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        reloaded = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        diff = (reloaded(input_ids=probe.cpu()).logits.float() - sharded_logits).abs().max().item()
        torch.save({"probe": probe.cpu(), "logits": sharded_logits}, f"{tmp}/probe_logits.pt")
        destination = storage.run_path(run_name, "export")
        fs = storage.filesystem()
        fs.create_dir(destination, recursive=True)
        pafs.copy_files(tmp, destination, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    if not diff <= TOLERANCE * (1 if dtype == torch.float32 else 1000):  # NaN fails too
        raise RuntimeError(f"export check failed: logits differ by {diff:.3g} from the sharded model's")
    return {"export": storage.display(run_name, "export"), "export_max_logit_diff": diff}
