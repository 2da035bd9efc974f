"""Submit a recipe's command through Ray's Jobs API, follow its output, and end with the job's exit code.

Shared by both targets: `make run` submits directly to a local cluster; on ECS the trainer task does the
same against the head (scripts/recipe_driver.py). The client reads the cluster token the way every Ray
process here does (RAY_AUTH_MODE=token with RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scripts import ray_auth

ray_auth.use_token_auth()  # before ray is imported

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
TAIL_LINES = 30


@dataclass
class JobOutcome:
    job_id: str
    status: str
    exit_code: int
    message: str = ""
    log: list[str] = field(default_factory=list)

    def traceback_tail(self) -> str:
        """The last Python traceback in the log (or the last lines when there is none)."""
        lines = "".join(self.log).splitlines()
        starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("Traceback (most recent call last)")]
        tail = lines[starts[-1] :] if starts else lines
        return "\n".join(tail[-TAIL_LINES:])


def client_for(address: str):
    """A Jobs API client for http://host:port. Ray prefers RAY_API_SERVER_ADDRESS, then RAY_ADDRESS, over the
    address it is given; a driver environment has RAY_ADDRESS (the GCS), so name the API server explicitly."""
    import os

    from ray.job_submission import JobSubmissionClient

    os.environ["RAY_API_SERVER_ADDRESS"] = address
    return JobSubmissionClient(address)


def exit_code_of(status: str, driver_exit_code: int | None) -> int:
    if status == "SUCCEEDED":
        return 0
    if status == "STOPPED":
        return 130
    return driver_exit_code if driver_exit_code not in (None, 0) else 1


async def _tail(client, job_id: str, sink: Callable[[str], None]) -> None:
    async for chunk in client.tail_job_logs(job_id):
        sink(chunk)


def follow(client, job_id: str, echo: Callable[[str], None] | None = None, poll_s: float = 1.0) -> JobOutcome:
    """Stream the job's output until it ends; Ctrl-C stops the job (and still returns its outcome)."""
    log: list[str] = []
    echo = echo or (lambda text: (sys.stdout.write(text), sys.stdout.flush()))

    def sink(chunk: str) -> None:
        log.append(chunk)
        echo(chunk)

    try:
        try:
            asyncio.run(_tail(client, job_id, sink))
        except Exception as exc:  # the log stream broke (head restart, network): the job may still run
            echo(f"[rayfleet] log stream interrupted ({type(exc).__name__}); waiting for the job to end\n")
        info = client.get_job_info(job_id)
        while str(info.status) not in TERMINAL:
            time.sleep(poll_s)
            info = client.get_job_info(job_id)
    except KeyboardInterrupt:
        echo(f"\n[rayfleet] interrupted: stopping job {job_id}\n")
        client.stop_job(job_id)
        deadline = time.monotonic() + 60
        info = client.get_job_info(job_id)
        while str(info.status) not in TERMINAL and time.monotonic() < deadline:
            time.sleep(poll_s)
            info = client.get_job_info(job_id)
    status = str(info.status)
    if not log:  # the stream gave nothing (a job that ended before the tail attached)
        text = client.get_job_logs(job_id)
        if text:
            log.append(text)
            echo(text)
    return JobOutcome(job_id, status, exit_code_of(status, info.driver_exit_code), info.message or "", log)


def submit(client, *, job_id: str, entrypoint: str, runtime_env: dict, metadata: dict,
           entrypoint_resources: dict | None = None) -> str:  # fmt: skip
    return client.submit_job(
        entrypoint=entrypoint,
        submission_id=job_id,
        runtime_env=runtime_env,
        metadata={k: str(v) for k, v in metadata.items()},
        entrypoint_resources=entrypoint_resources or None,
    )
