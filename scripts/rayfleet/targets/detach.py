"""`rayfleet run --detach` on the local cluster: the run's follower goes on in the background.

Locally the process that follows a run's job owns its record (rayfleet/recipes/job.py: the end, the retries,
the budget's clock, the queue's turn), so a detached run still needs one. `background` forks it once the
run is packaged and the cluster is up: the child leaves the terminal's session, writes what it prints to
`follower.log` and follows the job to its end exactly as an attached `rayfleet run` would; the parent waits
until the child has submitted the job (run.json names it as its submitter), says how to follow and cancel
the run, and exits at once, leaving the temporary code and a cluster started for the run to the child.
`rayfleet logs --run <run> -f` re-attaches (rayfleet/ops/runs/logs.py). The ECS target needs none of this: its
trainer task is the follower.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from rayfleet.core.run_dir import RunDir

SUBMIT_TIMEOUT_S = 300.0  # the child submits within seconds; a queued cluster's Jobs API may be slow to answer
LOG = "follower.log"


def log_path(run_dir: RunDir, launch_dir: Path) -> Path:
    """Where the detached follower writes: the run directory when it is local, else beside the launch."""
    if not run_dir.is_s3:
        return Path(run_dir.url) / LOG
    return launch_dir / ".rayfleet" / "detached" / f"{run_dir.run_name}-{LOG}"


def background(run_dir: RunDir, log: Path) -> None:
    """Returns in the child only (the follower from now on); the parent never returns: it exits with 0 once the
    child has submitted the job, or with the child's own code if the child ended first."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        os.setsid()  # no Ctrl-C, no SIGHUP from the terminal it left
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        return
    try:
        code = _wait_for_submission(run_dir, child, log)
    except KeyboardInterrupt:  # only this wait stops: the run, and a cluster started for it, are the child's
        print(f"\n[rayfleet] stopped waiting; run {run_dir.run_name} goes on in the background (pid {child})")
        code = 130
    sys.stdout.flush()
    os._exit(code)  # the child owns every cleanup from here


def _wait_for_submission(run_dir: RunDir, child: int, log: Path) -> int:
    name = run_dir.run_name
    deadline = time.monotonic() + SUBMIT_TIMEOUT_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:  # it ended before (or just after) submitting: its own exit code, and what it said
            code = os.waitstatus_to_exitcode(status)
            print(_tail(log), end="", file=sys.stderr if code else sys.stdout, flush=True)
            return code if code >= 0 else 128 - code
        record = run_dir.record()
        if (record.get("submitter") or {}).get("pid") == child and record.get("submitted_at"):
            print(
                f"[rayfleet] run {name}: job {record.get('job_id')} submitted ({str(record.get('state')).lower()}); "
                f"followed in the background (pid {child}, {log})\n"
                f"  follow it:  rayfleet logs --run {name} -f\n"
                f"  cancel it:  rayfleet cancel --run {name}",
                flush=True,
            )
            return 0
        time.sleep(0.2)
    print(
        f"error: run {name}: not submitted after {SUBMIT_TIMEOUT_S:.0f} s; its follower (pid {child}) goes on, "
        f"see {log}",
        file=sys.stderr,
        flush=True,
    )
    return 1


def _tail(log: Path, lines: int = 40) -> str:
    try:
        return "".join(log.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""
