"""A queued run's wait for the cluster, in the run's own job (rayfleet/recipes/job_entry.py), before its command.

The submitter (rayfleet/recipes/job.py) starts the job as `job_entry --queue '<spec>'`: the queue's root and
the run's entry (priority, submission time, workers and their size). The job then:
1. writes its entry and refreshes it every HEARTBEAT_S (rayfleet/core/run_queue.py: the order and the rules);
2. while another run is ahead, says why once per change ("[rayfleet] queued: position 2 of 3: behind ...");
3. when it is first and the queue's budget (if any) has room for its projected cost (else it is HELD, steps
   aside, and is judged again as the spending changes), asks Ray for its whole placement group (every worker
   at once: gang admission) and gives it back at once; if Ray cannot place all of it, it waits with that
   reason, holding nothing;
4. admitted, it starts the command and keeps its entry until Ray has placed the run's workers (a placement
   group created since the admission), so the next run never races it for the same workers;
5. removes its entry when the command ends, is stopped, or is cancelled while it waits (`rayfleet cancel`:
   exit 130, the run recorded CANCELLED); a run that cost money writes what it held into the queue's ledger.

Every job may write under queue/, so the entries of the others are checked as they are read (rayfleet/core/
run_queue_checks.py): one that is not an entry is ignored with one warning, and one counts only while the run
it names has a live Ray job (Ray's job list: rayfleet/recipes/run_queue_liveness.py), so a forged or left-over
entry cannot hold every run behind it. RAYFLEET_MAX_PRIORITY of the job's environment (the trainer task's on
ECS) clamps the priorities it reads, as the control task does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict

from rayfleet.core import ray_start, stop_request
from rayfleet.core.errors import ConfigError
from rayfleet.core.run_dir import RunDir
from rayfleet.core.run_queue import (
    ADMITTED,
    BUDGET_VAR,
    HEARTBEAT_S,
    HELD,
    PLACE_TIMEOUT_S,
    RUNNING,
    WAITING,
    Budget,
    Entry,
    Queue,
    over_budget,
    shares_workers,
    verdict,
)
from rayfleet.core.run_queue_checks import Alive, max_priority_from
from rayfleet.recipes.group_move import GroupMove
from rayfleet.recipes.placement import placed_since, probe
from rayfleet.recipes.run_queue_liveness import Liveness

EXIT_CANCELLED = 130
BUDGET_CHECK_S = 30.0  # how often the queue's spending is read again (a listing of its ledger)


def say(message: str) -> None:
    print(f"[rayfleet] {message}", flush=True)


def spec(root: str, entry: Entry, budget: Budget | None = None, move: GroupMove | None = None) -> str:
    """job_entry's --queue value: where the queue is, its budget, the run's entry, and the other worker groups it
    may move to (rayfleet/recipes/group_move.py)."""
    value = {"root": root, "entry": asdict(entry), "budget": asdict(budget) if budget else None}
    return json.dumps({**value, **({"move": move.spec()} if move else {})})


def move_of(text: str) -> GroupMove | None:
    """The group move job_entry's --queue value carries, if any."""
    return GroupMove.from_spec(json.loads(text).get("move"))


def parse(text: str, env: dict) -> tuple[Queue, Entry]:
    """job_entry's --queue value (see `spec`), with the Jobs API's id of this job from `env`."""
    value = json.loads(text)
    entry = Entry(**value["entry"])
    entry.submission_id = env.get("RAY_JOB_SUBMISSION_ID") or entry.submission_id
    budget = Budget(**value["budget"]) if value.get("budget") else None
    ceiling = max_priority_from(env)
    if entry.priority > ceiling:  # as every other reader sees it: two runs that each put themselves first would race
        say(f"queue: priority {entry.priority} is above this deployment's highest ({ceiling}): queued at {ceiling}")
        entry.priority = ceiling
    return Queue(value["root"], budget, max_priority=ceiling), entry


def budget_from(env: dict, entry: Entry) -> Budget | None:
    """The queue's budget the submitter has (RAYFLEET_QUEUE_BUDGET; on ECS the trainer task's, from Terraform),
    checked against the run before anything is submitted: ConfigError (exit 2), one line."""
    try:
        budget = Budget.parse(env.get(BUDGET_VAR))
        over_budget(entry, budget, 0.0)  # only for its refusal of a run that no budget can be checked against
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return budget


