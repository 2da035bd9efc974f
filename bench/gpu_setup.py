"""bench.gpu's set-up, run as its own process: a GPT-NeoX model folder (random weights, a tokenizer) and a corpus
with enough packed blocks for the FSDP job's steps. Reused when its marker says it was built the same way.

    python -m bench.gpu_setup --model-dir DIR --corpus FILE --shape pythia-1.4b --seq-len 2048 --blocks 640
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

# build() arguments per shape (tools.tiny_lm.build); bench.fsdp_throughput's SHAPES say the same.
SHAPES = {
    "pythia-1.4b": {"hidden": 2048, "layers": 24, "heads": 16, "vocab": 50304, "max_positions": 2048},
    "tiny": {"hidden": 64, "layers": 2, "heads": 4, "vocab": 512, "max_positions": 512},
}
MARKER = ".bench-gpu.json"


def wanted(shape: str, seq_len: int, blocks: int) -> dict:
    return {"shape": shape, **SHAPES[shape], "seq_len": seq_len, "blocks": blocks}


def is_built(model_dir: Path, corpus_file: Path, spec: dict) -> bool:
    """The folder and corpus were built for `spec` (or a spec needing more blocks), and completely."""
    try:
        done = json.loads((model_dir / MARKER).read_text())
    except (OSError, ValueError):
        return False
    same = {k: v for k, v in done.items() if k != "blocks"} == {k: v for k, v in spec.items() if k != "blocks"}
    return same and done.get("blocks", 0) >= spec["blocks"] and corpus_file.is_file()


def lines_for(blocks: int, seq_len: int, tokens: int, lines: int) -> int:
    """corpus(lines=...) for at least `blocks` blocks of `seq_len`, from a sample's `tokens` per `lines`, +10%."""
    return math.ceil((blocks * seq_len + 1) * lines / max(tokens, 1) * 1.1)


def build(model_dir: Path, corpus_file: Path, spec: dict) -> None:
    from transformers import AutoTokenizer

    from rayfleet.train.data.text import tokenize
    from tools.tiny_lm import build as build_model
    from tools.tiny_lm import corpus

    started = time.perf_counter()
    (model_dir / MARKER).unlink(missing_ok=True)
    sample_lines = 6000
    text = corpus(lines=sample_lines)
    kwargs = {k: spec[k] for k in ("hidden", "layers", "heads", "vocab", "max_positions")}
    build_model(model_dir, text, **kwargs)
    print(f"model {spec['shape']} written to {model_dir} in {time.perf_counter() - started:.1f} s", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokens = len(tokenize(text, tokenizer))
    if tokens // spec["seq_len"] < spec["blocks"]:  # the same generator, longer: the tokenizer knows its words
        text = corpus(lines=lines_for(spec["blocks"], spec["seq_len"], tokens, sample_lines))
        tokens = len(tokenize(text, tokenizer))
    blocks = tokens // spec["seq_len"]
    if blocks < spec["blocks"]:
        raise SystemExit(f"error: the corpus gives {blocks} blocks of {spec['seq_len']}, fewer than {spec['blocks']}")
    corpus_file.parent.mkdir(parents=True, exist_ok=True)
    corpus_file.write_text(text)
    (model_dir / MARKER).write_text(json.dumps({**spec, "blocks": blocks}))
    print(
        f"corpus: {tokens:,} tokens = {blocks} blocks of {spec['seq_len']} (needed {spec['blocks']}) in {corpus_file}; "
        f"set-up took {time.perf_counter() - started:.1f} s",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--blocks", type=int, required=True, help="packed blocks the FSDP jobs read, at least")
    args = parser.parse_args(argv)
    spec = wanted(args.shape, args.seq_len, args.blocks)
    if is_built(args.model_dir, args.corpus, spec):
        print(f"reusing {args.model_dir} and {args.corpus}", flush=True)
        return 0
    build(args.model_dir, args.corpus, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
