"""The recipe: one YAML file that says how to run a user's training code on the cluster, locally or on ECS.

    name: resnet-sweep
    code: .                         # directory packaged and shipped (relative to this file; default: its dir)
    entrypoint: -m my_pkg.train     # a module (-m ...), a script in `code` (train.py), or a command
    args: [--epochs, "3"]
    launcher: torchrun              # optional: torchrun | accelerate, one per worker node (multinode.py)
    launcher_args: [--max-restarts=0]   # the launcher's own options; rayfleet sets nodes, ranks, rendezvous
    max_restarts: 1                 # launcher runs: launch all nodes again after a failure, this many times
    env:
      WANDB_MODE: offline
      HF_TOKEN: {secret: "secretsmanager:rayfleet/recipes/hf-token"}   # resolved in the job's process, never stored
    resources: {workers: 2, cpus_per_worker: 4, gpus_per_worker: 1, memory_per_worker_gib: 16}
    storage: s3://bucket/prefix     # default: the run's prefix in the results bucket, or ./runs locally
    image: 123.dkr.ecr.../custom:v1 # ECS only; default: the trainer image
    setup: python -c "import my_pkg"
    pip: [einops==0.8.1]            # pinned only
    exclude: ["*.ckpt"]             # more patterns the code package leaves out
    data: ../data                   # a folder or file the job reads (relative to this file): ${RAYFLEET_DATA}

Validation is as strict as the job configs (rayfleet/core/config.py): unknown keys, wrong types, a missing
entrypoint, a code directory or script that does not exist and unpinned pip packages are each one clear
error, before anything is packaged or submitted. So are numbers that are infinite, NaN or past their bound, a
key said twice, and a file that is not UTF-8 (rayfleet/core/config.py). The recipe's own `code:` and `data:`
stay inside its project (rayfleet/recipes/recipe_root.py); the command line (--set data=...) may name any.
Whether the resources fit is checked against the target (`check_fits`), also before submission.

The job sees where it runs through RAYFLEET_* variables (`job_env`), and `${RAYFLEET_...}` in args and
plain env values is replaced by the same values, so a recipe can say `storage=${RAYFLEET_STORAGE}`.
`${RAYFLEET_DATA}` is the recipe's `data:`: locally its absolute path, on ECS its staged copy in S3
(rayfleet/recipes/stage.py), since the code package never carries data.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rayfleet.core import worker_groups
from rayfleet.core.catalog import accelerators
from rayfleet.core.config import ConfigError, describe_error, merge, parse_overrides, read_yaml_file
from rayfleet.recipes.launchers import RAYFLEET_SETS, launcher_problem
from rayfleet.recipes.recipe_root import leaving, project_of

SECRET_SCHEMES = ("secretsmanager:", "ssm:", "env:")
# Bounds well past any instance or run there is, so a typo (1e300, 10000 hours) is refused, not believed.
MAX_CPUS = 1024.0  # the largest EC2 instances have 448 vCPUs
MAX_MEMORY_GIB = 32768.0  # and 24 TiB
MAX_HOURS = 24.0 * 366  # a year
MAX_COST_USD = 1e6
JOB_VARS = (
    "RAYFLEET_RUN_NAME",
    "RAYFLEET_STORAGE",
    "RAYFLEET_RUN_DIR",
    "RAYFLEET_LAUNCH_DIR",
    "RAYFLEET_NUM_WORKERS",
    "RAYFLEET_MIN_WORKERS",
    "RAYFLEET_CPUS_PER_WORKER",
    "RAYFLEET_GPUS_PER_WORKER",
    "RAYFLEET_MEMORY_PER_WORKER_GIB",
    "RAYFLEET_DATA",
    worker_groups.GROUP_VAR,
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)  # no .inf, no .nan


class SecretRef(_Strict):
    """A value that is looked up in the job's own process (rayfleet/recipes/job_entry.py), never written into
    the recipe, the run record or anything Ray keeps."""

    secret: str = Field(description="secretsmanager:<name or ARN>, ssm:<parameter name> or env:<VARIABLE>")

    @field_validator("secret")
    @classmethod
    def _scheme(cls, value: str) -> str:
        if not value.startswith(SECRET_SCHEMES) or value.endswith(":"):
            raise ValueError(
                f"{value!r} is not a secret reference; write one of "
                "secretsmanager:<name>, ssm:<parameter>, env:<VARIABLE>"
            )
        return value


class Resources(_Strict):
    """`workers: 4`, or elastic `workers: 2-4` (min-max, as `workers: 4, min_workers: 2`): Ray Train starts with
    what fits of the range and grows when workers free up; the queue admits the run once the minimum fits."""

    workers: int = Field(2, ge=1, le=512, description="Ray Train workers (elastic: the most)")
    min_workers: int | None = Field(None, ge=1, le=512, description="elastic: the fewest it starts and goes on with")
    cpus_per_worker: float = Field(1.0, gt=0, le=MAX_CPUS)
    gpus_per_worker: int = Field(0, ge=0, le=16)
    memory_per_worker_gib: float | None = Field(None, gt=0, le=MAX_MEMORY_GIB)
    group: str | None = Field(None, description="the worker group its workers go to (rayfleet/core/worker_groups.py)")
    accelerator: str | None = Field(
        None, description="the GPU its workers need (A10G, L4, L40S, A100, H100): only a group of that GPU fits"
    )

    @model_validator(mode="before")
    @classmethod
    def _range(cls, value):
        """`workers: 2-4` -> workers 4, min_workers 2; a range the wrong way round is one line."""
        if not isinstance(value, dict) or not isinstance(value.get("workers"), str):
            return value
        found = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", value["workers"])
        if not found:
            raise ValueError(f"workers: {value['workers']!r} is neither a number nor a range min-max (as in 2-4)")
        low, high = int(found[1]), int(found[2])
        if low > high:
            raise ValueError(f"workers: {low}-{high} is the wrong way round: the minimum comes first ({high}-{low})")
        return {**value, "workers": high, "min_workers": low}

    @model_validator(mode="after")
    def _min_within(self) -> Resources:
        if self.min_workers is not None and self.min_workers > self.workers:
            raise ValueError(f"min_workers: {self.min_workers} is more than workers ({self.workers})")
        return self

    @property
    def fewest(self) -> int:
        """The workers the run needs to start: its minimum when elastic."""
        return self.min_workers or self.workers

    @field_validator("group")
    @classmethod
    def _group_name(cls, value):
        return worker_groups.check_name(value) if value is not None else None

    @field_validator("accelerator")
    @classmethod
    def _known_accelerator(cls, value):
        if value is None:
            return None
        known = {a.lower(): a for a in accelerators()}
        if str(value).lower() not in known:
            raise ValueError(f"accelerator: {value!r} is none of {', '.join(sorted(known.values()))}")
        return known[str(value).lower()]

    @model_validator(mode="after")
    def _accelerator_needs_gpus(self) -> Resources:
        if self.accelerator and not self.gpus_per_worker:
            raise ValueError(f"accelerator: {self.accelerator} needs gpus_per_worker of at least 1")
        return self

    @field_validator("cpus_per_worker", "memory_per_worker_gib", mode="before")
    @classmethod
    def _int_is_a_float(cls, value):
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Notify(_Strict):
    """Who hears about the run (rayfleet/recipes/notify.py): the deployment's SNS topic on ECS, and a webhook."""

    webhook: SecretRef | None = Field(None, description="a Slack-compatible incoming webhook URL, as a secret")
    stall_after_s: float = Field(
        1800, ge=0, le=MAX_HOURS * 3600, description="say so when the run prints nothing this long; 0: never"
    )


