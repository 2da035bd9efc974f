"""Hangs that act: a watchdog over every rank's steps, for the DDP and FSDP jobs (and any Ray Train loop).

A rank stuck in a collective keeps a run RUNNING while its GPUs burn money. Here:

  * each rank's loop says where it is: `steps.enter()` before a step, `steps.leave()` after it (two
    counters and a clock read);
  * a thread per rank sends that every BEAT_S to the run's `Coordinator`, a Ray actor the driver starts
    (`watching`), named after the run, that outlives Ray Train's restarts of the worker group; it takes only
    well-formed beats from the run's own workers (rayfleet/train/control/hang_beats.py: any job can find it by name);
  * the coordinator `judge`s: hung when a rank is inside a step and no rank has finished one for
    max(factor x the median step time, floor_s). The ranks that did not arrive are those that entered fewer
    steps than the most advanced rank (one stuck outside the step, in a collective the others never join),
    else every rank inside a step;
  * on a hang the driver prints one "hang:" line with the evidence (per rank: node, steps entered and
    finished, seconds since its last step; the recipe watcher notifies with it) and appends it to
    `<run>/hangs.jsonl`, and the thread of each rank that did not arrive marks its node suspect: with the
    ECS worker's entry point beside it (RAYFLEET_CURRENT_RUN_DIR), `suspect.json` there, and the entry point
    drains the node like a preemption and has the control task replace its instance (rayfleet/node/control/suspect.py);
    elsewhere (a local cluster's node) it asks Ray to drain the node itself (rayfleet/core/ray_drain.py).
    At the drain's deadline Ray Train restarts the group on the other nodes, from the last checkpoint;
  * a hang after `max_heals` heals ends the run: the driver aborts it and the run fails with the evidence;
  * while a hang verdict holds, a marker actor tells the control task, whose autostop then does not count
    the run as work (rayfleet/core/hung_runs.py).

Not judged: each rank's first step of an attempt (compile, data loading) and the time between steps
(evaluation, checkpoints). A process frozen whole (its Python threads included) sends no more beats: its
last one is the evidence, but nothing on its node acts. On GPUs, Ray's NCCL hang detector runs too
(RAY_TRAIN_ENABLE_NCCL_HANG_DETECTOR, set by rayfleet/train/fit.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import ray

from rayfleet.core import hung_runs, ray_drain
from rayfleet.core.errors import RayfleetError
from rayfleet.core.run_dir import RunDir
from rayfleet.train.control import hang_beats

BEAT_S = 1.0
HANGS_FILE = "hangs.jsonl"
SUSPECT_FILE = "suspect.json"  # the format rayfleet/node/control/suspect.py reads
DRAIN_DEADLINE_S = 30  # what a drained hung node gives Ray Train before it restarts the group


def coordinator_name(run_name: str) -> str:
    return f"rayfleet-hang-watch-{run_name}"


class HangGaveUp(RayfleetError):
    """The run hung again after its heals: it was stopped."""


def judge(beats: dict[int, dict], now: float, factor: float, floor_s: float) -> dict | None:
    """The verdict on the latest beat of every rank: None, or the evidence of a hang (see the module doc)."""
    if not beats or any(b["done"] == 0 for b in beats.values()):
        return None
    inside = sorted(rank for rank, b in beats.items() if b["entered"] > b["done"])
    if not inside:
        return None
    times = [b["step_s"] for b in beats.values() if b.get("step_s")]
    window = max(factor * statistics.median(times) if times else 0.0, floor_s)
    silent = now - max(b["done_at"] for b in beats.values())
    if silent < window:
        return None
    most = max(b["entered"] for b in beats.values())
    laggards = sorted(rank for rank, b in beats.items() if b["entered"] < most) or inside
    ranks = {
        rank: {
            "node": b["node_ip"],
            "node_id": b["node_id"][:12],
            "worker": b["worker"],  # the process: a verdict is acted on only by the process it names
            "entered": b["entered"],  # steps of this attempt (its processes), not the run's step numbers
            "finished": b["done"],
            "since_last_step_s": round(now - b["done_at"], 1),
        }
        for rank, b in sorted(beats.items())
    }
    return {"window_s": round(window, 1), "silent_s": round(silent, 1), "laggards": laggards, "ranks": ranks}


def describe(hang: dict) -> str:
    """One line of evidence: who did not arrive, where, at which step."""
    ranks = hang["ranks"]
    who = ", ".join(f"rank {r} on {ranks[r]['node']} (finished {ranks[r]['finished']})" for r in hang["laggards"])
    most = max(r["entered"] for r in ranks.values())
    return (
        f"no step finished for {hang['silent_s']:.0f} s (window {hang['window_s']:.0f} s); at step {most} of this "
        f"attempt: {who}"
    )


class Coordinator:
    """The run's judge, one per run, in the driver's job (create with `ray.remote(Coordinator)`). Counts heals
    across attempts: a new attempt shows itself by new worker processes in the beats."""

    def __init__(self, factor: float, floor_s: float, max_heals: int, clock=time.time, senders=None):
        self.factor, self.floor_s, self.max_heals, self.clock = factor, floor_s, max_heals, clock
        # Only the run's own workers' beats count (any job can find this actor by its name): hang_beats.py.
        self.senders = senders if senders is not None else hang_beats.RunWorkers()
        self.beats: dict[int, dict] = {}
        self.workers: dict[int, str] = {}
        self.hang: dict | None = None
        self.heals = 0
        self.refused: dict[str, int] = {}  # why -> beats refused, for the evidence

    def beat(self, beat: dict) -> None:
        why = hang_beats.well_formed(beat, self.clock())
        if why is None and not self.senders(beat):
            why = "not a worker of this run"
        if why is not None:
            if why not in self.refused:
                print(f"hang watch: a beat refused: {why}", flush=True)
            self.refused[why] = self.refused.get(why, 0) + 1
            return
        rank = beat["rank"]
        if rank in self.workers and self.workers[rank] != beat["worker"]:  # the group was restarted
            self.beats, self.workers, self.hang = {}, {}, None
        self.workers[rank] = beat["worker"]
        self.beats[rank] = beat

    def verdict(self) -> dict | None:
        """The hang of the current attempt, once judged (then fixed until the next attempt), with `action`:
        heal (its laggards' nodes are marked suspect) or fail (the heals are spent)."""
        if self.hang is None:
            found = judge(self.beats, self.clock(), self.factor, self.floor_s)
            if found is not None:
                action = "heal" if self.heals < self.max_heals else "fail"
                self.heals += action == "heal"
                self.hang = {**found, "action": action, "heals": self.heals, "at": self.clock()}
        return self.hang


class Steps:
    """One rank's place in its loop, and the thread that reports it (`start`). Without a coordinator (the loop
    run outside `watching`), `enter` and `leave` still count and nothing is sent."""

    def __init__(self, rank: int, clock=time.time):
        self.rank, self.clock = rank, clock
        self.entered = self.done = 0
        self.done_at = clock()
        self.times: deque[float] = deque(maxlen=50)
        self.stop = threading.Event()
        self.acted = False

    def enter(self) -> None:
        self.entered += 1

    def leave(self) -> None:
        now = self.clock()
        if self.done:
            self.times.append(now - self.done_at)
        self.done, self.done_at = self.done + 1, now

    def where(self) -> dict:
        """This process's node and id, asked of Ray once: they do not change while it lives."""
        if not hasattr(self, "_where"):
            context = ray.get_runtime_context()
            node_id = context.get_node_id()
            # actor_id: this Ray Train worker, by which the coordinator checks that the beat is the run's own
            self._where = {
                "worker": f"{node_id}:{os.getpid()}",
                "node_id": node_id,
                "node_ip": ray.util.get_node_ip_address(),
                "actor_id": context.get_actor_id() or "",
            }
        return self._where

    def snapshot(self) -> dict:
        return {
            "rank": self.rank,
            **self.where(),
            "entered": self.entered,
            "done": self.done,
            "done_at": self.done_at,
            "step_s": statistics.median(self.times) if self.times else None,
        }

    @classmethod
    def start(cls, run_name: str, rank: int) -> Steps:
        """This rank's progress, reported to the run's coordinator when there is one."""
        steps = cls(rank)
        try:
            coordinator = ray.get_actor(coordinator_name(run_name))
        except ValueError:  # no watchdog for this run
            return steps
        threading.Thread(target=steps._report, args=(coordinator,), daemon=True, name="hang-watch").start()
        return steps

    def close(self) -> None:
        self.stop.set()

    def _report(self, coordinator) -> None:
        while not self.stop.wait(BEAT_S):
            try:
                coordinator.beat.remote(self.snapshot())
                hang = ray.get(coordinator.verdict.remote(), timeout=30)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                continue  # the driver is gone or busy: the next beat tries again
            if self.acted or not hang or hang["action"] != "heal" or self.rank not in hang["laggards"]:
                continue
            # Only a verdict on this very process: never one on an earlier attempt's rank of the same number.
            if hang["ranks"][self.rank]["worker"] == self.where()["worker"]:
                self.acted = True
                print(f"[hang watch] rank {self.rank}: {mark_suspect(describe(hang))}", flush=True)


def mark_suspect(evidence: str, env: dict | None = None) -> str:
    """Take this rank's node out of the run: through the ECS worker's entry point when it watches this node
    (RAYFLEET_CURRENT_RUN_DIR), else by asking Ray to drain it. What was done, one line."""
    env = os.environ if env is None else env
    reasons = {"reasons": [f"hang: {evidence}"], "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    marks = env.get("RAYFLEET_CURRENT_RUN_DIR")
    if marks and Path(marks).is_dir():
        path = Path(marks) / SUSPECT_FILE
        partial = path.with_name(f".{SUSPECT_FILE}.partial")
        partial.write_text(json.dumps(reasons))
        os.replace(partial, path)
        return f"marked node {socket.gethostname()} suspect ({path}): its entry point drains it"
    context = ray.get_runtime_context()
    problem = ray_drain.request(context.gcs_address, context.get_node_id(), f"node suspect: hang: {evidence}",
                                DRAIN_DEADLINE_S)  # fmt: skip
    return problem or f"drained node {context.get_node_id()[:12]}: the group restarts elsewhere in {DRAIN_DEADLINE_S} s"


class _Hung:
    """Alive while the run is hung: what the control task sees (rayfleet/core/hung_runs.py)."""


def show_hung(run_name: str, shown: dict, hung: bool) -> None:
    """Start or stop the run's hung marker actor to match the verdict (a failure only costs autostop's view)."""
    try:
        if hung and "actor" not in shown:
            shown["actor"] = ray.remote(_Hung).options(name=hung_runs.marker(run_name), num_cpus=0).remote()
        elif not hung and "actor" in shown:
            ray.kill(shown.pop("actor"))
    except (ValueError, ray.exceptions.RayError) as exc:
        print(f"hang watch: the hung marker: {type(exc).__name__}: {exc}", flush=True)


@contextmanager
def watching(run_name: str, run_dir: RunDir, factor: float, floor_s: float, max_heals: int) -> Iterator[None]:
    """In the driver, around the trainer's fit(): starts the run's coordinator and a thread that reports its
    verdicts; a hang past the heals aborts the run (SIGINT to this process, Ray Train's own graceful abort)
    and raises HangGaveUp with the evidence when the block ends."""
    coordinator = (
        ray.remote(Coordinator)
        .options(name=coordinator_name(run_name), num_cpus=0)  # one call at a time, each caller's in order
        .remote(factor, floor_s, max_heals)
    )
    stop, seen, shown = threading.Event(), {}, {}

    def follow() -> None:
        while not stop.wait(2 * BEAT_S):
            try:
                hang = ray.get(coordinator.verdict.remote(), timeout=30)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                continue
            show_hung(run_name, shown, bool(hang))
            if not hang or hang["at"] in seen:
                continue
            seen[hang["at"]] = hang
            print(f"hang: {describe(hang)}; {hang['action']} ({hang['heals']} heal(s) so far)", flush=True)
            try:
                run_dir.write(HANGS_FILE, "".join(json.dumps(h) + "\n" for h in seen.values()))
            except (OSError, RayfleetError) as exc:  # the evidence is in the output too
                print(f"hang: could not write {HANGS_FILE}: {exc}", flush=True)
            if hang["action"] == "fail":
                os.kill(os.getpid(), signal.SIGINT)  # Ray Train's SIGINT handler aborts the run gracefully
                return

    thread = threading.Thread(target=follow, daemon=True, name="hang-watch-driver")
    thread.start()
    error = None
    try:
        yield
    except BaseException as exc:  # an aborted run may end in an error of Ray Train's: the hang is the cause
        error = exc
    finally:
        stop.set()
        thread.join(timeout=10)
        ray.kill(coordinator)
        show_hung(run_name, shown, False)
    failed = [h for h in seen.values() if h["action"] == "fail"]
    if failed:
        raise HangGaveUp(f"the run hung again after {max_heals} heal(s): {describe(failed[-1])}") from error
    if error is not None:
        raise error
