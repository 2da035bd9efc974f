"""Submit a recipe's command through Ray's Jobs API, follow its output, and end with the job's exit code.

Shared by both targets: `make run` submits directly to a local cluster; on ECS the trainer task does the
same against the head (rayfleet/node/driver/recipe.py). The client reads the cluster token the way every Ray
process here does (RAY_AUTH_MODE=token with RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH); the entry point sets that
up (rayfleet.core.ray_auth.use_token_auth) before anything imports ray.
"""

from __future__ import annotations

import asyncio
import codecs
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
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


class NotYet(RuntimeError):
    """The log stream refused to start: asked again while the job runs (its whole log is read at its end)."""


# How often the driver node's log agent looks for new output while a follower streams it. The Jobs API's own
# tail (`tail_job_logs`) looks every 1 s and its head every 1 s more: lines reached the user 1-2 s late.
LOG_INTERVAL_S = 0.1


async def log_stream(address: str, job_id: str, node_id: str, follow: bool = True) -> AsyncIterator[str]:
    """The job's output from its start: Ray's state API stream of the job's driver log on the node that runs
    it (what `ray logs job --follow` reads). Following, it is checked every LOG_INTERVAL_S and never ends by
    itself (the caller stops reading once the job has ended); otherwise it ends at the end of the file. Either
    way it comes in chunks: a log of any size is never held whole."""
    import aiohttp
    from ray._private.authentication.http_token_authentication import (  # noqa: PLC2701 (Ray's own header for its HTTP APIs)
        get_auth_headers_if_auth_enabled,
    )

    query = {"submission_id": job_id, "node_id": node_id, "lines": "-1"}
    if follow:  # Ray refuses an interval for a read to the end
        query["interval"] = str(LOG_INTERVAL_S)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character split between chunks
    url, no_limit = f"{address}/api/v0/logs/{'stream' if follow else 'file'}", aiohttp.ClientTimeout()
    async with (
        aiohttp.ClientSession(headers=get_auth_headers_if_auth_enabled({})) as session,
        session.get(url, params=query, timeout=no_limit) as r,
    ):
        if r.status != 200:  # the job's log file not there yet, or the head not ready
            raise NotYet(f"the log stream answered {r.status}: {(await r.text())[:300]}")
        async for data in r.content.iter_any():
            text = decoder.decode(data)
            if text:
                yield text
    if follow:
        raise ConnectionError("the log stream ended while the job ran")


async def _tail(client, job_id: str, sink: Callable[[str], None], tick: Callable[[], None], stream, poll_s: float):
    """Stream the job's output into `sink` until the job has ended (its state asked every `poll_s`, `tick`
    called every second); returns its last info. Raises when the stream or the Jobs API breaks."""

    async def pump(node_id: str) -> None:
        while True:
            got = False
            try:
                async for chunk in stream(job_id, node_id, True):
                    got = True
                    sink(chunk)
            except NotYet:
                if got:
                    raise
            await asyncio.sleep(poll_s)  # its supervisor has not opened the log yet

    pumping, ticked = None, time.monotonic()
    try:
        while True:
            info = await asyncio.to_thread(client.get_job_info, job_id)
            if pumping is None and info.driver_node_id:  # its supervisor runs: the log has a node
                pumping = asyncio.create_task(pump(info.driver_node_id))
            if str(info.status) in TERMINAL:
                return info
            if pumping is not None and pumping.done():
                pumping.result()  # raises what broke it
            await asyncio.sleep(poll_s)
            if time.monotonic() - ticked >= 1.0:
                tick()
                ticked = time.monotonic()
    finally:
        if pumping is not None:
            pumping.cancel()
            await asyncio.gather(pumping, return_exceptions=True)


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
    stream: Callable[[str, str, bool], AsyncIterator[str]] | None = None,
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

    stream = stream or (lambda job, node, follow: log_stream(client.get_address(), job, node, follow))
    try:
        while True:
            try:
                info = asyncio.run(_tail(client, job_id, sink, tick, stream, poll_s))
                break
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
        info = _stop(client, job_id, 20 if isinstance(exc, Terminated) else 60, poll_s)
    status = str(info.status)
    # the log once more, to its end: what the stream had not given yet, or all of it
    _read_to_the_end(client, job_id, info, sink, lambda: replay.__setitem__(0, seen[0]), stream)
    code = exit_code_of(status, info.driver_exit_code)
    return JobOutcome(job_id, status, code, info.message or "", list(tail.chunks), interrupted_by)


def _read_to_the_end(client, job_id: str, info, sink: Callable[[str], None], rewind: Callable[[], None], stream):
    """The ended job's log from its start through `sink` (which skips what was shown: `rewind` before each
    read), chunk by chunk. A job that ended before its supervisor started has no driver node and a short log,
    and a log the head's agent refuses to read (a replaced head's) comes whole from the Jobs API."""

    async def read() -> None:
        async for chunk in stream(job_id, info.driver_node_id, False):
            sink(chunk)

    rewind()
    if info.driver_node_id:
        try:
            asyncio.run(read())
            return
        except NotYet:  # the head's agent cannot read it: the Jobs API's copy instead
            rewind()
    sink(client.get_job_logs(job_id) or "")


def _stop(client, job_id: str, wait_s: float, poll_s: float):
    """Stop the job and wait up to `wait_s` for it to end (ECS gives a stopped task 30 s, stopTimeout, before
    SIGKILL: the follower must have time left to record the end); its last info."""
    client.stop_job(job_id)
    deadline = time.monotonic() + wait_s
    info = client.get_job_info(job_id)
    while str(info.status) not in TERMINAL and time.monotonic() < deadline:
        time.sleep(poll_s)
        info = client.get_job_info(job_id)
    return info


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