class Retries(_Strict):
    """Resubmit a failed run under the same run name, so it resumes from its checkpoint (rayfleet/recipes/job.py);
    on ECS a lost trainer task is relaunched as well (rayfleet/targets/run.py). `retries: 2` is short for
    `retries: {count: 2}`."""

    count: int = Field(0, ge=0, le=20, description="resubmissions after a failure")
    exit_codes: list[int] | None = Field(
        None, description="the exit codes retried; default: every failure but bad input (2) and a stop (130, 143)"
    )

    def allows(self, exit_code: int) -> bool:
        if exit_code == 0:
            return False
        if self.exit_codes is not None:
            return exit_code in self.exit_codes
        return exit_code not in NOT_RETRIED


NOT_RETRIED = (2, 130, 143)  # bad input, and a run stopped by Ctrl-C or SIGTERM: running it again cannot help


class Recipe(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$", description="lower case, digits, dashes; names runs")
    code: str = Field(".", description="directory to package, relative to the recipe file")
    entrypoint: str = Field(min_length=1, description="-m module, a script in code, or a command")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str | SecretRef] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    storage: str | None = Field(None, description="a local directory or s3://bucket/prefix")
    image: str | None = None
    launcher: Literal["torchrun", "accelerate"] | None = Field(
        None, description="run the script under this launcher on every worker node (not as the driver)"
    )
    launcher_args: list[str] = Field(default_factory=list, description="the launcher's own options")
    max_restarts: int = Field(0, ge=0, le=100, description="launcher runs: relaunch every node after a failure")
    setup: str | None = None
    pip: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    data: str | None = Field(
        None, description="a folder or file the job reads, relative to the recipe file: ${RAYFLEET_DATA}"
    )
    notify: Notify | None = Field(None, description="notifications; on ECS the deployment's topic without this")
    retries: Retries = Field(default_factory=Retries, description="resubmit a failed run; it resumes")
    capacity_fallback: list[Literal["types", "on-demand", "group"]] = Field(
        ["types", "on-demand"],
        description="on ECS, when its group's capacity does not come: its other types, on-demand, another group",
    )
    capacity_fallback_after_min: float = Field(
        5.0, ge=0, le=1440, description="minutes a capacity reason lasts before the next capacity_fallback step"
    )
    max_hours: float | None = Field(
        None, gt=0, le=MAX_HOURS, description="stop cleanly (checkpoint first) after this long"
    )
    max_cost_usd: float | None = Field(
        None, gt=0, le=MAX_COST_USD, description="stop cleanly once the run's estimated cost reaches this"
    )
    priority: int = Field(
        0, ge=0, le=9, description="the cluster's queue: higher first (0-9), then the earlier submission"
    )

    @field_validator("retries", mode="before")
    @classmethod
    def _retries_count(cls, value):
        return {"count": value} if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("env", mode="before")
    @classmethod
    def _env_values(cls, value):
        """Each value is a string or {secret: ...}: one message per bad value, not one per union member."""
        if not isinstance(value, dict):
            return value
        parsed = {}
        for key, item in value.items():
            if isinstance(item, dict):
                try:
                    item = SecretRef.model_validate(item)
                except ValidationError as exc:
                    raise ValueError(f"{key}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
            elif not isinstance(item, str):
                raise ValueError(f"{key}: {item!r} is neither a string nor {{secret: ...}} (quote numbers)")
            parsed[key] = item
        return parsed

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict) -> dict:
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"{key!r} is not an environment variable name")
            if key in JOB_VARS or key == "RAYFLEET_SECRET_REFS" or key.startswith("RAYFLEET_NOTIFY"):
                raise ValueError(f"{key} is set by rayfleet for every run; choose another name")
        return value

    @field_validator("pip")
    @classmethod
    def _pinned(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                req = Requirement(entry)
            except InvalidRequirement as exc:
                raise ValueError(f"{entry!r} is not a requirement ({exc})") from None
            specs = list(req.specifier)
            if req.url or len(specs) != 1 or specs[0].operator not in ("==", "===") or "*" in specs[0].version:
                raise ValueError(
                    f"{entry!r} is not pinned; write an exact version, as in "
                    f"{req.name}==1.2.3 (runs must be reproducible)"
                )
        return value

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("s3://") and len(value.rstrip("/")) <= len("s3://"):
            raise ValueError("s3:// needs a bucket, as in s3://bucket/prefix")
        return value

    @field_validator("launcher_args")
    @classmethod
    def _launcher_options(cls, value: list[str]) -> list[str]:
        for option in value:
            name = option.split("=", 1)[0]
            if name.replace("_", "-") in RAYFLEET_SETS:
                raise ValueError(f"{name} is set by rayfleet from resources (one launcher per worker node)")
        return value

    @model_validator(mode="after")
    def _launcher_is_not_elastic(self) -> Recipe:
        res = self.resources
        if self.launcher and res.min_workers is not None and res.min_workers < res.workers:
            raise ValueError(
                f"resources.workers: {res.min_workers}-{res.workers} is elastic, which only Ray Train runs are; a "
                f"{self.launcher} run has a fixed set of nodes: write workers: {res.workers}"
            )
        return self

    def secret_refs(self) -> dict[str, str]:
        refs = {k: v.secret for k, v in self.env.items() if isinstance(v, SecretRef)}
        if self.notify is not None and self.notify.webhook is not None:
            refs["RAYFLEET_NOTIFY_WEBHOOK"] = self.notify.webhook.secret  # resolved in the job's process only
        return refs

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_none=True), sort_keys=False)


