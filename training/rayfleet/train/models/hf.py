"""Causal LMs from Hugging Face folders, built on the meta device and filled without waste.

Where the weights come from, on the node of each rank: a local directory, `$MODEL_DIR/<model id>` (preloaded in
the ray-worker image of the worker groups with models, images/ray-worker/models.Dockerfile), else the Hugging Face
cache (downloaded there only when a network is available). The driver needs no weights (`local_model_dir`): it
hands the ranks the model's id, and each resolves it where it runs.
How they are loaded: every rank builds the model on the meta device and shards it (nothing allocated),
allocates only its shards, then rank 0 alone reads the weights files (safetensors, else PyTorch .bin) in their
stored dtype and broadcasts them into everyone's shards. No rank ever holds a full fp32 copy.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch


class ModelNotFound(ValueError):
    pass


PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model"]


def local_model_dir(model: str) -> Path | None:
    """The model's folder on this machine, downloading nothing: a directory, `$MODEL_DIR/<id>`, or the Hugging
    Face cache; None when it is not here (a driver whose image holds no weights)."""
    local = Path(model).expanduser()
    if local.is_dir():
        return local
    if os.environ.get("MODEL_DIR") and (Path(os.environ["MODEL_DIR"]) / model).is_dir():
        return Path(os.environ["MODEL_DIR"]) / model
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(model, allow_patterns=PATTERNS, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
        return None


def resolve_model_dir(model: str) -> Path:
    """The model's folder on this node: `local_model_dir`, else downloaded from the Hub; else ModelNotFound, one
    line naming the model and the command that preloads it."""
    found = local_model_dir(model)
    if found is not None:
        return found
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        found = Path(snapshot_download(model, allow_patterns=PATTERNS))
        if not any(found.glob("*.safetensors")):  # published before safetensors (dolly-v2): its .bin weights
            found = Path(snapshot_download(model, allow_patterns=[*PATTERNS, "pytorch_model*.bin"]))
        return found
    except (RepositoryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError, ValueError, OSError) as exc:
        # The images are offline (HF_HUB_OFFLINE): the worker of a group with models has what `make build` preloaded.
        hint = (
            ""
            if model.startswith(("/", ".", "~"))
            else f"; preload it into the workers' image: make build push MODELS={model} (then make deploy, for a "
            "worker group with models = true)"
        )
        raise ModelNotFound(
            f"model: {model!r} is neither a directory, nor under $MODEL_DIR, nor in the Hugging Face cache, "
            f"and could not be downloaded ({type(exc).__name__}){hint}"
        ) from None


def build_on_meta(model_dir: Path):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model


def transformer_blocks(model) -> list[torch.nn.Module]:
    """The repeated blocks FSDP shards one by one (GPT-NeoX: gpt_neox.layers; Llama-likes: model.layers)."""
    for path in ("gpt_neox.layers", "model.layers", "transformer.h"):
        node = model
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                break
        if node is not None:
            return list(node)
    raise ValueError(f"no transformer blocks found in {type(model).__name__}")


def materialize(model, device: torch.device) -> None:
    """Allocate this rank's shards on the device; rebuild the buffers that checkpoints do not store."""
    model.to_empty(device=device)
    for name, module in list(model.named_modules()):
        if type(module).__name__.endswith("RotaryEmbedding"):  # inv_freq: derived from the config, not saved
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            with torch.device(device):
                setattr(parent, attr, type(module)(module.config))


def checkpoint_key_renames(model) -> list[tuple[re.Pattern, str]]:
    """The checkpoint-to-module key renames transformers applies in from_pretrained (GPT-NeoX:
    embed_out -> lm_head, as dolly's checkpoint is named), so every family loads as the library loads it."""
    from transformers.conversion_mapping import WeightRenaming, get_model_conversion_mapping

    renames = []
    for transform in get_model_conversion_mapping(model):
        if isinstance(transform, WeightRenaming):
            sources, targets = list(transform.source_patterns), list(transform.target_patterns)
            if len(targets) == 1:  # several old names, one new one
                targets = targets * len(sources)
            renames += [(re.compile(s), t) for s, t in zip(sources, targets, strict=True)]
    return renames


def stored_weights(model_dir: Path, load_file):
    """Every (name, tensor) of the folder's weights: its *.safetensors, else its PyTorch *.bin files (models
    published before safetensors, as dolly-v2's main revision is), read with torch's weights-only unpickler,
    which builds tensors and refuses any other object, so a .bin cannot run code."""
    files = sorted(model_dir.glob("*.safetensors"))
    if files:
        for file in files:
            yield from load_file(file).items()
        return
    files = sorted(model_dir.glob("pytorch_model*.bin"))
    if not files:
        raise FileNotFoundError(f"{model_dir} has no *.safetensors or pytorch_model*.bin weights")
    for file in files:
        yield from torch.load(file, map_location="cpu", weights_only=True, mmap=True).items()


def load_weights_from_rank0(model, model_dir: Path, rank: int, renames: list[tuple[re.Pattern, str]]) -> None:
    """`renames` must come from the model before sharding: FSDP2 swaps the class for a subclass of its own."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    full: dict[str, torch.Tensor] = {}
    if rank == 0:
        for key, tensor in stored_weights(model_dir, load_file):  # stored dtype (bf16/fp16 for big models), on CPU
            for pattern, target in renames:
                key = pattern.sub(target, key)
            full[key] = tensor
    # A parameter left as allocated garbage would train on noise: rank 0 checks coverage and every rank
    # learns the verdict (raising on rank 0 alone would leave the others waiting in the broadcast).
    expected = set(model.state_dict())
    verdict = [sorted(expected - set(full)) if rank == 0 else None]
    torch.distributed.broadcast_object_list(verdict, src=0)
    if verdict[0]:
        raise ValueError(f"{model_dir}: no weights for {verdict[0][:5]} ({len(verdict[0])} parameters)")
    if rank == 0 and set(full) - expected:
        print(f"weights: ignored keys the model does not have: {sorted(set(full) - expected)[:3]}", flush=True)
    full = {k: v for k, v in full.items() if k in expected}
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
