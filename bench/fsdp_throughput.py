"""Tokens/s, TFLOP/s and MFU of the FSDP2 training step for a GPT-NeoX shape, as a table.

    make bench BENCH=fsdp                                              # tiny shape on CPU (a regression guard)
    python -m bench.fsdp_throughput --shape pythia-1.4b --seq-len 2048 --batch 4       # one GPU
    python -m bench.fsdp_throughput --shape pythia-1.4b --seq-len 2048 --batch 8 --no-ac --compile --grad-accum 4
    torchrun --nproc-per-node 8 -m bench.fsdp_throughput --shape dolly-v2-7b          # eight GPUs

Random weights (no download), the job's own pieces (rayfleet.train.parallel, rayfleet.train.flops): meta-device
build, activation checkpointing, optional per-block compile, FSDP2 with bf16 params / fp32 reduction on GPU.
`--grad-accum N` steps the optimizer every N micro-batches as the job's grad_accum does (tokens counted per
micro-batch), so the bench and the job compare at the same settings; a line under the table splits a step into
its forward+backward passes and its clip+AdamW.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist

from rayfleet.train.flops import flops_per_token, non_embedding_params, peak_tflops
from rayfleet.train.parallel import parallelize

SHAPES = {  # GPT-NeoX configurations (hidden, layers, heads, vocab)
    "tiny": (64, 2, 4, 512),
    "pythia-1.4b": (2048, 24, 16, 50304),
    "dolly-v2-7b": (4096, 32, 32, 50280),
}


def build(shape: str, seq_len: int, device: torch.device, ac: bool, compile_blocks: bool):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    hidden, layers, heads, vocab = SHAPES[shape]
    config = GPTNeoXConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        vocab_size=vocab,
        max_position_embeddings=max(2048, seq_len),
    )
    with torch.device("meta"):
        model = GPTNeoXForCausalLM(config)
    blocks = list(model.gpt_neox.layers)
    parallelize(
        model,
        device,
        "fsdp",
        blocks=blocks,
        activation_checkpointing=ac,
        compile_mode="default" if compile_blocks else None,
        bf16=device.type == "cuda",
    )
    model.to_empty(device=device)
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().normal_(0.0, 0.02)
        with torch.device(device):
            model.gpt_neox.rotary_emb = type(model.gpt_neox.rotary_emb)(config)
    return model, config


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="sequences per device per micro-batch")
    parser.add_argument(
        "--grad-accum", type=int, default=1, help="micro-batches per optimizer step (the job's grad_accum)"
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-ac", action="store_true", help="without activation checkpointing")
    parser.add_argument("--compile", action="store_true", help="torch.compile each block")
    parser.add_argument("--unfused", action="store_true", help="AdamW's per-tensor (foreach) step, not fused")
    args = parser.parse_args(argv)
    if args.grad_accum < 1:
        parser.error("--grad-accum must be at least 1")
    return args


class Marks:
    """Points within the timed steps, taken without making the host wait for the device: CUDA events, read
    after the final synchronize; on a CPU, which runs each op as it is called, the clock."""

    def __init__(self, cuda: bool):
        self.cuda, self.points = cuda, []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.points.append(event)
        else:
            self.points.append(time.perf_counter())

    def mean_ms(self, first: int, every: int) -> float:
        """The mean time from point `first` to the next, over every `every`-th point (one per step)."""
        pairs = [(self.points[i], self.points[i + 1]) for i in range(first, len(self.points) - 1, every)]
        spans = [a.elapsed_time(b) if self.cuda else (b - a) * 1000 for a, b in pairs]
        return sum(spans) / len(spans)


def timed_steps(model, optimizer, batch: torch.Tensor, args, cuda: bool) -> tuple[float, Marks]:
    """Warm-up steps, then the timed ones: (their seconds, the marks around each step's parts)."""
    marks = Marks(cuda)

    def step(timed: bool) -> None:
        if timed:
            marks.mark()
        for _ in range(args.grad_accum):  # the job's loop: each micro-batch's loss scaled by 1/accumulation
            loss = model(input_ids=batch, labels=batch, use_cache=False).loss
            (loss / args.grad_accum).backward()
        if timed:
            marks.mark()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if timed:
            marks.mark()

    for _ in range(args.warmup):
        step(timed=False)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        step(timed=True)
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start, marks


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cuda = torch.cuda.is_available()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group(
        "nccl" if cuda else "gloo", rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1))
    )
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    model, config = build(args.shape, args.seq_len, device, not args.no_ac, args.compile)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), fused=not args.unfused)
    batch = torch.randint(0, config.vocab_size, (args.batch, args.seq_len), device=device)
    seconds, marks = timed_steps(model, optimizer, batch, args, cuda)
    tokens_per_s_device = args.steps * args.grad_accum * args.batch * args.seq_len / seconds
    per_token = flops_per_token(
        non_embedding_params(model),
        config.num_hidden_layers,
        config.num_attention_heads,
        config.hidden_size // config.num_attention_heads,
        args.seq_len,
    )
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    memory = f"{torch.cuda.max_memory_allocated(device) / 2**30:.1f}" if cuda else "-"
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        report(args, params, world, tokens_per_s_device, per_token, name, memory, seconds, marks)
    dist.destroy_process_group()
    return 0


def report(args, params: int, world: int, tokens_per_s_device: float, per_token: float, name, memory, seconds, marks):
    """The table row, then where a step's time goes."""
    tflops = tokens_per_s_device * per_token / 1e12
    peak = peak_tflops(name)
    mfu = f"{tflops / peak:.1%}" if peak else "n/a"
    variant = (
        f"{args.shape}{'' if not args.no_ac else ' (no AC)'}{' +compile' if args.compile else ''}"
        f"{' unfused AdamW' if args.unfused else ''}"
    )
    print(
        "| shape | params | seq | batch/dev | accum | devices | tokens/s/dev | TFLOP/s/dev | MFU | peak GiB | device |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {variant} | {params / 1e6:,.1f}M | {args.seq_len} | {args.batch} | {args.grad_accum} | {world} "
        f"| {tokens_per_s_device:,.0f} | {tflops:.2f} | {mfu} | {memory} | {name} |"
    )
    step_ms = seconds * 1000 / args.steps
    forward_backward, optimizer = marks.mean_ms(0, 3), marks.mean_ms(1, 3)
    print(
        f"per step: {step_ms:.1f} ms = {args.grad_accum} x forward+backward {forward_backward / args.grad_accum:.1f} ms"
        f" + clip+AdamW {optimizer:.1f} ms (+ {max(step_ms - forward_backward - optimizer, 0.0):.1f} ms between steps)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
