"""The DeepSpeed config generated from the job's typed config."""

from __future__ import annotations

from rayfleet.train.fsdp.config import FSDPConfig
from rayfleet.train.fsdp.deepspeed import deepspeed_config


def test_zero3_with_torchs_adamw_so_no_optimizer_is_compiled_at_start():
    cfg = FSDPConfig(model="m", data="d", strategy="deepspeed", micro_batch_size=4, grad_accum=2, lr=1e-3)
    ds = deepspeed_config(cfg, bf16=False)
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["train_micro_batch_size_per_gpu"] == 4 and ds["gradient_accumulation_steps"] == 2
    assert ds["optimizer"]["type"] == "AdamW" and ds["optimizer"]["params"]["lr"] == 1e-3
    # DeepSpeed's FusedAdam is JIT-compiled in every fresh container (minutes); torch's AdamW is not.
    assert ds["optimizer"]["params"]["torch_adam"] is True
    assert ds["bf16"] == {"enabled": False} and deepspeed_config(cfg, bf16=True)["bf16"] == {"enabled": True}


SKIPPED_BUILD = """
import os, sys, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0", WORLD_SIZE="1")
from rayfleet.train.fsdp.deepspeed import skip_unused_cpu_ops
import deepspeed
skip_unused_cpu_ops(torch.device(sys.argv[1]))
if sys.argv[1] == "cpu":
    dist.init_process_group("gloo")
    deepspeed.init_distributed(dist_backend="gloo")
    from deepspeed.comm import comm
    print("shm op:", comm.cdb.shm_comm_op)
print("table set:", "__compatible_ops__" in vars(deepspeed.ops))
"""


def test_on_a_cpu_deepspeed_builds_no_shared_memory_op(tmp_path):
    """The CPU process group starts without DeepSpeed's op probe and shm-op build (an empty extensions dir would
    be filled by a build); on a GPU the table is left to DeepSpeed."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {**__import__("os").environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    cpu = subprocess.run([sys.executable, "-c", SKIPPED_BUILD, "cpu", port], env=env, capture_output=True, text=True)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert "shm op: None" in cpu.stdout and "table set: True" in cpu.stdout
    assert not (tmp_path / "ext").exists() or not any((tmp_path / "ext").iterdir())  # nothing was compiled
    gpu = subprocess.run([sys.executable, "-c", SKIPPED_BUILD, "cuda", port], env=env, capture_output=True, text=True)
    assert gpu.returncode == 0 and "table set: False" in gpu.stdout, gpu.stderr[-3000:]
