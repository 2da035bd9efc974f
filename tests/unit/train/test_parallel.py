"""parallelize() owns the order: activation checkpointing, then compile, then DDP or FSDP2."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from rayfleet.train import parallel


def _calls(monkeypatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(parallel, "apply_activation_checkpointing", lambda blocks: calls.append("ac"))
    monkeypatch.setattr(parallel, "apply_compile_per_block", lambda blocks: calls.append("compile-blocks"))
    monkeypatch.setattr(parallel, "apply_compile", lambda model, mode: calls.append(f"compile:{mode}") or model)
    monkeypatch.setattr(parallel, "apply_fsdp", lambda model, blocks, device, bf16: calls.append(f"fsdp:{bf16}"))
    monkeypatch.setattr(
        parallel, "apply_ddp", lambda model, device, compression, bucket_mb: calls.append(f"ddp:{compression}") or model
    )
    return calls


def test_fsdp_order_is_ac_then_compile_then_shard(monkeypatch):
    calls = _calls(monkeypatch)
    model = torch.nn.Linear(2, 2)
    out = parallel.parallelize(
        model, torch.device("cpu"), "fsdp", blocks=[model], activation_checkpointing=True, compile_mode="default"
    )
    assert out is model and calls == ["ac", "compile-blocks", "fsdp:False"]


def test_ddp_order_is_compile_then_wrap_and_skips_what_is_off(monkeypatch):
    calls = _calls(monkeypatch)
    parallel.parallelize(torch.nn.Linear(2, 2), torch.device("cpu"), "ddp", compile_mode="reduce-overhead")
    assert calls == ["compile:reduce-overhead", "ddp:none"]
    calls.clear()
    parallel.parallelize(torch.nn.Linear(2, 2), torch.device("cpu"), "ddp", grad_compression="bf16")
    assert calls == ["ddp:bf16"]


def test_ddp_for_real_on_one_cpu_process(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        model = torch.nn.Linear(4, 2)
        wrapped = parallel.parallelize(model, torch.device("cpu"), "ddp")
        assert isinstance(wrapped, DistributedDataParallel) and wrapped.module is model
        wrapped(torch.randn(3, 4)).sum().backward()
        assert model.weight.grad is not None
    finally:
        dist.destroy_process_group()