def wait_turn(
    queue: Queue,
    entry: Entry,
    run_dir: RunDir,
    try_place: Callable[[Entry], bool] = probe,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    alive: Callable[[set[str]], Alive | None] | None = None,
    move: GroupMove | None = None,
) -> str | None:
    """Wait until the run is admitted (returns None) or cancelled (returns the reason); the entry stays.
    `alive`: the runs with a live job, given the names the entries have (None: every fresh entry counts).
    `move`: the other worker groups the run goes to when it waits too long in its own group's line."""
    said = None
    held_by = _Spending(queue, clock)
    while True:
        cancelled = stop_request.requested(run_dir)
        if cancelled:
            return cancelled
        now = clock()
        others = _others(queue, entry, now, alive)
        if entry.state == HELD:
            reason = held_by(entry, others)
            if reason is None:
                entry.state = WAITING
        if entry.state == WAITING:
            first, reason = verdict(entry.run, [*others, entry], now)
            held = held_by(entry, others) if first else None
            if held:
                entry.state, reason = HELD, held  # it steps aside: the runs behind it may go
            elif first and try_place(entry):
                entry.state, entry.admitted_at, entry.reason = ADMITTED, clock(), "placing its workers"
                entry.heartbeat_at = clock()
                queue.put(entry)
                return None
            elif first:
                reason = f"{reason}; waiting for {entry.resources()} to be free at once"
            if entry.state == WAITING and move is not None and move.step(entry, reason, now, run_dir, say):
                entry.reason, entry.heartbeat_at = "moved to another worker group", now
                queue.put(entry)  # its new group's line, at once: the next look judges it there
                continue
        if entry.state != WAITING and move is not None:
            move.pause()
        if reason != said:
            say(f"queued: {reason}")
            said = reason
        if reason != entry.reason or now - entry.heartbeat_at >= HEARTBEAT_S:  # one write per change or beat
            entry.reason, entry.heartbeat_at = reason, now
            queue.put(entry)
        sleep(1.0)


def _others(queue: Queue, entry: Entry, now: float, alive: Callable[[set[str]], Alive | None] | None) -> list[Entry]:
    found = [e for e in queue.entries(now) if e.run != entry.run]
    if alive is None or not found:
        return found
    return queue.counting(found, alive({e.run for e in found}))


class _Spending:
    """Why the queue's budget holds a run, or None: what the ended runs held (the ledger, read at most every
    BUDGET_CHECK_S) and what the running ones may still spend, against the budget."""

    def __init__(self, queue: Queue, clock: Callable[[], float]):
        self.queue, self.clock = queue, clock
        self.read_at, self.ledger = -BUDGET_CHECK_S, 0.0

    def __call__(self, entry: Entry, others: list[Entry]) -> str | None:
        budget = self.queue.budget
        if budget is None:
            return None
        now = self.clock()
        since = budget.since(now)
        if now - self.read_at >= BUDGET_CHECK_S:
            self.read_at, self.ledger = now, self.queue.spent(since, now, entries=[])
        # a running run counts for its projected cost, not what it has spent yet: the budget is reserved
        reserved = sum(max(e.spent_usd(now, since), e.max_usd or 0.0) for e in others if e.state in (ADMITTED, RUNNING))
        return over_budget(entry, budget, self.ledger + reserved)


@contextmanager
def holding(queue: Queue, entry: Entry, is_placed: Callable[[], bool], clock=time.time):
    """While the admitted run runs: its entry refreshed, marked placed once Ray has its workers; removed after."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            if not entry.placed:
                try:
                    entry.placed = is_placed()
                except Exception as exc:  # the state API away a moment: ask again at the next beat
                    say(f"queue: could not ask Ray for placement groups ({type(exc).__name__})")
            if not entry.placed and clock() - (entry.admitted_at or 0) > PLACE_TIMEOUT_S:
                entry.placed = True  # it blocks the queue no longer (rayfleet/core/run_queue.py)
            if entry.placed:
                entry.state, entry.reason = RUNNING, "running"
            entry.heartbeat_at = clock()
            queue.put(entry)

    thread = threading.Thread(target=beat, name="rayfleet-queue-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=HEARTBEAT_S * 2)
        if entry.usd_per_hour > 0:
            queue.record_spent(entry, clock())
        queue.remove(entry.run)


def run_child(command: str, env: dict) -> int:
    """The command in a child shell (the queue's heartbeat outlives an exec), signals passed on."""
    from rayfleet.recipes.watch import forward

    child = subprocess.Popen(["/bin/sh", "-c", command], env=env)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda s, _frame: forward(child.pid, s))
    return child.wait()


def _raise_on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt("SIGTERM")


