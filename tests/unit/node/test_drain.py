"""A worker's drain before its instance goes (rayfleet/node/drain.py, started by rayfleet/node/ray_node.py
on SIGTERM or a Spot notice), piece by piece: the notice file, the deadline, the drain request as Ray's own
`ray drain-node` sends it (only its GCS client is a stand-in), the wait for the node's work to go, and the two
triggers through the worker's main loop, with a stand-in `ray start` process tree. End to end, on a local
cluster: tests/integration/test_preemption_on_local_cluster.py (check_the_node)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import psutil
import pytest
import ray
from ray._private import ray_constants

from rayfleet.core import ray_drain
from rayfleet.node import drain, ray_node
from rayfleet.node.control import suspect

NODE_ID = "5f1c0a9e" * 7  # 28 bytes in hex, as Ray's node ids (its CLI refuses anything else)
GCS = "10.0.0.5:6379"
SIGTERM_REASON = "the task was stopped (SIGTERM)"
# What the entry point logs, and the end-to-end test reads back (check_the_node)
DRAINING = re.compile(r"draining node (\w+) for preemption \((.*)\): deadline in (\d+) s")
IDLE = ray_constants.WORKER_PROCESS_TYPE_IDLE_WORKER  # "ray::IDLE": a worker process that runs nothing
IDLE_SPILL = ray_constants.WORKER_PROCESS_TYPE_SPILL_WORKER_IDLE
AGENTS = (ray_constants.AGENT_PROCESS_TYPE_DASHBOARD_AGENT, ray_constants.AGENT_PROCESS_TYPE_RUNTIME_ENV_AGENT)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def imds_time(seconds_from_now: float) -> str:
    """A time as IMDS's spot/instance-action gives it (whole seconds, UTC, Z)."""
    return datetime.fromtimestamp(time.time() + seconds_from_now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def wait_for(predicate, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- the Spot notice file -----------------------------------------------------------------------------------


def test_an_imds_notice_reads_as_its_action_and_the_seconds_left(tmp_path):
    """The poller's file (IMDS's spot/instance-action, verbatim) gives the reason and the time left to the second."""
    path = tmp_path / "spot-action.json"
    path.write_text('{"action": "terminate", "time": "2027-01-15T08:22:00Z"}\n')
    when = datetime(2027, 1, 15, 8, 22, tzinfo=UTC).timestamp()
    assert drain.spot_notice(path, now=when - 120) == (
        "Spot interruption notice: terminate at 2027-01-15T08:22:00Z",
        120.0,
    )


def test_a_notice_names_its_action_and_terminate_is_assumed_when_it_names_none(tmp_path):
    """A stop or hibernate notice says so; one without an action reads as terminate; an offset time is read too."""
    path = tmp_path / "spot-action.json"
    path.write_text(json.dumps({"action": "stop", "time": "2027-01-15T08:22:00+00:00"}))
    reason, left = drain.spot_notice(path, now=datetime(2027, 1, 15, 8, 21, tzinfo=UTC).timestamp())
    assert reason == "Spot interruption notice: stop at 2027-01-15T08:22:00+00:00" and left == 60.0
    path.write_text(json.dumps({"time": "2027-01-15T08:22:00Z"}))
    assert drain.spot_notice(path, now=0)[0] == "Spot interruption notice: terminate at 2027-01-15T08:22:00Z"


def test_without_a_given_time_the_time_left_is_counted_from_the_wall_clock(tmp_path):
    """The entry point's poller passes no `now`: the time left is from time.time(), as the end-to-end notice is."""
    path = tmp_path / "spot-action.json"
    when = imds_time(60)
    path.write_text(json.dumps({"action": "terminate", "time": when}))
    before = time.time()
    _, left = drain.spot_notice(path)
    when_s = datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
    assert when_s - time.time() <= left <= when_s - before  # counted from the wall clock while it read


@pytest.mark.parametrize(
    "content",
    [None, "", '{"action": "terminate", "ti', "not json", b"\xff\xfe"],
    ids=["absent", "empty", "cut short", "not json", "not utf-8"],
)
def test_no_notice_when_the_file_is_absent_or_unreadable(tmp_path, content):
    """An on-demand instance has no file; a file that is not JSON is no notice either (None, not an error)."""
    path = tmp_path / "spot-action.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    assert drain.spot_notice(path) is None


def test_a_directory_in_the_files_place_is_no_notice(tmp_path):
    """An OSError other than a missing file (here: a directory) is no notice either."""
    assert drain.spot_notice(tmp_path) is None


@pytest.mark.parametrize(
    "content",
    ['{"action": "terminate"}', '{"time": "soon"}', "[]", '{"time": 1800000000}'],
    ids=["no time", "bad time", "not an object", "time not a string"],
)
def test_a_notice_without_a_valid_time_is_no_notice(tmp_path, content):
    """JSON that is not IMDS's notice reads as no notice, like any other unreadable file."""
    path = tmp_path / "spot-action.json"
    path.write_text(content)
    assert drain.spot_notice(path) is None


def test_an_old_notice_still_drains_at_once(tmp_path):
    """A notice whose time has passed gives a negative time left, still a notice: the drain's deadline is 1 s."""
    path = tmp_path / "spot-action.json"
    path.write_text(json.dumps({"action": "terminate", "time": "2027-01-15T08:22:00Z"}))
    reason, left = drain.spot_notice(path, now=datetime(2027, 1, 15, 8, 25, tzinfo=UTC).timestamp())
    assert reason.startswith("Spot interruption notice: terminate at") and left == -180.0
    assert drain.deadline_for(left, drain.DEFAULT_DEADLINE_S) == 1


# -- the deadline ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("left_s", "default_s", "expected"),
    [
        (None, 100, 100),  # SIGTERM: the default
        (None, 25.9, 25),  # whole seconds
        (40, 100, 40 - drain.SPOT_MARGIN_S),  # a Spot notice: the time left less the margin
        (40.9, 100, 25),  # rounded down: never past the instance's end
        (300, 100, 100),  # never more than the default
        (drain.SPOT_MARGIN_S + 0.5, 100, 1),  # at least 1 s: Ray reads 0 as "no deadline"
        (-30, 100, 1),
    ],
)
def test_the_deadline_is_the_default_or_the_time_left_less_the_margin(left_s, default_s, expected):
    """deadline_for: the default after SIGTERM; a notice's time left less SPOT_MARGIN_S, between 1 s and the default."""
    assert drain.deadline_for(left_s, default_s) == expected


def test_the_default_deadline_leaves_ray_time_to_stop_before_sigkill():
    """After SIGTERM, Ray's deadline ends before ECS's SIGKILL (the stopTimeout), with time left to stop Ray."""
    assert 0 < drain.DEFAULT_DEADLINE_S < drain.STOP_TIMEOUT_S


# -- the drain request, through Ray's own CLI ---------------------------------------------------------------------


class Drain(NamedTuple):
    node_id: str
    reason: int
    message: str
    deadline_ms: int


class Gcs:
    """Stands in for ray._raylet.GcsClient, the one call out of Ray's `ray drain-node`: records each drain and
    accepts it, or refuses it with `refusal`."""

    def __init__(self) -> None:
        self.addresses: list[str] = []
        self.drains: list[Drain] = []
        self.refusal: str | None = None

    def client(self, address: str) -> Gcs:
        self.addresses.append(address)
        return self

    def internal_kv_get(self, key, namespace=None) -> bytes:  # the CLI's version check reads the cluster's
        return json.dumps({"ray_version": ray.__version__}).encode()

    def drain_node(self, node_id: str, reason: int, message: str, deadline_ms: int) -> tuple[bool, str]:
        self.drains.append(Drain(node_id, reason, message, deadline_ms))
        return self.refusal is None, self.refusal or ""


@pytest.fixture
def gcs(monkeypatch):
    """ray_drain.request's `ray drain-node` runs Ray's real CLI in this process, against a stand-in GcsClient."""
    from click.testing import CliRunner
    from ray.scripts import scripts

    fake = Gcs()

    def run(command, capture_output=False, text=False, timeout=None):
        assert command[:2] == ["ray", "drain-node"] and capture_output and text and timeout
        result = CliRunner().invoke(scripts.cli, command[1:])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception  # the stand-in is missing something Ray calls: say so
        return subprocess.CompletedProcess(command, result.exit_code, result.stdout, result.stderr)

    monkeypatch.setattr(ray._raylet, "GcsClient", fake.client)
    monkeypatch.setattr(ray_drain, "subprocess", SimpleNamespace(run=run, TimeoutExpired=subprocess.TimeoutExpired))
    return fake


def preemption() -> int:
    from ray.core.generated import autoscaler_pb2

    return autoscaler_pb2.DRAIN_NODE_REASON_PREEMPTION


def test_the_drain_request_reaches_the_gcs_with_the_node_the_reason_and_the_deadline(gcs):
    """Ray's CLI accepts the request's flags and asks the joined head's GCS to drain this node, for PREEMPTION,
    with the message Ray records on the node's end ("Terminated due to preemption: <message>") and the deadline."""
    before = now_ms()
    assert ray_drain.request(GCS, NODE_ID, SIGTERM_REASON, 25) is None
    after = now_ms()
    assert gcs.addresses == [GCS]
    [sent] = gcs.drains
    assert (sent.node_id, sent.reason, sent.message) == (NODE_ID, preemption(), SIGTERM_REASON)
    assert before + 25_000 <= sent.deadline_ms <= after + 25_000


@pytest.mark.parametrize("deadline_s", [0, -7])
def test_a_drain_always_has_a_deadline(gcs, deadline_s):
    """A deadline of 0 s or less is sent as 1 s: Ray reads 0 as "no deadline" (Ray Train would wait its own 120 s)
    and refuses a negative one."""
    before = now_ms()
    assert ray_drain.request(GCS, NODE_ID, SIGTERM_REASON, deadline_s) is None
    [sent] = gcs.drains
    assert before + 1000 <= sent.deadline_ms <= now_ms() + 1000


def test_a_refused_drain_comes_back_as_rays_one_line_reason(gcs):
    """When the GCS refuses, request() returns Ray's last line of output, which says why."""
    gcs.refusal = "The node is already being drained."
    problem = ray_drain.request(GCS, NODE_ID, SIGTERM_REASON, 25)
    assert problem == "Error: The drain request is not accepted: The node is already being drained."
    assert len(gcs.drains) == 1


def test_a_ray_that_does_not_answer_is_a_problem_not_a_hang(monkeypatch):
    """`ray drain-node` is given 60 s; past that the drain is given up with a one-line reason."""
    seen = {}

    def run(command, capture_output, text, timeout):
        seen["timeout"] = timeout
        raise subprocess.TimeoutExpired(command, timeout)

    monkeypatch.setattr(ray_drain, "subprocess", SimpleNamespace(run=run, TimeoutExpired=subprocess.TimeoutExpired))
    assert ray_drain.request(GCS, NODE_ID, SIGTERM_REASON, 25) == "ray drain-node did not answer within 60 s"
    assert seen["timeout"] == 60


# -- the node's own processes: its id and its busy workers -----------------------------------------------------

STAND_IN = '''
"""A stand-in for `ray start --block` on a worker: below it the raylet (its node id on its command line) and,
below the raylet, Ray's worker processes with their titles (`cat` under another argv[0]). The raylet writes
READY once all have started; each stays until its parent goes (its stdin closes), `ray start` until SIGTERM."""
import pathlib, shutil, subprocess, sys, time

role, ready, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
if role == "ray-start":  # rest: the node id, then the workers' titles
    raylet = [sys.executable, "-S", __file__, "raylet", ready, f"--node_id={rest[0]}", *rest[1:]]
    subprocess.Popen(raylet, stdin=subprocess.PIPE)
    time.sleep(120)
else:
    for title in rest[1:]:
        subprocess.Popen([title], executable=shutil.which("cat"), stdin=subprocess.PIPE)
    pathlib.Path(ready).write_text("ready")
    sys.stdin.read()
'''
RUN_WORKERS = ("ray::RayTrainWorker.train_fn", "ray::_TrainingWorker")  # what a DDP run leaves on a node


def stand_in(directory: Path) -> SimpleNamespace:
    """The command of a stand-in `ray start --block` with worker processes of the given titles, and whether all
    its processes run yet."""
    script = directory / "ray_start.py"
    script.write_text(STAND_IN)
    ready = directory / "ready"

    def command(*titles: str) -> list[str]:
        return [sys.executable, "-S", str(script), "ray-start", str(ready), NODE_ID, *titles]

    return SimpleNamespace(command=command, ready=ready.exists)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A running stand-in `ray start`: its raylet and, below the raylet, a run's two workers and idle ones."""
    ray_start = stand_in(tmp_path_factory.mktemp("node"))
    process = subprocess.Popen(ray_start.command(IDLE, RUN_WORKERS[0], IDLE, RUN_WORKERS[1], IDLE_SPILL))
    try:
        wait_for(ray_start.ready)
        yield process
    finally:
        process.kill()
        process.wait()


def gone_pid() -> int:
    """The pid of a `ray start` that has exited."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def test_the_node_id_is_the_raylets_and_only_workers_that_run_something_are_busy(node):
    """own_node_id reads --node_id= off the raylet below `ray start`; busy_workers counts the ray:: processes
    below it at any depth except idle ones (the run's workers are busy until Ray Train restarts them elsewhere)."""
    assert drain.own_node_id(node.pid) == NODE_ID
    assert drain.busy_workers(node.pid) == 2


def test_no_node_id_and_no_work_once_ray_start_is_gone():
    """A `ray start` that has exited has no node to drain and no work left."""
    assert drain.own_node_id(gone_pid()) is None
    assert drain.busy_workers(gone_pid()) == 0


def test_rays_own_agents_are_no_work(tmp_path):
    """A node whose run has gone still has Ray's agents below its raylet, as every Ray node has: no busy workers."""
    ray_start = stand_in(tmp_path)
    process = subprocess.Popen(ray_start.command(*AGENTS, IDLE))
    try:
        wait_for(ray_start.ready)
        assert drain.own_node_id(process.pid) == NODE_ID  # the stand-in runs: only the count is in question
        assert drain.busy_workers(process.pid) == 0
    finally:
        process.kill()
        process.wait()


# -- waiting for the node's work to go ------------------------------------------------------------------------


class Clock:
    """Monotonic seconds that pass only when the code under test sleeps."""

    def __init__(self) -> None:
        self.start = self.now = 5000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    @property
    def elapsed(self) -> float:
        return self.now - self.start


@pytest.fixture
def clock(monkeypatch):
    """A Clock for wait_until_idle; its busy_workers answers `clock.busy(seconds since the drain)`, and records when."""
    fake = Clock()
    fake.busy, fake.asked = (lambda elapsed: 0), []

    def busy_workers(pid: int) -> int:
        assert pid == 4242
        fake.asked.append(fake.elapsed)
        return fake.busy(fake.elapsed)

    # wait_until_idle takes a clock but calls time.sleep itself: drain's `time` becomes the fake's
    monkeypatch.setattr(drain, "time", SimpleNamespace(sleep=fake.sleep, monotonic=fake, time=time.time))
    monkeypatch.setattr(drain, "busy_workers", busy_workers)
    return fake


def test_the_wait_ends_as_soon_as_the_work_is_gone(clock):
    """Busy until 37 s after the drain: the wait ends at the first look after that, well before the deadline."""
    clock.busy = lambda elapsed: 2 if elapsed < 37 else 0
    said = drain.wait_until_idle(4242, deadline_s=100, settle_s=10, clock=clock)
    assert said == "the node's work is gone after 37 s"
    assert clock.elapsed == 37


def test_the_wait_gives_ray_train_the_settle_time_before_it_looks(clock):
    """No busy worker from the start still waits settle_s: Ray Train has not yet seen the notice; nothing is asked
    before that."""
    said = drain.wait_until_idle(4242, deadline_s=100, settle_s=10, clock=clock)
    assert said == "the node's work is gone after 10 s"
    assert clock.asked and min(clock.asked) >= 10


def test_the_wait_gives_up_at_the_deadline(clock):
    """Work that never goes: the wait ends at the deadline (when Ray Train restarts the run elsewhere), not later."""
    clock.busy = lambda elapsed: 2
    said = drain.wait_until_idle(4242, deadline_s=25, settle_s=10, clock=clock)
    assert said == "the deadline of 25 s has passed"
    assert clock.elapsed == 25 and max(clock.asked) < 25


def test_a_deadline_shorter_than_the_settle_time_bounds_the_wait(clock):
    """The deadline bounds the wait even before the settle time is over (a notice with little time left)."""
    said = drain.wait_until_idle(4242, deadline_s=4, settle_s=10, clock=clock)
    assert said == "the deadline of 4 s has passed"
    assert clock.elapsed == 4 and not clock.asked


# -- the drain before the stop (ray_node.drain_first) ----------------------------------------------------------


@pytest.fixture
def waits(monkeypatch):
    """Records drain.wait_until_idle's calls; `waits.during()` runs inside it (while Ray still runs)."""
    record = SimpleNamespace(calls=[], during=lambda pid, deadline: None)

    def wait_until_idle(pid, deadline_s):
        record.calls.append((pid, deadline_s))
        record.during(pid, deadline_s)
        return "the node's work is gone after 12 s"

    monkeypatch.setattr(drain, "wait_until_idle", wait_until_idle)
    return record


@pytest.mark.parametrize(
    ("env", "left_s", "deadline"),
    [
        ({}, None, drain.DEFAULT_DEADLINE_S),
        ({"RAYFLEET_DRAIN_DEADLINE_S": "25"}, None, 25),
        ({}, 40.0, 40 - drain.SPOT_MARGIN_S),
        ({"RAYFLEET_DRAIN_DEADLINE_S": "25"}, 300.0, 25),
    ],
)
def test_before_the_stop_the_node_is_drained_then_waited_for(gcs, waits, node, capsys, env, left_s, deadline):
    """drain_first: drains the raylet's node at the joined head with the reason and the deadline (the default,
    RAYFLEET_DRAIN_DEADLINE_S, or a notice's), then waits for the work until that same deadline."""
    before = now_ms()
    ray_node.drain_first(env, {"address": GCS})(node.pid, "some reason", left_s)
    [sent] = gcs.drains
    assert gcs.addresses == [GCS] and (sent.node_id, sent.message) == (NODE_ID, "some reason")
    assert before + deadline * 1000 <= sent.deadline_ms <= now_ms() + deadline * 1000
    assert waits.calls == [(node.pid, deadline)]
    out = capsys.readouterr().out
    assert DRAINING.search(out).groups() == (NODE_ID, "some reason", str(deadline))
    assert "stopping the Ray node: the node's work is gone after 12 s" in out


def test_a_refused_drain_stops_ray_at_once(gcs, waits, node, capsys):
    """When the GCS refuses the drain, the node says why and does not wait: Ray is stopped at once."""
    gcs.refusal = "Node is dead."
    ray_node.drain_first({}, {"address": GCS})(node.pid, SIGTERM_REASON, None)
    assert len(gcs.drains) == 1 and not waits.calls
    out = capsys.readouterr().out
    assert f"could not drain node {NODE_ID}: Error: The drain request is not accepted: Node is dead.; stopping" in out
    assert not DRAINING.search(out)


def test_no_drain_without_a_raylet_or_a_head(gcs, waits, node, capsys):
    """No raylet below `ray start` (not started yet, or gone) or no head joined: nothing to drain, nothing asked."""
    ray_node.drain_first({}, {"address": GCS})(gone_pid(), SIGTERM_REASON, None)
    ray_node.drain_first({}, {})(node.pid, SIGTERM_REASON, None)
    assert not gcs.drains and not gcs.addresses and not waits.calls
    assert capsys.readouterr().out.count("no Ray node to drain") == 2


def test_the_first_warning_decides_the_reason_and_the_time_left():
    """Node.stop_for keeps the first warning: a SIGTERM after a Spot notice keeps the notice's reason and time left,
    and a notice after a SIGTERM keeps the SIGTERM's (no time left: the default deadline)."""
    spot = "Spot interruption notice: terminate at 2027-01-15T08:22:00Z"
    node = ray_node.Node(before_stop=lambda pid, reason, left_s: None)
    node.stop_for(spot, 40.0)
    node._stop(signal.SIGTERM, None)
    assert (node.stopping, node.reason, node.left_s) == (True, spot, 40.0)
    node = ray_node.Node(before_stop=lambda pid, reason, left_s: None)
    node._stop(signal.SIGTERM, None)
    node.stop_for(spot, 40.0)
    assert (node.stopping, node.reason, node.left_s) == (True, SIGTERM_REASON, None)


# -- the triggers, through the worker's main loop (ray_node.run_worker) ---------------------------------------


@pytest.fixture
def worker(monkeypatch, tmp_path):
    """run_worker with a stand-in `ray start` (a run's two workers below its raylet) joined to a head at 10.0.0.5.
    `worker.poll()` runs at each of the loop's 5-second looks (here every 0.05 s) when there is no notice. The
    SIGTERM/SIGINT handlers run_worker installs are put back afterwards."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    ray_start = stand_in(tmp_path)
    state = SimpleNamespace(poll=lambda: None, notices=tmp_path / "spot-action.json")

    def head_moved(host, port, joined):
        assert (host, port, joined) == ("head.rf.local", 6379, "10.0.0.5")
        if ray_start.ready():  # the node's processes all run: as once Ray has started
            state.poll()
        return None

    monkeypatch.setattr(ray_node, "wait_for_head", lambda host, port, wait_s, stopping: "10.0.0.5")
    monkeypatch.setattr(ray_node, "head_moved", head_moved)
    monkeypatch.setattr(ray_node, "join_command", lambda env, host, block: ray_start.command(*RUN_WORKERS))

    def run(**env) -> int:
        env = {"RAYFLEET_SPOT_NOTICE_FILE": str(state.notices), **env}
        return ray_node.run_worker(env, "head.rf.local", 6379, wait_s=5, watch_s=0.05)

    state.run = run
    yield state
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def ray_still_runs(pid: int) -> bool:
    process = psutil.Process(pid)
    return process.is_running() and process.status() != psutil.STATUS_ZOMBIE


def test_sigterm_drains_with_its_reason_and_the_default_deadline_before_ray_stops(gcs, waits, worker, capsys):
    """ECS's SIGTERM (the handler run_worker installs) drains the node with "the task was stopped (SIGTERM)" and
    RAYFLEET_DRAIN_DEADLINE_S; Ray keeps running through the wait, is stopped after it, and the worker exits 0."""
    worker.poll = lambda: signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    seen = {}

    def during(pid, deadline_s):
        seen["ray"] = psutil.Process(pid)
        seen["running"] = ray_still_runs(pid)

    waits.during = during
    before = now_ms()
    assert worker.run(RAYFLEET_DRAIN_DEADLINE_S="25") == 0
    [sent] = gcs.drains
    assert gcs.addresses == [GCS]  # the head it joined
    assert (sent.node_id, sent.reason, sent.message) == (NODE_ID, preemption(), SIGTERM_REASON)
    assert before + 25_000 <= sent.deadline_ms <= now_ms() + 25_000
    assert waits.calls == [(seen["ray"].pid, 25)]
    assert seen["running"] and not seen["ray"].is_running()  # drained while Ray ran; stopped after the wait
    out = capsys.readouterr().out
    assert DRAINING.search(out).groups() == (NODE_ID, SIGTERM_REASON, "25")
    assert "stopping the Ray node: the node's work is gone after 12 s" in out


def test_a_spot_notice_drains_with_its_reason_and_the_time_left_less_the_margin(gcs, waits, worker, capsys):
    """The notice file appearing while Ray runs drains the node with "Spot interruption notice: terminate at
    <time>" and a deadline of the time left less SPOT_MARGIN_S (the default is longer). ECS's SIGTERM during the
    wait (Spot draining) changes nothing: one drain, the same reason, Ray stopped only after the wait."""
    when = imds_time(25 + drain.SPOT_MARGIN_S)
    worker.poll = lambda: worker.notices.write_text(json.dumps({"action": "terminate", "time": when}))
    seen = {}

    def during(pid, deadline_s):
        seen["ray"] = psutil.Process(pid)
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        seen["running"] = ray_still_runs(pid)

    waits.during = during
    before = now_ms()
    assert worker.run(RAYFLEET_DRAIN_DEADLINE_S="100") == 0
    out = capsys.readouterr().out
    node_id, reason, deadline = DRAINING.search(out).groups()
    assert node_id == NODE_ID and reason == f"Spot interruption notice: terminate at {when}"
    # The time left when the entry point read the notice, less the margin: between what it was when the run
    # started and when it ended (the notice has whole seconds), whatever the host's speed.
    when_s = datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
    latest, earliest = when_s - before / 1000 - drain.SPOT_MARGIN_S, when_s - now_ms() / 1000 - drain.SPOT_MARGIN_S
    assert int(earliest) <= int(deadline) <= int(latest), (earliest, deadline, latest)
    [sent] = gcs.drains
    assert (sent.node_id, sent.reason, sent.message) == (NODE_ID, preemption(), reason)
    assert before + int(deadline) * 1000 <= sent.deadline_ms <= now_ms() + int(deadline) * 1000
    assert waits.calls == [(seen["ray"].pid, int(deadline))]
    assert seen["running"] and not seen["ray"].is_running()
    assert "stopping the Ray node: the node's work is gone after 12 s" in out


def test_the_agents_skipped_are_rays_own_list():
    """RAY_AGENTS is Ray's own list of the agents every raylet starts: a Ray upgrade that adds one fails here."""
    from ray._private import ray_constants

    assert tuple(ray_constants.AGENT_PROCESS_LIST) == drain.RAY_AGENTS


def test_a_suspect_node_drains_naming_its_instance_for_the_control_task(gcs, waits, worker, capsys, tmp_path):
    """The sidecar's suspect file (a bad GPU) appearing while Ray runs drains the node like a preemption, so its
    work checkpoints and moves, with the message "node suspect on <instance>: <reasons>" that the dead node
    keeps in Ray: the control task reads it there and has the instance replaced (head_snapshot.replace_suspects;
    on moto: tests/integration/test_suspect_node_on_moto.py). The worker itself makes no AWS call."""
    health, identity = tmp_path / "health", tmp_path / "identity.json"
    health.mkdir()
    identity.write_text(json.dumps({"instance_id": "i-0abc", "instance_type": "g5.xlarge"}))
    reasons = ["GPU 0 (NVIDIA A10G): 1 uncorrectable ECC error(s)"]
    worker.poll = lambda: (health / "suspect.json").write_text(json.dumps({"reasons": reasons, "since": "now"}))
    seen = {}
    waits.during = lambda pid, deadline_s: seen.update(running=ray_still_runs(pid))
    env = {"RAYFLEET_HEALTH_DIR": str(health), "RAYFLEET_IDENTITY_FILE": str(identity)}
    assert worker.run(**env, RAYFLEET_DRAIN_DEADLINE_S="30") == 0
    [sent] = gcs.drains
    message = f"node suspect on i-0abc: {reasons[0]}"
    assert (sent.node_id, sent.reason, sent.message) == (NODE_ID, preemption(), message)
    assert seen == {"running": True}  # drained while Ray ran, stopped after
    assert DRAINING.search(capsys.readouterr().out).groups() == (NODE_ID, message, "30")
    assert suspect.named_instance(f"Terminated due to preemption: {message}") == "i-0abc"
    assert suspect.named_instance("Terminated due to preemption: node suspect: no instance here") is None


@pytest.mark.parametrize("content", ["", "{", "[]", '{"reasons": []}', '{"since": "now"}'])
def test_an_empty_or_half_written_suspect_file_is_no_verdict(tmp_path, content):
    (tmp_path / suspect.FILE).write_text(content)
    assert suspect.read(tmp_path) is None
    assert suspect.read(None) is None and suspect.read(tmp_path / "absent") is None


@pytest.mark.parametrize("store", [False, True])
def test_with_a_gcs_store_a_worker_keeps_its_raylet_when_the_heads_name_moves(
    gcs, waits, worker, monkeypatch, store, capsys, tmp_path
):
    """The head's name answers at a new address (a replaced head task). Without a store the new head knows
    nothing of this node: it leaves and rejoins. With one (RAYFLEET_GCS_STORE, infra/modules/ray) Ray's raylet
    reconnects to the replaced head by itself and keeps the run's actors: it must not leave, which would kill
    them. Either way a Spot notice ends the loop."""
    asked = []

    def moved(host, port, joined):
        asked.append(joined)
        if len(asked) > 1 or store:
            worker.notices.write_text(json.dumps({"action": "terminate", "time": imds_time(5)}))
        return "10.0.0.9"

    monkeypatch.setattr(ray_node, "head_moved", moved)
    if store:  # nothing asks where the head is: a timer writes the notice instead
        threading.Timer(1.0, moved, args=("head.rf.local", 6379, "-")).start()
    env = {"RAYFLEET_GCS_STORE": "1"} if store else {}
    bin_dir = tmp_path / "bin"  # the `ray stop --force` before a rejoin: nothing to stop here
    bin_dir.mkdir()
    (bin_dir / "ray").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "ray").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert worker.run(**env) == 0
    out = capsys.readouterr().out
    if store:
        assert asked == ["-"] and "now answers at" not in out  # only the timer's call: the loop never asked
    else:
        assert "the head's name head.rf.local now answers at 10.0.0.9, not 10.0.0.5: left" in out
