"""An elastic FSDP2 run that shrinks resumes from its sharded checkpoint at the new world size: two gloo ranks
(plain processes, no Ray) train the tiny model and save through the job's own path (FSDPStrategy.save, DCP
shards, one file per rank), then one rank loads it through FSDPStrategy.load (SafeReader, DCP's resharding)
and holds exactly the parameters and AdamW state the two ranks had."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch

from tests.unit.recipes.helpers import REPO
from tools import tiny_lm

# One rank of a world of `world`: train one step and save (world 2), or load (world 1); both write the full
# parameters and optimizer state they hold, for the test to compare.
RANK = textwrap.dedent("""
    import shutil, sys
    from contextlib import contextmanager
    from pathlib import Path
    import torch, torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from rayfleet.core.config import load_config
    from rayfleet.train import checkpoint
    from rayfleet.train.fsdp.config import FSDPConfig
    from rayfleet.train.fsdp.strategy import FSDPStrategy

    root, rank, world, mode = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", init_method=f"file://{root}/pg-{mode}", rank=rank, world_size=world)
    saved = root / "checkpoint_step_0000001"

    def report_written(metrics, name, directory):  # Ray Train's part: every rank's files in one directory
        saved.mkdir(exist_ok=True)
        for file in Path(directory).iterdir():
            shutil.move(str(file), saved / file.name)

    @contextmanager
    def latest(required=()):
        yield saved

    def report(metrics, name, write):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            write(Path(tmp))
            report_written(metrics, name, tmp)

    checkpoint.report_written, checkpoint.latest, checkpoint.report = report_written, latest, report
    cfg = load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml",
                      [f"model={root / 'model'}", f"data={root / 'model'}", "grad_accum=1",
                       f"num_workers={world}", "async_checkpoint=false"])
    torch.manual_seed(0)
    s = FSDPStrategy(cfg, root / "model", torch.device("cpu"), rank=rank)
    if mode == "save":
        batch = torch.randint(0, s.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(rank))
        s.micro_step(batch)
        s.step()
        s.save(1, {"attempt": 0, "seed": 0, "strategy": "fsdp"}, {"step": 1}, blocking=True)
    else:
        assert s.load()["step"] == 1
    full = {f"param/{k}": v.full_tensor() for k, v in s.model.state_dict().items()}
    for index, state in enumerate(s.optimizer.state.values()):
        for key, value in state.items():
            full[f"optim/{index}/{key}"] = value.full_tensor() if isinstance(value, DTensor) else value
    if rank == 0:
        torch.save(full, root / f"{mode}.pt")
    dist.barrier()
    dist.destroy_process_group()
""")


def ranks(root, world: int, mode: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-c", RANK, str(root)]
    procs = [subprocess.Popen([*argv, str(r), str(world), mode], env=env, cwd=REPO) for r in range(world)]
    assert [p.wait(timeout=300) for p in procs] == [0] * world


def test_a_checkpoint_of_two_ranks_loads_whole_into_one(tmp_path):
    tiny_lm.build(tmp_path / "model", tiny_lm.corpus(400))
    ranks(tmp_path, 2, "save")
    assert sorted(p.name for p in (tmp_path / "checkpoint_step_0000001").glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    ranks(tmp_path, 1, "load")
    saved, loaded = torch.load(tmp_path / "save.pt"), torch.load(tmp_path / "load.pt")
    assert saved.keys() == loaded.keys() and any(k.startswith("optim/") for k in saved)
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
