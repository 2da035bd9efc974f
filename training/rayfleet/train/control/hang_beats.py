"""Which beats the hang watchdog's coordinator takes (rayfleet/train/control/hang_watch.py): only well-formed ones from
the run's own workers.

The coordinator is a named actor, and every job holds the cluster's token, so any job can find it and send it
beats. A forged beat could make a hang of a run that does not hang (a rank far ahead makes the others
laggards: their nodes would be drained and their instances replaced, and after the heals the run aborted).
So a beat is taken only when

  * it is well-formed and bounded (`well_formed`): a rank below MOST_RANKS, counters that are whole numbers,
    none finished that was not entered, finite times not in the future, identities of bounded length;
  * its sender is one of the run's workers (`RunWorkers`): the Ray actor it names (its actor id) is alive, of
    the coordinator's own job (Ray records each actor's job; Ray Train's workers are actors of the driver's
    job, another job's actors are not), and on the node and in the process the beat claims.

What remains: a job can read a worker's actor id, node and pid from Ray's State API and claim them in beats
of its own; it could as well write suspect.json on that node (RAYFLEET_CURRENT_RUN_DIR) or kill the run's
actors: Ray's token is the boundary between jobs, and what such a job reaches is this deployment's worker
instances, never the head's or another deployment's (rayfleet/node/control/suspect.py).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable

MOST_RANKS = 4096
MOST_FIELD = 200  # characters of an identity (node id, address, worker)
FUTURE_S = 60.0  # clocks of the nodes differ: a beat's time may be this far ahead of the coordinator's
REMEMBERED = 1024  # senders judged, remembered so that a sender is looked up once a while, not once a beat
RECHECK_S = 30.0  # then looked up again: a worker that died is no sender (its identity could be replayed)
ACTOR_ID = re.compile(r"[0-9a-f]{32}")  # Ray's ActorID in hex (16 bytes)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53


def _time(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def well_formed(beat, now: float) -> str | None:
    """Why the beat is refused (one phrase), or None when it is well-formed."""
    if not isinstance(beat, dict):
        return "not a beat"
    if not _count(beat.get("rank")) or beat["rank"] >= MOST_RANKS:
        return "no rank"
    if not (_count(beat.get("entered")) and _count(beat.get("done")) and beat["done"] <= beat["entered"]):
        return "counters out of bounds"
    if not _time(beat.get("done_at")) or beat["done_at"] > now + FUTURE_S:
        return "a time in the future"
    step = beat.get("step_s")
    if step is not None and not (_time(step) and 0 <= step <= 7 * 86400):
        return "a step time out of bounds"
    for key in ("worker", "node_id", "node_ip", "actor_id"):
        if not isinstance(beat.get(key), str) or not 0 < len(beat[key]) <= MOST_FIELD:
            return f"no {key}"
    if not ACTOR_ID.fullmatch(beat["actor_id"]):
        return "no actor id"
    node, _, pid = beat["worker"].rpartition(":")
    if node != beat["node_id"] or not pid.isdigit():
        return "a worker that is not its node and process"
    return None


class RunWorkers:
    """The sender check: the beat's actor is an alive actor of this job, on the claimed node, in the claimed
    process. `lookup(actor_id)` gives Ray's actor table row (ray._private.state.actors: the GCS's record, which
    no job writes); `job_id` is the coordinator's own job. When the table cannot be read at all (tried on the
    coordinator's own actor: another Ray version, say), that is said once and beats are taken unchecked, so
    the watchdog keeps working; a sender that cannot be looked up is refused."""

    def __init__(
        self, job_id: str | None = None, lookup: Callable[[str], dict] | None = None, say=print, clock=time.monotonic
    ):
        self.job_id, self.lookup, self.say, self.clock = job_id, lookup, say, clock
        self.judged: dict[tuple, tuple[bool, float]] = {}  # (actor, worker) -> (a sender of this run, when judged)
        self.broken: str | None = None
        self.ready = lookup is not None and job_id is not None

    def _start(self) -> None:
        """In the coordinator's actor: its job, Ray's actor table, and whether that table answers for itself."""
        self.ready = True
        try:
            import ray
            from ray._private import state  # noqa: PLC2701 (the GCS's actor table; the State API needs the dashboard)

            context = ray.get_runtime_context()
            self.job_id, self.lookup = context.get_job_id(), lambda actor_id: state.actors(actor_id=actor_id)
            if (self.lookup(context.get_actor_id()) or {}).get("JobID") != self.job_id:
                raise LookupError("the coordinator's own actor is not found under its job")
        except Exception as exc:
            self.broken = f"{type(exc).__name__}: {exc}"
            self.say(f"hang watch: cannot check beats' senders ({self.broken}); taking them unchecked")

    def __call__(self, beat: dict) -> bool:
        if not self.ready:
            self._start()
        if self.broken:
            return True
        key, now = (beat["actor_id"], beat["worker"]), self.clock()
        if key not in self.judged or now - self.judged[key][1] >= RECHECK_S:
            self.judged.pop(key, None)
            try:
                row = self.lookup(beat["actor_id"]) or {}
            except Exception:  # an id Ray does not know: refused
                row = {}
            pid = beat["worker"].rpartition(":")[2]
            ours = (
                row.get("JobID") == self.job_id
                and row.get("State") == "ALIVE"
                and (row.get("Address") or {}).get("NodeID") == beat["node_id"]
                and str(row.get("Pid")) == pid
            )
            self.judged[key] = (ours, now)
            if len(self.judged) > REMEMBERED:
                self.judged.pop(next(iter(self.judged)))
        return self.judged[key][0]
