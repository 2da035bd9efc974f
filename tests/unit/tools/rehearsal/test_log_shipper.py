"""The rehearsal's log shipper against a stand-in `podman` whose first `logs -f` ends early, as podman 4.3's
did under load while the container ran on."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tools.rehearsal.log_shipper import LogShipper

# Each `podman logs -f` prints the container's log so far; the first one stops after three lines with
# podman's error, the second prints all five.
FAKE_PODMAN = """#!/bin/sh
calls="$(cat "$CALLS" 2>/dev/null || echo 0)"; echo $((calls + 1)) > "$CALLS"
if [ "$calls" = 0 ]; then
  printf 'one\\ntwo\\nthree\\n'
  echo 'time="x" level=error msg="Waiting for container to exit: unexpected end of JSON input"' >&2
  exit 125
fi
printf 'one\\ntwo\\nthree\\nfour\\nfive\\n'
"""


class Logs:
    def __init__(self):
        self.events: list[str] = []

    def create_log_stream(self, **_):
        pass

    def put_log_events(self, logEvents, **_):
        self.events += [e["message"] for e in logEvents]


def fake_podman(tmp_path: Path, monkeypatch) -> None:
    podman = tmp_path / "bin" / "podman"
    podman.parent.mkdir()
    podman.write_text(FAKE_PODMAN)
    podman.chmod(podman.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{podman.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))


def test_a_follower_that_ends_while_the_container_runs_is_restarted_and_sends_each_line_once(
    tmp_path, monkeypatch, capsys
):
    fake_podman(tmp_path, monkeypatch)
    states = iter([True, False])  # running when the first follower ends; exited after the second
    logs = Logs()
    with open(tmp_path / "local.log", "w") as local:
        shipper = LogShipper(logs, "c1", "group", "stream", local, running=lambda: next(states))
        shipper.run()
    assert logs.events == ["one", "two", "three", "four", "five"]
    assert (tmp_path / "local.log").read_text() == "one\ntwo\nthree\nfour\nfive\n"
    assert shipper.restarts == 1
    said = capsys.readouterr().err
    assert "following c1's output again" in said and "unexpected end of JSON input" in said


def test_a_follower_that_ends_with_its_container_is_not_restarted(tmp_path, monkeypatch):
    fake_podman(tmp_path, monkeypatch)
    logs = Logs()
    shipper = LogShipper(logs, "c1", "group", "stream", None, running=lambda: False)
    shipper.run()
    assert logs.events == ["one", "two", "three"] and shipper.restarts == 0


# A container that writes to both streams: the second follower sees its whole log again.
BOTH_STREAMS = """#!/bin/sh
calls="$(cat "$CALLS" 2>/dev/null || echo 0)"; echo $((calls + 1)) > "$CALLS"
printf 'out one\\n'; echo 'error: run x failed (exit 1)' >&2
if [ "$calls" = 0 ]; then
  echo 'Error: no container with name or ID "c1" found: no such container' >&2
  exit 125
fi
printf 'out two\\n'; echo 'Traceback (most recent call last):' >&2
"""


def test_the_containers_stderr_is_shipped_too_and_podmans_own_complaints_are_not(tmp_path, monkeypatch, capsys):
    """awslogs ships a container's stderr with its stdout: a driver's one-line error is on its stderr."""
    fake_podman(tmp_path, monkeypatch)
    (tmp_path / "bin" / "podman").write_text(BOTH_STREAMS)
    states = iter([True, False])
    logs = Logs()
    shipper = LogShipper(logs, "c1", "group", "stream", None, running=lambda: next(states))
    shipper.run()
    assert sorted(logs.events) == sorted(
        ["out one", "error: run x failed (exit 1)", "out two", "Traceback (most recent call last):"]
    )
    assert logs.events.index("out one") < logs.events.index("out two")
    assert shipper.restarts == 1 and "no such container" in capsys.readouterr().err