@dataclass(frozen=True)
class LoadedRecipe:
    recipe: Recipe
    path: Path  # the recipe file
    code_dir: Path  # absolute

    @property
    def data_path(self) -> Path | None:
        """The recipe's `data:`, absolute, or None. Whether it exists is checked when a run is submitted
        (`require_data`): a recipe stays valid before `make data` has run."""
        return (self.path.parent / self.recipe.data).resolve() if self.recipe.data else None

    def require_data(self) -> Path | None:
        if self.data_path is not None and not self.data_path.exists():
            raise ConfigError(
                f"recipe {self.path}: data: {self.recipe.data} does not exist ({self.data_path}); "
                "`make data` and `make text-data` write the built-in sets"
            )
        return self.data_path

    def entry_kind(self) -> Literal["module", "script", "command"]:
        return entry_kind(self.recipe.entrypoint)


def entry_kind(entrypoint: str) -> Literal["module", "script", "command"]:
    words = shlex.split(entrypoint)
    if words[0] == "-m":
        return "module"
    if len(words) == 1 and words[0].endswith(".py"):
        return "script"
    return "command"


def load(path: str | Path, overrides: list[str] | None = None, root: str | Path | None = None) -> LoadedRecipe:
    """Read, validate and check a recipe file; `overrides` are key=value settings (resources.workers=4). The
    recipe's own `code:` and `data:` stay inside `root` (default: `project_of` the recipe)."""
    path = Path(path)
    data = read_yaml_file(path, "recipe") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {path}: the top level must be a mapping of keys to values")
    named = parse_overrides(overrides or [])
    data = merge(data, named)
    if "entrypoint" not in data:
        raise ConfigError(
            f"invalid recipe {path}:\n  entrypoint: missing; say what to run "
            "(-m package.module, a script such as train.py, or a command)"
        )
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        problems = "\n  ".join(describe_error(e) for e in exc.errors())
        raise ConfigError(f"invalid recipe {path}:\n  {problems}") from None
    code_dir = (path.parent / recipe.code).resolve()
    data_path = (path.parent / recipe.data).resolve() if recipe.data else None
    root = Path(root).resolve() if root else project_of(path)
    outside = leaving(root, {"code": (recipe.code, code_dir), "data": (recipe.data, data_path)}, named)
    if outside:
        raise ConfigError(f"invalid recipe {path}:\n  {outside}")
    if not code_dir.is_dir():
        raise ConfigError(f"invalid recipe {path}:\n  code: {recipe.code} is not a directory ({code_dir})")
    try:
        words = shlex.split(recipe.entrypoint)
    except ValueError as exc:
        raise ConfigError(f"invalid recipe {path}:\n  entrypoint: {exc}") from None
    if words[0] == "-m" and len(words) != 2:
        raise ConfigError(f"invalid recipe {path}:\n  entrypoint: -m takes one module name (arguments go in args)")
    loaded = LoadedRecipe(recipe, path, code_dir)
    if loaded.entry_kind() == "script" and not (code_dir / words[0]).is_file():
        raise ConfigError(f"invalid recipe {path}:\n  entrypoint: {words[0]} is not a file in {code_dir}")
    problem = launcher_problem(loaded)
    if problem:
        raise ConfigError(f"invalid recipe {path}:\n  {problem}")
    return loaded
