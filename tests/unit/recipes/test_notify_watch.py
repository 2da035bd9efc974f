"""Notifications of a watched recipe command: a real webhook receiver on 127.0.0.1, real child processes."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from rayfleet.recipes.job import notify_env
from rayfleet.recipes.notify import Event, Notifier
from rayfleet.recipes.schema import Recipe
from rayfleet.recipes.watch import Watch, run_watched
from tests.fakes.webhook import Receiver


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def watched(receiver, command: str, stall_after_s: float = 0) -> int:
    watch = Watch(Notifier(None, receiver.url), "r1", stall_after_s)
    return run_watched(command, {"PATH": "/usr/bin:/bin"}, watch)


def test_a_run_that_succeeds_says_started_and_succeeded(receiver, capfd):
    assert watched(receiver, "echo hello; echo world") == 0
    assert receiver.texts() == ["rayfleet: run r1 started", "rayfleet: run r1 succeeded"]
    assert capfd.readouterr().out == "hello\nworld\n"  # the output passes through unchanged


def test_a_byte_that_is_not_utf8_is_passed_on_replaced_and_the_run_still_succeeds(receiver, capfd):
    """A job printing \\xff keeps being watched to its end, which is notified (issue 27, finding 7)."""
    assert watched(receiver, r"printf 'before \377 after\n'; echo done") == 0
    assert receiver.texts() == ["rayfleet: run r1 started", "rayfleet: run r1 succeeded"]
    assert capfd.readouterr().out == "before \ufffd after\ndone\n"


def test_a_failure_says_the_exit_code_and_the_traceback_tail(receiver):
    script = "import sys; print('step 1'); raise ValueError('bad batch')"
    assert watched(receiver, f'{sys.executable} -c "{script}"') == 1
    failed = receiver.texts()[-1]
    assert failed.startswith("rayfleet: run r1 failed\nexit code 1; the last lines:\nstep 1\nTraceback")
    assert failed.endswith("ValueError: bad batch")


def test_silence_is_a_stall_said_once_and_output_after_it_says_the_run_goes_on(receiver):
    code = watched(receiver, "echo 'step 1 reported'; sleep 2; echo 'step 2'", stall_after_s=0.5)
    assert code == 0
    texts = receiver.texts()
    assert texts[0] == "rayfleet: run r1 started" and texts[-1] == "rayfleet: run r1 succeeded"
    stalls = [t for t in texts if "stalled" in t]
    assert len(stalls) == 1 and "last line: step 1 reported" in stalls[0]
    assert "rayfleet: run r1 is progressing again\nstep 2" in texts


def test_a_resume_line_of_the_jobs_is_a_resumed_notification(receiver):
    watched(receiver, "echo 'resuming basic from the checkpoint of epoch 3 (attempt 1)'")
    assert "rayfleet: run r1 resumed\nattempt 1: resuming basic from the checkpoint of epoch 3 (attempt 1)" in (
        receiver.texts()
    )


def test_the_hang_watchdogs_line_is_a_hung_notification_with_its_evidence(receiver):
    evidence = (
        "no step finished for 9 s (window 8 s); at step 6: rank 1 on 10.0.0.7 (finished 5); heal (1 heal(s) so far)"
    )
    watched(receiver, f"echo 'hang: {evidence}'; echo 'hang is not at the start of this line'")
    assert receiver.texts() == [
        "rayfleet: run r1 started",
        f"rayfleet: run r1 hung\n{evidence}",
        "rayfleet: run r1 succeeded",
    ]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie has ended; it only waits for its parent (or init) to reap it


def test_sigterm_reaches_the_command_and_the_run_is_reported_failed(receiver, tmp_path):
    """SIGTERM reaches every process of the command (here a sleep the shell waits on), so the wrapper ends with
    it instead of after the sleep."""
    import signal
    import subprocess

    pidfile = tmp_path / "sleep.pid"
    script = (
        "from rayfleet.recipes.notify import Notifier; import sys;"
        "from rayfleet.recipes.watch import Watch, run_watched;"
        f"watch = Watch(Notifier(None, '{receiver.url}'), 'r1', 0);"
        f"command = 'sleep 300 & echo $! > {pidfile}; echo up; wait $!';"
        "sys.exit(run_watched(command, {'PATH': '/usr/bin:/bin'}, watch))"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "up\n"
        sleeper = int(pidfile.read_text())
        assert _alive(sleeper)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) != 0  # a deadline for the event: the sleep had 300 s to go
        assert not _alive(sleeper)  # the command's own child got the SIGTERM too
    finally:
        proc.kill()
        if pidfile.exists() and _alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    # the shell dies of the signal (-15), or reports its child's death by it (143): either way, a failure
    assert re.match(r"rayfleet: run r1 failed\nexit code (-15|143)\b", receiver.texts()[-1])


def test_a_channel_that_fails_costs_a_warning_without_the_secret(capsys):
    Notifier(None, "http://127.0.0.1:9/hooks/SECRET-PATH").send(Event("r1", "started"))
    err = capsys.readouterr().err
    assert err.startswith("warning: could not notify through the webhook:") and "SECRET-PATH" not in err


def test_the_submitter_passes_the_run_stall_time_and_topic_and_the_webhook_only_as_a_reference(monkeypatch):
    monkeypatch.delenv("RAYFLEET_NOTIFY_TOPIC_ARN", raising=False)
    plain = Recipe(name="r", entrypoint="train.py")
    assert notify_env(plain, "run-1") == {}  # nothing configured: no watcher, the command is exec'd as before
    recipe = Recipe(
        name="r",
        entrypoint="train.py",
        notify={"webhook": {"secret": "secretsmanager:team/slack"}, "stall_after_s": 600},
    )
    assert notify_env(recipe, "run-1") == {"RAYFLEET_NOTIFY": '{"run": "run-1", "stall_after_s": 600.0}'}
    assert recipe.secret_refs() == {"RAYFLEET_NOTIFY_WEBHOOK": "secretsmanager:team/slack"}
    monkeypatch.setenv("RAYFLEET_NOTIFY_TOPIC_ARN", "arn:aws:sns:us-east-1:123456789012:rayfleet-notifications")
    env = notify_env(plain, "run-2")  # on ECS: the deployment's topic, the default stall time
    assert json.loads(env["RAYFLEET_NOTIFY"]) == {"run": "run-2", "stall_after_s": 1800}
    assert env["RAYFLEET_NOTIFY_TOPIC_ARN"].endswith(":rayfleet-notifications")
    with pytest.raises(ValueError, match="RAYFLEET_NOTIFY_WEBHOOK is set by rayfleet"):
        Recipe(name="r", entrypoint="train.py", env={"RAYFLEET_NOTIFY_WEBHOOK": "x"})


def test_a_webhook_that_is_not_http_is_never_opened(tmp_path, capsys):
    """A file: URL as the webhook (urllib would open it and "succeed" silently): refused, with one warning that
    does not show the URL (issue 27, low)."""
    target = tmp_path / "a-local-file"
    target.write_text("anything")
    Notifier(None, f"file://{target}").send(Event("r1", "started"))
    warning = capsys.readouterr().err
    assert "could not notify through the webhook: the webhook URL is not http(s)" in warning
    assert str(target) not in warning
