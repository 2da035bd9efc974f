"""The local cluster's `run` and `env` verbs, its nodes' environment, memory shares and private directories.

No Ray here: `up` and `down` are replaced where a test needs a cluster, and commands are real processes.
tests/integration/test_local_cluster_ray_clients.py runs the same verbs against a real cluster.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rayfleet.cli import main as cli
from rayfleet.local import cli as local_cli
from rayfleet.local import cluster as local_cluster
from rayfleet.local import host, processes
from rayfleet.local.cluster import ClusterError, ClusterSpec
from rayfleet.local.host import GIB

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent
FAKE_STATE = local_cluster.ClusterState(
    cluster_id="fake1",
    address="127.0.0.1:7001",
    dashboard_url="http://127.0.0.1:7002",
    temp_dir="/nonexistent/rayfleet-test",
    log_dir="",
    spec={},
)
# A command that exits 0 only if it was pointed at FAKE_STATE's cluster.
CHECK_ENV = (
    "import os, sys; ok = os.environ['RAY_ADDRESS'] == '127.0.0.1:7001'"
    " and os.environ['RAY_API_SERVER_ADDRESS'] == 'http://127.0.0.1:7002'"
    " and os.environ['RAY_AUTH_MODE'] == 'token' and 'RAY_AUTH_TOKEN' not in os.environ; sys.exit(0 if ok else 9)"
)


@pytest.fixture(autouse=True)
def private_env(tmp_path, monkeypatch):
    """A token file of the test's own, and Ray's auth variables put back afterwards (main() sets them)."""
    monkeypatch.setenv("RAYFLEET_RAY_TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setenv("RAYFLEET_STATE_DIR", str(tmp_path / "state"))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN", "RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.setenv(name, "x")  # recorded, so that undo also removes what the test run set
        monkeypatch.delenv(name)


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    """No cluster running; `up` and `down` record their calls instead of starting Ray."""
    record: list[str] = []

    def fake_up(spec, quiet=False):
        record.append(f"up workers={spec.workers} cpus={spec.cpus_per_worker:g}")
        return FAKE_STATE

    monkeypatch.setattr(local_cluster, "running", lambda: None)
    monkeypatch.setattr(local_cluster, "up", fake_up)
    monkeypatch.setattr(local_cluster, "down", lambda quiet=False: record.append("down"))
    return record


@pytest.fixture
def running_cluster(monkeypatch) -> list[str]:
    """A cluster is running already: `up` and `down` must not be called."""
    record: list[str] = []
    monkeypatch.setattr(local_cluster, "running", lambda: FAKE_STATE)
    monkeypatch.setattr(local_cluster, "up", lambda spec, quiet=False: record.append("up"))
    monkeypatch.setattr(local_cluster, "down", lambda quiet=False: record.append("down"))
    return record


# --- run: arguments, exit code, what it starts and stops -------------------------------------------------


def test_run_starts_a_cluster_of_the_given_shape_and_stops_it(calls):
    code = local_cli.cluster_verb("run", [sys.executable, "-c", CHECK_ENV], workers=3, cpus_per_worker=2)
    assert code == 0
    assert calls == ["up workers=3 cpus=2", "down"]


def test_run_exits_with_the_commands_code_and_stops_its_cluster_on_failure(calls):
    assert local_cli.cluster_verb("run", [sys.executable, "-c", "raise SystemExit(7)"]) == 7
    assert calls == ["up workers=2 cpus=1", "down"]  # ClusterSpec's defaults, as `rayfleet cluster up`


def test_run_on_a_running_cluster_leaves_it_running(running_cluster):
    assert local_cli.cluster_verb("run", [sys.executable, "-c", CHECK_ENV], workers=5) == 0
    assert local_cli.cluster_verb("run", [sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert running_cluster == []


def test_run_reports_a_command_killed_by_a_signal_like_a_shell(running_cluster):
    kill_self = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert cli.main(["cluster", "run", "--", sys.executable, "-c", kill_self]) == 128 + signal.SIGKILL
    assert processes.exit_code(-signal.SIGTERM) == 143 and processes.exit_code(4) == 4


def test_run_passes_options_after_the_command_to_the_command(running_cluster):
    """`--workers` after CMD belongs to CMD."""
    check = "import sys; sys.exit(0 if sys.argv[1:] == ['--workers', '9', '--'] else 1)"
    assert cli.main(["cluster", "run", "--", sys.executable, "-c", check, "--workers", "9", "--"]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run"], "error: name the command: rayfleet cluster run -- "),
        (["run", "--"], "error: name the command: rayfleet cluster run -- "),
    ],
)
def test_run_refuses_bad_input_with_one_line_and_starts_nothing(calls, capsys, argv, message):
    assert cli.main(["cluster", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
    assert calls == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--workers", "0", "--", "true"], "argument --workers: 0 is out of range"),
        (["run", "--cpus-per-worker", "-1", "--", "true"], "argument --cpus-per-worker: -1 is out of range"),
        (["run", "--cpus-per-worker", "nan", "--", "true"], "argument --cpus-per-worker: nan is out of range"),
        (["up", "--gpus-per-worker", "-1"], "argument --gpus-per-worker: -1 is out of range"),
    ],
)
def test_numbers_out_of_bounds_are_refused_by_the_parser_with_exit_2(calls, capsys, argv, message):
    """Issue 54 R10: these were exit 1 (or, for nan, not refused at all) from the cluster's own checks."""
    with pytest.raises(SystemExit) as exc:
        cli.main(["cluster", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert calls == []


def test_the_clusters_own_limits_are_bad_input_with_one_line(calls, capsys):
    assert local_cli.cluster_verb("up", workers=51) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: rayfleet cluster up: at most 50 local workers") and err.count("\n") == 1
    assert calls == []


def test_run_of_a_missing_program_is_a_one_line_error_and_still_stops_its_cluster(calls, capsys):
    assert cli.main(["cluster", "run", "--", "/nonexistent/rayfleet-cmd"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot run /nonexistent/rayfleet-cmd") and err.count("\n") == 1
    assert calls == ["up workers=2 cpus=1", "down"]


# --- run under signals: a real `rayfleet cluster run` process ------------------------------

CHILD = """
import signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
def on_sigint(signum, frame):
    log.write("child got SIGINT\\n")
    time.sleep(1)  # its own cleanup: a second SIGINT would interrupt it and log twice
    log.write("child cleaned up\\n")
    sys.exit(130)
signal.signal(signal.SIGINT, on_sigint)
log.write("ready\\n")
while True:
    time.sleep(0.05)
"""

WRAPPER = """
import sys
from rayfleet.local import cli
from rayfleet.local import cluster as c
log, child = sys.argv[1], sys.argv[2]
def note(line):
    with open(log, "a") as f:
        f.write(line + "\\n")
def fake_up(spec, quiet=False):
    note("up")
    return c.ClusterState("fake1", "127.0.0.1:7001", "http://127.0.0.1:7002", "/nonexistent", "", {}, [])
c.running = lambda: None
c.up = fake_up
c.down = lambda quiet=False: note("down")
sys.exit(cli.cluster_verb("run", [sys.executable, "-c", child, log]))
"""


def _start_wrapper(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "events.log"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRAPPER, str(log), CHILD], cwd=REPO, env=dict(os.environ), start_new_session=True
    )
    deadline = time.monotonic() + 20
    while "ready" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline and proc.poll() is None, "the command never started"
        time.sleep(0.05)
    from rayfleet.node.driver.preempt_notice import catches  # reads the process's caught signals (/proc/PID/status)

    while not catches(proc.pid, signal.SIGTERM):  # `run` passes SIGTERM on once the command started: in its wait
        assert time.monotonic() < deadline and proc.poll() is None, "`run` never handled SIGTERM"
        time.sleep(0.02)
    return proc, log


def test_ctrl_c_lets_the_command_clean_up_then_stops_the_cluster(tmp_path):
    """A terminal's Ctrl-C goes to the whole foreground process group: the command gets it once (not a
    second time from `run`), finishes its cleanup, and only then is the cluster stopped."""
    proc, log = _start_wrapper(tmp_path)
    try:
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=20) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert log.read_text().splitlines() == ["up", "ready", "child got SIGINT", "child cleaned up", "down"]


def test_sigterm_to_run_alone_is_passed_on_and_the_cluster_stopped(tmp_path):
    proc, log = _start_wrapper(tmp_path)
    try:
        os.kill(proc.pid, signal.SIGTERM)  # to `run` only, as make or a CI timeout sends it
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert log.read_text().splitlines() == ["up", "ready", "down"]


# --- env and the nodes' environment -----------------------------------------------------------------------


def test_node_env_puts_this_virtualenv_first_so_jobs_find_ray(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "not-in-the-environment")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")  # someone else's cluster, in the caller's shell
    env = host.node_env("c1", "127.0.0.1:6390")
    assert env["PATH"] == f"{VENV_BIN}{os.pathsep}/usr/bin:/bin"
    assert "RAY_AUTH_TOKEN" not in env and env["RAYFLEET_CLUSTER_ID"] == "c1"
    assert env["RAY_ADDRESS"] == "127.0.0.1:6390"  # what the nodes start connects here, never by a scan
    # What `ray job submit -- python hello.py` runs on a node: `python` by PATH, then `import ray`.
    assert shutil.which("python", path=env["PATH"]) == str(VENV_BIN / "python")
    subprocess.run(["python", "-c", "import ray"], env=env, check=True, timeout=60)
    assert host.venv_first(env["PATH"]) == env["PATH"]  # not prepended twice


def test_env_prints_what_rays_clients_read(monkeypatch, capsys, tmp_path):
    """The exports, evaluated by a real shell without the virtualenv on PATH: `ray` is this Ray's CLI, the
    GCS and the Jobs API addresses are the cluster's, and a stale RAY_AUTH_TOKEN is gone."""
    monkeypatch.setattr(local_cluster, "running", lambda: FAKE_STATE)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "stale")
    assert local_cli.cluster_verb("env") == 0
    exports = capsys.readouterr().out
    shown = subprocess.run(
        ["/bin/bash", "-c", 'eval "$EXPORTS"; command -v ray; env | grep ^RAY_ | sort'],
        env={"PATH": "/usr/bin:/bin", "RAY_AUTH_TOKEN": "stale", "EXPORTS": exports},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown == [
        str(VENV_BIN / "ray"),
        "RAY_ADDRESS=127.0.0.1:7001",
        "RAY_API_SERVER_ADDRESS=http://127.0.0.1:7002",
        "RAY_AUTH_MODE=token",
        f"RAY_AUTH_TOKEN_PATH={tmp_path / 'token'}",
    ]


def test_env_without_a_cluster_is_a_one_line_error(monkeypatch, capsys):
    monkeypatch.setattr(local_cluster, "running", lambda: None)
    assert local_cli.cluster_verb("env") == 1
    assert capsys.readouterr().err == "error: no rayfleet cluster is running; run `rayfleet cluster up`\n"


# --- memory shares ----------------------------------------------------------------------------------------


def test_memory_shares_on_a_24_gib_laptop():
    head, worker = host.memory_shares(24 * GIB, ClusterSpec(workers=2))
    assert head == 1 * GIB
    assert worker == (24 * GIB - 3 * 256 * 1024**2 - 1 * GIB) // 2  # 11.125 GiB each


@pytest.mark.parametrize(("available_gib", "workers"), [(3, 2), (8, 1), (24, 2), (64, 8), (512, 50)])
def test_memory_shares_add_up_to_what_is_free(available_gib, workers):
    available = available_gib * GIB
    spec = ClusterSpec(workers=workers)
    head, worker = host.memory_shares(available, spec)
    claimed = head + workers * worker + (workers + 1) * spec.object_store_bytes
    assert claimed <= available
    assert available - claimed < workers  # all of it is given out, up to rounding
    assert 0 < head <= host.HEAD_MEMORY_BYTES and head <= worker


def test_memory_shares_refuse_more_workers_than_memory():
    with pytest.raises(ClusterError, match=r"too little for 8 workers .*; use fewer --workers"):
        host.memory_shares(3 * GIB, ClusterSpec(workers=8))


def test_available_memory_is_what_the_host_has_free():
    import psutil

    free = host.available_memory()
    assert 0 < free <= psutil.virtual_memory().total


# --- private directories ----------------------------------------------------------------------------------


def test_private_dir_is_made_0700_and_an_existing_one_is_tightened(tmp_path):
    old_umask = os.umask(0o022)
    try:
        made = host.private_dir(tmp_path / "a" / "b")
        assert made.stat().st_mode & 0o777 == 0o700
        (tmp_path / "shared").mkdir(mode=0o777)
        os.chmod(tmp_path / "shared", 0o777)  # as `ray start` leaves its temp dir
        assert host.private_dir(tmp_path / "shared").stat().st_mode & 0o777 == 0o700
    finally:
        os.umask(old_umask)


def test_private_dir_refuses_a_link_or_another_users_directory(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ClusterError, match="not a directory of yours"):
        host.private_dir(tmp_path / "link")
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)  # the directory now belongs to someone else
    with pytest.raises(ClusterError, match="not a directory of yours"):
        host.private_dir(tmp_path / "real")


# --- import has no side effects; main() sets up auth ------------------------------------------------------

NO_SIDE_EFFECTS = """
import os, sys
before = dict(os.environ)
import rayfleet.local.cli
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
print(changed, "ray" in sys.modules)
"""


def test_importing_the_module_changes_no_environment_and_imports_no_ray():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    out = subprocess.run(
        [sys.executable, "-c", NO_SIDE_EFFECTS], cwd=REPO, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[] False"


def test_main_turns_on_token_auth_before_anything_imports_ray(tmp_path, capsys):
    assert "RAY_AUTH_MODE" not in os.environ
    assert local_cli.cluster_verb("status") == 0
    assert os.environ["RAY_AUTH_MODE"] == "token"
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(tmp_path / "token")
