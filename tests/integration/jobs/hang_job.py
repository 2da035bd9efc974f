"""A Ray Train run whose rank 1 blocks forever in a gloo all-reduce five steps into its first attempt (`once`)
or every attempt (`always`), for tests/integration/test_hang_on_local_cluster.py: the hang watchdog's API as
a user's own Ray Train loop uses it (`hang_watch.Steps` in the loop; `fit_and_summarize`, which starts the
watchdog, in the driver).

    python tests/integration/jobs/hang_job.py once|always storage=DIR run_name=NAME [hang_floor_s=8 ...]

Each step is an all-reduce over the default group; every 2 steps the run reports a checkpoint holding the
step. After the checkpoint 5 steps into an attempt, rank 1 calls an all-reduce on a second group that rank 0
never joins, while rank 0 goes on to the next step's all-reduce and waits there for rank 1. The loop is in
__main__, so Ray ships it by value: the workers need nothing of tests/.
"""

from __future__ import annotations

import json
import sys
import time

from rayfleet.core.config import load_config
from rayfleet.train.fit import fit_and_summarize
from rayfleet.train.job_config import JobConfig

STEPS = 40
HANG_AFTER = 5


def loop(config: dict) -> None:
    import ray.train
    import torch
    import torch.distributed as dist

    from rayfleet.train import checkpoint
    from rayfleet.train.control import hang_watch

    rank = ray.train.get_context().get_world_rank()
    steps = hang_watch.Steps.start(config["run_name"], rank)
    side = dist.new_group([0, 1])  # every rank creates it; only rank 1 will use it
    with checkpoint.latest() as found:
        start = json.loads((found / "step.json").read_text())["step"] if found else 0
    print(f"rank {rank} starts at step {start}", flush=True)
    for step in range(start, STEPS):
        steps.enter()
        dist.all_reduce(torch.ones(1))
        time.sleep(0.05)
        steps.leave()
        if (step + 1) % 2 == 0:
            done = step + 1

            def write(directory, done=done):
                (directory / "step.json").write_text(json.dumps({"step": done}))

            checkpoint.report(
                {"step": done}, checkpoint.step_checkpoint_name(done), write if rank == 0 else None, writers=1
            )
        if rank == 1 and step + 1 == start + HANG_AFTER + 1 and (config["hang"] == "always" or start == 0):
            print(f"rank 1 blocks after step {step + 1}", flush=True)
            dist.all_reduce(torch.ones(1), group=side)  # rank 0 never joins: blocks until the group is stopped
    steps.close()
    print(f"rank {rank} finished step {STEPS}", flush=True)


def main() -> int:
    hang, overrides = sys.argv[1], sys.argv[2:]
    cfg = load_config(JobConfig, None, ["num_workers=2", "cpus_per_worker=1", "device=cpu", *overrides])
    return fit_and_summarize(loop, cfg, cfg.run_name, {"hang": hang}, summary_lines=lambda row: [])


if __name__ == "__main__":
    sys.exit(main())
