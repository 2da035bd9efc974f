"""A Ray Train run through rayfleet's own driver path (fit_and_summarize) whose ranks write down what their
process is: for tests/integration/test_warm_workers_on_local_cluster.py.

    python tests/integration/jobs/warm_job.py storage=DIR run_name=NAME

Each rank writes `<storage>/facts-<rank>.json`: its parent process's command line, its thread count, what
rayfleet's worker runtime_env gave it, and rank 0 also the command lines of the parents of Ray Train's
controller and helpers (by the state API, while they live). The loop is in __main__, so Ray ships it by
value: the workers need nothing of tests/.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rayfleet.core.config import load_config
from rayfleet.train.fit import fit_and_summarize
from rayfleet.train.job_config import JobConfig


def parent_command(pid: int) -> str:
    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def loop(config: dict) -> None:
    import ray.train
    import ray.train.collective
    import torch
    from ray.util.state import list_actors

    rank = ray.train.get_context().get_world_rank()
    facts = {
        "parent": parent_command(os.getpid()),
        "threads": torch.get_num_threads(),
        "print_patch": os.environ.get("RAY_TRAIN_ENABLE_PRINT_PATCH"),
        "cwd": os.getcwd(),
    }
    # Ray Train creates its SynchronizationActor without waiting for it: a barrier goes through it, so after
    # this it is alive (under load rank 0 otherwise listed the actors before its process had started).
    ray.train.collective.barrier()
    if rank == 0:  # the session's cluster holds hundreds of earlier, dead actors: past the default limit of 100
        alive = list_actors(filters=[("state", "=", "ALIVE")], limit=10_000, raise_on_missing_output=False)
        facts["actors"] = {a.class_name: parent_command(a.pid) for a in alive if a.pid and a.class_name}
    Path(config["storage"], f"facts-{rank}.json").write_text(json.dumps(facts))


def main() -> int:
    cfg = load_config(JobConfig, None, ["num_workers=2", "cpus_per_worker=1", "device=cpu", *sys.argv[1:]])
    return fit_and_summarize(loop, cfg, cfg.run_name, {"storage": cfg.storage}, summary_lines=lambda row: [])


if __name__ == "__main__":
    sys.exit(main())
