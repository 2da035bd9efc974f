"""The results bucket's layout: every key prefix the code builds, and which process may list, read, write or
delete it. The one contract between the processes that share the bucket, and the one source of its keys.

Three kinds of process touch the bucket, each with its own AWS identity:

    operator   the deployer: `rayfleet` on the operator's machine (make deploy, run, status, serve, clean),
               with the operator's own credentials (infra/operator-policy.json)
    control    the ray-control task (rayfleet/node/control/head_snapshot.py): the head's snapshot, autostop, capacity
               that follows the queue, runs waiting for a driver slot; no job ever runs with its role
    task       the task role: the head, the workers and the trainer, so every job and whatever it imports

Terraform grants the control and task roles exactly what LAYOUT says (infra/modules/storage and iam), and
tests/infra/test_iam_grants.py checks the rendered policies against it both ways: a prefix here without its
grant, or a grant without a prefix here, fails CI, and so does an S3 key literal outside this module.
Keys are relative to the bucket; each prefix ends with "/" (S3 and IAM match prefixes as text).
"""

from __future__ import annotations

from dataclasses import dataclass

OPERATOR, CONTROL, TASK = "operator", "control", "task"
ROLES = (OPERATOR, CONTROL, TASK)
LIST, READ, WRITE, DELETE = "list", "read", "write", "delete"

RUNS = "runs/"  # runs/<run>/: one run directory each (rayfleet/core/run_dir.py)
DATA = "data/"  # datasets the operator uploads and jobs read (and may write, e.g. a preprocessed copy)
QUEUE = "queue/"  # queue/<run>.json: the run queue (rayfleet/core/run_queue.py)
QUEUE_LEDGER = "queue/spent/"  # queue/spent/<run>.json: what each ended run spent (the queue's budget)
STAGED = "staged/"  # staged/<hash>/: a recipe's data: by content (rayfleet/core/staged_data.py)
# The S3 model cache: which staged/<hash>/ holds the preloaded models (rayfleet/core/model_cache.py); written by
# `make push`, read by the worker tasks' model-cache container. Under staged/, so only the deployer writes it.
MODEL_CACHE = "staged/models.json"
CLUSTER = "cluster/"  # what no job may write: the control task's and the deployer's
RAY_STATUS = "cluster/ray-status.json"  # the head's snapshot (rayfleet/node/control/head_snapshot.py)
SERVE_CONFIG = "cluster/serve.json"  # the Serve config make serve keeps (rayfleet/core/serve_kept.py)
LAUNCHES = "cluster/launches/"  # <run>.json: RunTask requests waiting for a driver slot (core/launch_queue.py)
LAUNCHES_STARTED = "cluster/launches/started/"  # <run>.json: the placed ones


@dataclass(frozen=True)
class Prefix:
    key: str
    why: str
    access: dict[str, frozenset[str]]  # role -> what it does there; a role not named does nothing there

    def of(self, role: str) -> frozenset[str]:
        return self.access.get(role, frozenset())


def _a(*what: str) -> frozenset[str]:
    return frozenset(what)


ALL = _a(LIST, READ, WRITE, DELETE)
LAYOUT: tuple[Prefix, ...] = (
    Prefix(
        RUNS,
        "run directories: the code zip and recipe (operator), everything the job writes (task)",
        {OPERATOR: ALL, TASK: ALL},
    ),
    Prefix(DATA, "datasets: uploaded by the operator, read by jobs", {OPERATOR: ALL, TASK: ALL}),
    Prefix(
        QUEUE,
        "queue entries and the ledger: each run's job writes its own, the control task scales on them",
        {OPERATOR: _a(LIST, READ), TASK: ALL, CONTROL: _a(LIST, READ)},
    ),
    Prefix(QUEUE_LEDGER, "the queue's budget ledger (inside queue/)", {OPERATOR: _a(LIST, READ), TASK: ALL}),
    Prefix(
        STAGED,
        "staged data: only the deployer writes; a job that could would plant content another run trusts",
        {OPERATOR: _a(LIST, READ, WRITE), TASK: _a(LIST, READ)},
    ),
    Prefix(
        CLUSTER,
        "no job may write here: the control task's snapshot, the deployer's Serve config and launches",
        {OPERATOR: _a(READ, WRITE, DELETE), CONTROL: _a(READ, WRITE)},
    ),
    Prefix(
        RAY_STATUS, "the head's snapshot: control writes, rayfleet deploy start/status read", {CONTROL: _a(READ, WRITE)}
    ),
    Prefix(SERVE_CONFIG, "rayfleet serve up keeps, the control task re-applies", {OPERATOR: ALL, CONTROL: _a(READ)}),
    Prefix(
        LAUNCHES,
        "rayfleet run keeps a RunTask waiting for a driver slot; the control task sends it and moves it",
        {OPERATOR: ALL, CONTROL: ALL},
    ),
    Prefix(LAUNCHES_STARTED, "placed launches (rayfleet logs finds the task)", {OPERATOR: ALL, CONTROL: _a(WRITE)}),
)
# S3's HeadBucket is authorized as s3:ListBucket with no prefix: Ray Train's storage check (pyarrow's create_dir)
# asks it of the results bucket in every process that writes a run. The roles here are granted it; with it they
# may list every key's name (never read one) when they ask for no prefix.
FIND_BUCKET = frozenset({TASK})
TOP_LEVEL = tuple(p.key for p in LAYOUT if p.key.count("/") == 1 and p.key.endswith("/"))


def folder(prefix: str) -> str:
    """A prefix as a folder name under a storage root ("queue/" -> "queue"), for code that joins paths."""
    return prefix.rstrip("/")


def within(key: str) -> Prefix:
    """The most specific declared prefix holding `key`; KeyError for a key outside the layout."""
    found = [p for p in LAYOUT if key == p.key or key.startswith(p.key)]
    if not found:
        raise KeyError(f"{key!r} is under no prefix of the results bucket's layout (rayfleet/core/bucket.py)")
    return max(found, key=lambda p: len(p.key))


def below(prefix: str, parent: str) -> str:
    """A sub-prefix's name inside its parent folder (below(QUEUE_LEDGER, QUEUE) == "spent")."""
    if not prefix.startswith(parent):
        raise ValueError(f"{prefix!r} is not below {parent!r}")
    return prefix.removeprefix(parent).rstrip("/")
