"""tests/conftest.py's choice to start the image build as an xdist session starts (before any collection),
and the wait on a build that another process started (tests/images/helpers.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.images.build import ROOT
from tests.images.helpers import wait_for_exit_file


def config(*args: str, quick=False, tier=None, keyword="", markexpr=""):
    options = {"quick": quick, "tier": tier}
    return SimpleNamespace(
        args=list(args),
        getoption=lambda name: options[name],
        option=SimpleNamespace(keyword=keyword, markexpr=markexpr),
        invocation_params=SimpleNamespace(dir=ROOT),
    )


@pytest.mark.parametrize(
    ("cfg", "reached"),
    [
        (config("tests/unit", "tests/infra", "tests/images", "tests/integration"), True),  # make test: testpaths
        (config("tests"), True),
        (config("tests/images/test_built_images.py::test_x"), True),
        (config("tests/integration"), True),  # the rehearsal is in it
        (config("tests/integration/test_ecs_verbs.py"), False),
        (config("tests/unit"), False),
        (config("tests", quick=True), False),
        (config("tests", tier=["local cluster"]), False),
        (config("tests", tier=["rehearsal"]), True),
        (config("tests", keyword="autostop"), False),
    ],
)
def test_the_build_starts_ahead_only_when_the_command_line_reaches_the_images(cfg, reached):
    assert conftest._may_reach_images(cfg) is reached


def test_a_worker_waits_for_the_exit_file_and_fails_with_the_logs_end(tmp_path):
    done = tmp_path / "ok"
    done.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep(1); open({str(done / 'exit')!r}, 'w').write('0')"]
    )
    wait_for_exit_file(done)  # returns once the file says 0
    writer.wait()
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "build.log").write_text("step 1\nerror: no space left on device\n")
    (failed / "exit").write_text("1")
    with pytest.raises(AssertionError, match=r"(?s)exit 1.*no space left on device"):
        wait_for_exit_file(failed)


def test_the_session_build_waits_while_the_early_build_runs_and_not_after(tmp_path, monkeypatch):
    """`make test` starts the base layers before set-up (tests/images/build.py); the session's build waits for
    that process, so the two never build the same layers at once, and does not wait on one that ended, one
    that was killed before writing its exit file, or one that never started."""
    from tests.images import build

    monkeypatch.setattr(build, "EARLY", tmp_path)
    assert build.running_early_pid() is None  # never started
    # Not this process's child, as `make test`'s early build is not: a child of ours would stay a zombie (its
    # pid alive) until we reap it, and the wait would run to its timeout.
    subprocess.run(["sh", "-c", f"sleep 300 & echo $! > {tmp_path / 'pid'}"], check=True)
    pid = int((tmp_path / "pid").read_text())
    assert build.running_early_pid() == pid
    seen, running_early_pid = [], build.running_early_pid
    monkeypatch.setattr(build, "running_early_pid", lambda: seen.append(running_early_pid()) or seen[-1])
    waiter = threading.Thread(
        target=lambda: (build.wait_for_early(timeout_s=600, poll_s=0.05), seen.append("returned"))
    )
    waiter.start()
    deadline = time.monotonic() + 30
    while pid not in seen:  # the wait has seen the build running
        assert time.monotonic() < deadline and waiter.is_alive(), seen
        time.sleep(0.05)
    seen.append("killed")
    os.kill(pid, signal.SIGKILL)
    waiter.join(60)
    assert not waiter.is_alive()  # it returned once the build was gone, long before its timeout
    assert set(seen[: seen.index("killed")]) == {pid} and seen[-2:] == [None, "returned"], seen
    monkeypatch.setattr(build, "running_early_pid", running_early_pid)
    early = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "pid").write_text(str(early.pid))
        (tmp_path / "exit").write_text("0")  # the build ended; this process is some later one with its pid
        assert build.running_early_pid() is None
    finally:
        early.kill()
        early.wait()


def test_without_podman_the_early_build_says_so_and_starts_nothing(tmp_path, monkeypatch):
    from tests.images import build

    monkeypatch.setattr(build, "EARLY", tmp_path / "early")
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    assert "no podman" in build.start_early()
    assert not (tmp_path / "early").exists()
