"""Tokens/s, TFLOP/s and MFU of the FSDP2 training step for a GPT-NeoX shape, as a table.

    make bench-fsdp                                              # tiny shape on CPU (a regression guard)
    python -m bench.fsdp_throughput --shape pythia-1.4b --seq-len 2048 --batch 4       # one GPU
    torchrun --nproc-per-node 8 -m bench.fsdp_throughput --shape dolly-v2-7b          # eight GPUs

Random weights (no download), the job's own pieces (rayfleet.train.parallel, rayfleet.train.flops): meta-device
build, activation checkpointing, optional per-block compile, FSDP2 with bf16 params / fp32 reduction on GPU.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="sequences per device per step")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-ac", action="store_true", help="without activation checkpointing")
    parser.add_argument("--compile", action="store_true", help="torch.compile each block")
    parser.add_argument("--unfused", action="store_true", help="AdamW's per-tensor (foreach) step, not fused")
    args = parser.parse_args(argv)

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

    def step() -> None:
        loss = model(input_ids=batch, labels=batch, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tokens_per_s_device = args.steps * args.batch * args.seq_len / seconds
    per_token = flops_per_token(
        non_embedding_params(model),
        config.num_hidden_layers,
        config.num_attention_heads,
        config.hidden_size // config.num_attention_heads,
        args.seq_len,
    )
    tflops = tokens_per_s_device * per_token / 1e12
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    peak = peak_tflops(name)
    memory = f"{torch.cuda.max_memory_allocated(device) / 2**30:.1f}" if cuda else "-"
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print("| shape | params | seq | batch/dev | devices | tokens/s/dev | TFLOP/s/dev | MFU | peak GiB | device |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        mfu = f"{tflops / peak:.1%}" if peak else "n/a"
        print(
            f"| {args.shape}{'' if not args.no_ac else ' (no AC)'}{' +compile' if args.compile else ''}"
            f"{' unfused AdamW' if args.unfused else ''} "
            f"| {params / 1e6:,.1f}M | {args.seq_len} | {args.batch} | {world} | {tokens_per_s_device:,.0f} "
            f"| {tflops:.2f} | {mfu} | {memory} | {name} |"
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
