"""Text for causal-LM fine-tuning: loaded once, tokenized once, concatenated and packed into blocks.

No padding anywhere: the token stream is cut into `seq_len` blocks (the tail shorter than a block is
dropped), so every label position is a real next token; the model shifts the labels itself.

Sources: a local text file, `s3://bucket/key`, or `hf://<dataset repo>/<file>` (downloaded into the Hugging
Face cache; the trainer image can preload it).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import torch

from rayfleet.train.data import synthetic_text
from rayfleet.train.data.order import epoch_shard


def read_text(source: str, s3_endpoint_url: str | None = None) -> str:
    if source.startswith("s3://"):
        from rayfleet.core.aws import Aws
        from rayfleet.train.data.staged import check_object

        bucket, _, key = source.removeprefix("s3://").partition("/")
        s3 = Aws().client("s3", endpoint_url=s3_endpoint_url)  # the same store as the run's storage
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return _decoded(check_object(s3, bucket, key, body, source), source)  # a staged file: as its manifest says
    if source.startswith("hf://"):
        from huggingface_hub import hf_hub_download

        repo_and_file = source.removeprefix("hf://")
        parts = repo_and_file.split("/")
        if len(parts) < 3:
            raise ValueError(f"data: {source!r} should be hf://<owner>/<dataset>/<file>")
        path = hf_hub_download("/".join(parts[:2]), "/".join(parts[2:]), repo_type="dataset")
        return Path(path).read_text()
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"data: {source} does not exist (`make text-data` fetches tiny_shakespeare)")
    return _decoded(path.read_bytes(), source)


def resolve(source: str, s3_endpoint_url: str | None = None) -> str:
    """The source a job given `source` reads: as given when it is there; for the real tiny_shakespeare's name, the
    generated corpus `make text-data` left beside it offline (rayfleet/train/data/synthetic_text.py), locally or
    in its staged s3:// copy; else as given (the read's error names it)."""
    if not source.startswith("s3://"):
        return synthetic_text.resolve(source)
    if PurePosixPath(source).name != synthetic_text.REAL_NAME:
        return source
    from botocore.exceptions import BotoCoreError, ClientError

    from rayfleet.core.aws import Aws

    bucket, _, key = source.removeprefix("s3://").partition("/")
    s3 = Aws().client("s3", endpoint_url=s3_endpoint_url)
    generated = str(PurePosixPath(key).parent / synthetic_text.GENERATED).removeprefix("./")
    for candidate in (key, generated):
        try:
            s3.head_object(Bucket=bucket, Key=candidate)
        except (ClientError, BotoCoreError):  # not there, or not reachable: the read says which, in one line
            continue
        return f"s3://{bucket}/{candidate}"
    return source


def _decoded(body: bytes, source: str) -> str:
    try:
        return body.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"data: {source} is not UTF-8 text (byte {exc.start}: {body[exc.start]:#04x})") from None


def pack(token_ids: list[int], seq_len: int) -> torch.Tensor:
    """[blocks, seq_len] int64; `len(token_ids) // seq_len` blocks, no padding."""
    blocks = len(token_ids) // seq_len
    if blocks == 0:
        raise ValueError(f"the text has {len(token_ids)} tokens, fewer than one block of seq_len={seq_len}")
    return torch.tensor(token_ids[: blocks * seq_len], dtype=torch.long).view(blocks, seq_len)


def tokenize(text: str, tokenizer) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)  # marks the end of the document in the stream
    return ids


class PackedBlocks:
    def __init__(self, blocks: torch.Tensor):
        self.blocks = blocks

    def __len__(self) -> int:
        return self.blocks.shape[0]

    def steps_per_epoch(self, world: int, micro_batch: int, grad_accum: int) -> int:
        return (len(self) // world) // (micro_batch * grad_accum)

    def micro_batch(
        self, step: int, micro: int, rank: int, world: int, seed: int, micro_batch: int, grad_accum: int
    ) -> torch.Tensor:
        """The `micro`-th micro-batch of global step `step` (0-based) for this rank: a pure function of the
        step, so a resumed run continues exactly where the checkpoint left off."""
        per_epoch = self.steps_per_epoch(world, micro_batch, grad_accum)
        if per_epoch == 0:
            raise ValueError(f"{len(self)} blocks cannot fill one step of {world} x {micro_batch} x {grad_accum}")
        epoch, step_in_epoch = divmod(step, per_epoch)
        shard = epoch_shard(len(self), epoch, rank, world, seed)
        start = (step_in_epoch * grad_accum + micro) * micro_batch
        return self.blocks[shard[start : start + micro_batch]]
