"""The preemption notice a launcher recipe's ranks receive (rayfleet/node/driver/preempt_notice.py, delivered by
rayfleet/node/driver/launcher.py): the file, the signal only where it is caught, and the drained node the driver
picks. One test runs a real torchrun of two ranks (recipes/examples/torch-ddp, unmodified) under a
NodeLauncher without Ray: it proves what no cheaper test does, that every rank of a node gets both the file and
the signal and saves at the same step. Through the driver and a drained node on the local cluster:
tests/integration/test_preemption_on_local_cluster.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from rayfleet.node.driver import preempt_notice
from rayfleet.node.driver.launcher import NodeLauncher

EXAMPLE = Path(__file__).parents[3] / "recipes" / "examples" / "torch-ddp" / "train.py"


def test_the_notice_is_written_whole_with_the_seconds_left(tmp_path):
    path = tmp_path / "preempt.json"
    written = preempt_notice.write(path, deadline=1000.4, node_rank=1, ray_node_id="ab" * 28, now=975.0)
    assert json.loads(path.read_text()) == written
    assert written == {"deadline_s": 25, "deadline": 1000.4, "node_rank": 1, "ray_node_id": "ab" * 28}
    assert [p.name for p in tmp_path.iterdir()] == ["preempt.json"]  # no partial file left beside it
    assert preempt_notice.write(path, 900.0, 0, "x", now=975.0)["deadline_s"] == 0  # never negative


def test_the_drained_node_that_goes_first_is_the_one_announced():
    nodes = ["a" * 56, "b" * 56, "c" * 56]
    assert preempt_notice.first_drained(nodes, {}, now=100.0) is None
    assert preempt_notice.first_drained(nodes, {"z" * 56: 1}, now=100.0) is None  # not one of the run's nodes
    drained = {nodes[2]: 160_000, nodes[1]: 130_000}
    assert preempt_notice.first_drained(nodes, drained, now=100.0) == (1, nodes[1], 130.0)
    no_deadline = preempt_notice.first_drained(nodes, {nodes[0]: 0}, now=100.0)
    assert no_deadline == (0, nodes[0], 100.0 + preempt_notice.NO_DEADLINE_S)


@pytest.mark.parametrize("handler", [True, False])
def test_only_a_process_that_catches_the_signal_gets_it(handler):
    """Python's default for SIGUSR1 is to exit: a rank without a handler must not be killed by the notice."""
    code = "import signal, sys, time\n"
    code += "signal.signal(signal.SIGUSR1, lambda *a: None)\n" if handler else ""
    code += "print('ready', flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        assert preempt_notice.catches(child.pid, signal.SIGUSR1) is handler
        assert preempt_notice.catches(child.pid, signal.SIGUSR2) is False
    finally:
        child.kill()
        child.wait()


TREE = """
import os, signal, subprocess, sys, time
if sys.argv[1] == "launcher":  # like torchrun: two ranks with a handler, one without, one helper with no RANK
    children = [("0", "catch"), ("1", "catch"), ("2", "ignore"), (None, "catch")]
    procs = [subprocess.Popen([sys.executable, __file__, "child", what],
             env={**os.environ, **({"RANK": rank} if rank else {})}) for rank, what in children]
    signal.signal(signal.SIGUSR1, lambda *a: print("launcher got it", flush=True))
    [p.wait() for p in procs]
else:
    out = sys.argv[3] if len(sys.argv) > 3 else os.environ["OUT"]
    if sys.argv[2] == "catch":
        signal.signal(signal.SIGUSR1, lambda *a: open(f"{out}/{os.getpid()}", "w").close())
    open(f"{out}/ready-{os.getpid()}", "w").close()
    time.sleep(20)
"""


def test_the_signal_goes_to_every_rank_that_catches_it_and_nothing_else(tmp_path):
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    launcher = subprocess.Popen([sys.executable, str(script), "launcher"], env={"OUT": str(tmp_path)})
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("ready-*"))) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        ranks = preempt_notice.ranks_below(launcher.pid)
        sent = preempt_notice.signal_ranks(launcher.pid)
        assert len(ranks) == 3 and len(sent) == 2 and set(sent) < set(ranks)  # rank 2 has no handler

        def got() -> set[int]:
            return {int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()}

        deadline = time.monotonic() + 30
        while not got() >= set(sent):  # each rank that was sent it has handled it (all sent in one loop)
            assert time.monotonic() < deadline, (got(), sent)
            time.sleep(0.05)
        assert got() == set(sent)  # the helper without a RANK and the launcher itself were left alone
        assert all(psutil.pid_exists(pid) for pid in ranks)  # rank 2 was not killed by a default action
    finally:
        for child in psutil.Process(launcher.pid).children(recursive=True):
            child.kill()
        launcher.kill()
        launcher.wait()


def lines_until(launcher: NodeLauncher, wanted: str, count: int, timeout: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while "\n".join(seen).count(wanted) < count:  # two ranks share the pipe: their lines can run together
        assert launcher.proc.poll() is None, "\n".join(seen + launcher.last_lines())
        assert time.monotonic() < deadline, "\n".join(seen)
        time.sleep(0.2)
        seen += launcher.read()
    return seen


def test_every_rank_of_a_torchrun_gets_the_file_and_the_signal_and_saves_at_one_step(tmp_path):
    launcher = NodeLauncher()
    argv = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(EXAMPLE)]
    argv += ["--steps", "1000000", "--checkpoint-every", "1000000"]
    launcher.start(argv, {"RAYFLEET_RUN_DIR": str(tmp_path), "RAYFLEET_ATTEMPT": "1", "OMP_NUM_THREADS": "1"})
    try:
        lines_until(launcher, "all-reduce ok", 2, timeout=120)
        lines_until(launcher, "step 10/", 1, timeout=60)  # the ranks are in their loop
        # The ranks are held still while the notice goes out: a rank that reads the file first saves and exits,
        # and on a loaded CI host both once did before the signal followed (signalled 0). Held, each rank has
        # both the file and a pending signal when it resumes, whichever it notices first.
        ranks = preempt_notice.ranks_below(launcher.proc.pid)
        assert len(ranks) == 2, ranks
        asked = time.time()
        for pid in ranks:
            os.kill(pid, signal.SIGSTOP)
        try:
            told = launcher.notice(asked + 30, node_rank=1, ray_node_id="cd" * 28)
        finally:
            for pid in ranks:
                os.kill(pid, signal.SIGCONT)
        took = time.time() - asked  # seconds on a loaded CI machine: the deadline left shrinks by as much
        code, _ = launcher.wait()
    finally:
        launcher.stop(grace_s=5)
    output = "\n".join(launcher.last_lines())
    assert code == 0, output
    assert told["signalled"] == 2 and told["node_rank"] == 1 and 29 - took <= told["deadline_s"] <= 30
    notices = [json.loads((tmp_path / "notices" / f"rank-{r}-attempt-1.json").read_text()) for r in (0, 1)]
    assert [n["rank"] for n in notices] == [0, 1]
    # Each rank read the file (whether the signal or the file woke it first is a race the script need not care about)
    assert all(n["node_rank"] == 1 and n["deadline_s"] == told["deadline_s"] for n in notices)
    step = notices[0]["step"]
    assert step > 10 and notices[1]["step"] == step  # both stopped at the same step
    assert torch.load(tmp_path / "checkpoint" / "state.pt")["step"] == step  # the notice's own checkpoint
    assert output.count(f"saving at step {step}") == 2
    assert not Path(launcher.notice_dir).exists()  # stop cleans up the launcher's notice directory