def admit(queue: Queue, entry: Entry, run_dir: RunDir, move: GroupMove | None = None) -> Callable[[], bool] | str:
    """Wait for the run's turn and placement. Admitted: the test of whether Ray has placed the run's workers
    (for `holding`); else why not. A stop while waiting (the Jobs API's SIGTERM, Ctrl-C) removes the entry.
    With `move`, the entry's group is where it was admitted (see `wait_turn`)."""
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    entry.heartbeat_at = time.time()
    queue.put(entry)
    try:
        waited = time.monotonic()
        if alone(queue, entry, run_dir):
            line = f" of worker group {entry.group}" if entry.group else ""
            say(f"admitted at once: no other run in the queue{line}; Ray places all {entry.resources()} together")
        else:
            with bare_driver():
                cancelled = wait_turn(queue, entry, run_dir, alive=Liveness(say), move=move)
                if cancelled:
                    queue.remove(entry.run)
                    return cancelled
            say(f"admitted after {time.monotonic() - waited:.1f} s in the queue: all {entry.resources()} can be placed")
        waited_s = time.monotonic() - waited
        # where it was admitted: a retry starts on the recipe's group again, and may move again; how long it
        # waited, for the run's goodput ledger (rayfleet/core/ledger.py)
        group = {"group": entry.group} if entry.group else {}
        run_dir.send("admitted", state="RUNNING", queue_wait_s=round(waited_s, 6), **group)
        return placed_since(entry.admitted_at)
    except BaseException:
        queue.remove(entry.run)
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def alone(queue: Queue, entry: Entry, run_dir: RunDir, clock: Callable[[], float] = time.time) -> bool:
    """Admit the run at once, asking Ray nothing, when no other entry in the queue shares its workers (another
    worker group's runs do not: core/run_queue.py `shares_workers`; its own entry is written first,
    so of two runs that start together at least one sees the other and waits its turn), no stop is asked, and
    the budget has room. The probe orders runs against each other; alone, it would only ask Ray what the run's
    own placement group asks next, gang placement included, and cost the run's start a Ray driver of its own
    (about 1.2 s on a 2-core machine: bench/RESULTS.md). Not admitted: `wait_turn` decides, as for every run."""
    now = clock()
    others = [e for e in queue.entries(now) if e.run != entry.run]
    if any(shares_workers(e, entry) for e in others) or stop_request.requested(run_dir):
        return False
    # every group's runs spend one budget; held here, `wait_turn` judges again with the runs Ray knows are live
    if entry.state != WAITING or _Spending(queue, clock)(entry, others) is not None:
        return False
    entry.state, entry.admitted_at, entry.reason = ADMITTED, now, "placing its workers"
    entry.heartbeat_at = now
    queue.put(entry)
    return True


@contextmanager
def bare_driver():
    """A Ray driver of its own for the probes, without the job's runtime_env. A driver with it would install
    that again on every node; where nodes share a disk (the local cluster), one of them unpacks the code and
    rebuilds the pip environment in place, under the command about to start in them. Without that job config
    (it carries the submission's id in its metadata) it is no driver of the submission either: Ray's job list
    names one driver per submission, and the control task matches a hung run's marker to that driver's job id
    (rayfleet/core/hung_runs.py), which must be the training driver's."""
    import ray

    job_config = os.environ.pop(ray_start.JOB_CONFIG_VAR, None)
    try:
        address, node = os.environ.get("RAY_ADDRESS") or "auto", ray_start.driver_init_kwargs(os.environ)
        ray.init(address=address, log_to_driver=False, logging_level="WARNING", **node)
        yield
    finally:
        ray.shutdown()
        if job_config is not None:
            os.environ[ray_start.JOB_CONFIG_VAR] = job_config


def cancelled_exit(run: str, reason: str) -> int:
    print(f"[rayfleet] run {run}: {reason} while queued; it never started", file=sys.stderr, flush=True)
    return EXIT_CANCELLED


def entry_for(recipe, run: str, usd_per_hour: float = 0.0, clock: Callable[[], float] = time.time) -> Entry:
    """The queue entry a recipe's run starts with (`recipe`: rayfleet.recipes.schema.Recipe), at the hourly
    price of what it holds; its projected cost is the lower of its own bounds."""
    import getpass
    import socket

    res = recipe.resources
    return Entry(
        run=run,
        priority=recipe.priority,
        submitted_at=clock(),
        workers=res.fewest,  # gang admission of an elastic run: its minimum; Ray Train grows it later
        cpus_per_worker=res.cpus_per_worker,
        gpus_per_worker=res.gpus_per_worker,
        one_per_node=recipe.launcher is not None,
        who=f"{getpass.getuser()}@{socket.gethostname()}",
        recipe=recipe.name,
        usd_per_hour=usd_per_hour,
        max_usd=_projected(recipe.max_hours, recipe.max_cost_usd, usd_per_hour),
        max_hours=recipe.max_hours,
        group=res.group or "",
    )


def _projected(max_hours: float | None, max_cost_usd: float | None, usd_per_hour: float) -> float | None:
    bounds = [b for b in (max_cost_usd, max_hours * usd_per_hour if max_hours is not None else None) if b is not None]
    return min(bounds) if bounds else None
