"""Submit a recipe's command through Ray's Jobs API, follow its output, and end with the job's exit code.

Shared by both targets: `make run` submits directly to a local cluster; on ECS the trainer task does the
same against the head (rayfleet/node/driver.py). The client reads the cluster token the way every Ray
process here does (RAY_AUTH_MODE=token with RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH); the entry point sets that
up (rayfleet.core.ray_auth.use_token_auth) before anything imports ray.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
TAIL_LINES = 30
TAIL_BYTES = 256 * 1024  # of the job's output kept in memory, for the traceback tail
SETUP_FAILED = "runtime_env setup failed"  # how Ray's job message starts when the job's environment failed
# ... and when the head's job monitor itself got an RPC error (it then kills the job's supervisor)
MONITOR_RPC_FAILED = "Unexpected error occurred: RPC error"


class Terminated(KeyboardInterrupt):
    """SIGTERM (ECS stopping the trainer task, `kill`): handled as Ctrl-C is, the job is stopped."""

    def __init__(self, signame: str = "SIGTERM"):
        super().__init__(signame)
        self.signame = signame


@dataclass
class JobOutcome:
    job_id: str
    status: str
    exit_code: int
    message: str = ""
    log: list[str] = field(default_factory=list)  # the last TAIL_BYTES of the output, in chunks
    interrupted_by: str | None = None  # "SIGINT" or "SIGTERM" when the follower stopped the job

    def traceback_tail(self) -> str:
        """The last Python traceback in the log (or the last lines when there is none). A job that printed
        nothing (its environment failed) has Ray's own traceback in its message, after the first line."""
        lines = "".join(self.log).splitlines() or self.message.splitlines()[1:]
        starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("Traceback (most recent call last)")]
        tail = lines[starts[-1] :] if starts else lines
        return "\n".join(tail[-TAIL_LINES:])


class _Tail:
    """The last TAIL_BYTES of a stream, in chunks."""

    def __init__(self):
        self.chunks: deque[str] = deque()
        self.size = 0

    def add(self, chunk: str) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        while self.size > TAIL_BYTES and len(self.chunks) > 1:
            self.size -= len(self.chunks.popleft())


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


async def _tail(client, job_id: str, sink: Callable[[str], None], tick: Callable[[], None]) -> None:
    async def ticker() -> None:
        while True:
            await asyncio.sleep(1.0)
            tick()

    ticking = asyncio.create_task(ticker())
    try:
        async for chunk in client.tail_job_logs(job_id):
            sink(chunk)
    finally:
        ticking.cancel()


HEAD_AWAY_S = 600  # how long a follower waits for a replaced head (the nodes wait as long: gcs_store.RECONNECT_S)


def _unreachable(exc: Exception) -> bool:
    """The Jobs API is away (a head being replaced), as opposed to an answer that says something is wrong."""
    from requests.exceptions import ConnectionError, Timeout

    return isinstance(exc, ConnectionError | Timeout) or (
        isinstance(exc, RuntimeError) and "status code 50" in str(exc)  # the dashboard up before its GCS
    )


def job_info(client, job_id: str, echo: Callable[[str], None], away_s: float = HEAD_AWAY_S, poll_s: float = 1.0):
    """`get_job_info`, waiting out a head replacement (up to `away_s`): with the GCS on a store, Ray's new
    head takes the job back when its supervisor lives on a worker node (rayfleet/local/gcs_store.py)."""
    deadline, said = time.monotonic() + away_s, False
    while True:
        try:
            return client.get_job_info(job_id)
        except Exception as exc:
            if not _unreachable(exc) or time.monotonic() > deadline:
                raise
            if not said:
                echo(f"[rayfleet] the head's Jobs API does not answer ({type(exc).__name__}); waiting for it\n")
                said = True
        time.sleep(poll_s)


def follow(
    client,
    job_id: str,
    echo: Callable[[str], None] | None = None,
    poll_s: float = 1.0,
    spool=None,
    on_tick: Callable[[], None] | None = None,
    stop_on_interrupt: bool = True,
) -> JobOutcome:
    """Stream the job's output until it ends; Ctrl-C or SIGTERM (Terminated) stops the job (and still
    returns its outcome), unless `stop_on_interrupt` is false (a reader that re-attached: the interrupt goes on
    to the caller and the job runs on). Each chunk goes to `echo` and to `spool`
    (rayfleet.recipes.log_spool.LogSpool: the whole log, on disk and uploaded as it grows), whose `tick()` is
    also called every second; only the last TAIL_BYTES stay in memory here. `on_tick` is called every second
    as well (a budget's clock). A stream that breaks while the job runs (the head replaced) is followed again
    once the head answers, from where it broke: Ray streams a job's log from its start, so what was already
    seen is skipped."""
    tail = _Tail()
    echo = echo or (lambda text: (sys.stdout.write(text), sys.stdout.flush()))
    ticks = [t for t in (spool.tick if spool is not None else None, on_tick) if t is not None]

    def tick() -> None:
        for each in ticks:
            each()

    interrupted_by = None
    seen, replay = [0], [0]  # characters echoed; characters of a new stream still to skip

    def sink(chunk: str) -> None:
        skip = min(len(chunk), replay[0])
        replay[0] -= skip
        chunk = chunk[skip:]
        if not chunk:
            return
        seen[0] += len(chunk)
        tail.add(chunk)
        if spool is not None:
            spool.write(chunk)
        echo(chunk)

    try:
        while True:
            try:
                asyncio.run(_tail(client, job_id, sink, tick))
            except Exception as exc:  # the log stream broke (head restart, network): the job may still run
                echo(f"[rayfleet] log stream interrupted ({type(exc).__name__})\n")
            info = job_info(client, job_id, echo, poll_s=poll_s)
            if str(info.status) in TERMINAL:
                break
            time.sleep(poll_s)
            tick()
            replay[0] = seen[0]
    except KeyboardInterrupt as exc:
        if not stop_on_interrupt:
            raise
        interrupted_by = exc.signame if isinstance(exc, Terminated) else "SIGINT"
        echo(f"\n[rayfleet] {interrupted_by}: stopping job {job_id}\n")
        client.stop_job(job_id)
        # ECS gives a stopped task 30 s (stopTimeout) before SIGKILL: leave time to record the end
        deadline = time.monotonic() + (20 if isinstance(exc, Terminated) else 60)
        info = client.get_job_info(job_id)
        while str(info.status) not in TERMINAL and time.monotonic() < deadline:
            time.sleep(poll_s)
            info = client.get_job_info(job_id)
    status = str(info.status)
    if not tail.chunks:  # the stream gave nothing (a job that ended before the tail attached)
        text = client.get_job_logs(job_id)
        if text:
            sink(text)
    code = exit_code_of(status, info.driver_exit_code)
    return JobOutcome(job_id, status, code, info.message or "", list(tail.chunks), interrupted_by)


def submit(
    client, *, job_id: str, entrypoint: str, runtime_env: dict, metadata: dict, entrypoint_resources: dict | None = None
) -> str:
    return client.submit_job(
        entrypoint=entrypoint,
        submission_id=job_id,
        runtime_env=runtime_env,
        metadata={k: str(v) for k, v in metadata.items()},
        entrypoint_resources=entrypoint_resources or None,
    )
