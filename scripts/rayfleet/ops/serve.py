"""Serve a run's model on the cluster: the FSDP export (OpenAI completions) or a DDP run (classification).

    rayfleet serve up --run RUN [--config recipes/serve.yaml] [--set replicas=2]
    rayfleet serve status
    rayfleet serve down

local: on the running local cluster (rayfleet cluster up); the endpoint listens on 127.0.0.1:<port>; the API
       key is .rayfleet/serve/api_key (made once, mode 0600).
ecs:   the run's files from s3://<results bucket>/runs/<RUN>/; a trainer task deploys through the head's
       dashboard and exits; the endpoint is the head's private DNS name on the Serve port, reachable only
       from the sources Terraform lists (serve_allowed_cidrs / serve_allowed_security_group_ids), where the
       serve gate (rayfleet/node/serve/gate.py) checks the key on every route before Serve's proxy,
       which listens on 127.0.0.1:GATED_PROXY_PORT behind it; the key is in Secrets Manager
       (serve_api_key_secret_arn) and reaches only the gate. The deployed config is kept with the deployment
       (rayfleet/core/serve_kept.py) until `down`: a head that starts again without it gets it back.
Everything that can be wrong (no such run, nothing to serve, a config that does not fit the workers) is
said in one line before anything is deployed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from rayfleet.core import local_state, ray_auth
from rayfleet.core import serve_kept as kept
from rayfleet.core.aws import Aws
from rayfleet.core.catalog import INSTANCE_TYPES
from rayfleet.core.config import ConfigError, load_config
from rayfleet.core.errors import RayfleetError
from rayfleet.core.moved import gone
from rayfleet.core.run_dir import LOCAL_RUNS, RunDir, runs_root
from rayfleet.core.terminal import printable
from rayfleet.ecs.launch import launch
from rayfleet.ecs.logs import follow_task
from rayfleet.ecs.outputs import Outputs
from rayfleet.local import cluster as local_cluster
from rayfleet.node.serve import control
from rayfleet.serve.app import ServeArgs
from rayfleet.serve.config import GATED_PROXY_PORT, ServeConfig
from rayfleet.serve.keys import ensure_key_file
from rayfleet.serve.served_run import ServedRun, find
from rayfleet.serve.summary import lines
from rayfleet.targets.ecs import bring_up
from rayfleet.targets.run import choose_target


def serve_run_name(run: str, now: datetime | None = None) -> str:
    """The deploying trainer's run name, `serve-<run>-<HHMMSS>`, within the run-name rule's 100 characters
    (a served run's own name may have up to 100)."""
    return f"serve-{run[:86]}-{(now or datetime.now(UTC)):%H%M%S}"


def say(message: str) -> None:
    """Also what Serve reports while it deploys (an application's message, a run's folder): text a job can
    shape, so each line is shown without control characters (rayfleet/core/terminal.py)."""
    text = "\n".join(printable(line) for line in str(message).splitlines())
    print(f"[rayfleet] {text}", flush=True)


def check_fits(cfg: ServeConfig, cpus: float, gpus: int, where: str) -> None:
    if cfg.gpus_per_replica > gpus:
        raise ConfigError(f"gpus_per_replica={cfg.gpus_per_replica}, but {where} have {gpus} GPUs each")
    if cfg.cpus_per_replica > cpus:
        raise ConfigError(f"cpus_per_replica={cfg.cpus_per_replica:g}, but {where} have {cpus:g} CPUs each")


def describe(served: ServedRun, run_dir: RunDir) -> str:
    what = "its Hugging Face export" if served.kind == "llm" else f"its latest complete checkpoint ({served.folder})"
    # A skipped checkpoint's reason names files its job wrote: shown without control characters.
    passed = f"; passed over: {printable('; '.join(served.skipped))}" if served.skipped else ""
    return f"serving run {run_dir.run_name}: {what} from {run_dir.display(served.folder)}{passed}"


def local_key_file() -> Path:
    return ensure_key_file(local_cluster.state_dir().parent / "serve" / "api_key")


def up_local(run: str, cfg: ServeConfig, runs_dir: str, timeout: float) -> int:
    state = local_cluster.load_state()
    if state is None:
        raise RayfleetError(
            "no local cluster is running: rayfleet cluster up first (a served model lives as long as it)"
        )
    run_dir = RunDir(runs_dir if runs_dir.startswith("s3://") else str(Path(runs_dir).resolve()), run)
    served = find(run_dir)
    spec = state.spec
    check_fits(cfg, float(spec["cpus_per_worker"]), int(spec.get("gpus_per_worker", 0)), "the local workers")
    key = local_key_file()
    args = ServeArgs(
        storage=run_dir.storage, run_name=run, kind=served.kind, folder=served.folder, api_key_file=str(key), config=cfg
    )
    say(describe(served, run_dir))
    control.deploy_and_wait(
        state.dashboard_url, control.serve_config(args.model_dump(mode="json"), cfg.port), timeout, say
    )
    path = "/v1/completions" if served.kind == "llm" else "/v1/classify"
    say(f"serving at http://127.0.0.1:{cfg.port}{path}; every request needs `Authorization: Bearer $(cat {key})`")
    return 0


def up_ecs(run: str, cfg: ServeConfig, outputs: str | None, timeout: float) -> int:
    out = Outputs.load(outputs)
    if not out.serve_endpoint:
        raise ConfigError(
            "serving is off in this deployment: set serve_enabled = true in your tfvars, then rayfleet deploy"
        )
    port = int(out.serve_endpoint.rsplit(":", 1)[1])
    if cfg.port != port:
        raise ConfigError(f"port={cfg.port}, but the deployment opens the Serve port {port} (serve_port in Terraform)")
    if port == GATED_PROXY_PORT:
        raise ConfigError(
            f"the deployment's Serve port {port} is where Serve's proxy listens behind the gate: pick another"
        )
    run_dir = RunDir(runs_root(out.results_bucket), run, region=out.region)
    served = find(run_dir)
    group = serving_group(cfg, out)
    # The gate holds the Serve port and checks the key; the replicas hold none (keys.py).
    args = ServeArgs(
        storage=run_dir.storage,
        run_name=run,
        kind=served.kind,
        folder=served.folder,
        region=out.region,
        gated=True,
        config=cfg,
    )
    config = control.serve_config(args.model_dump(mode="json"), GATED_PROXY_PORT)
    command = [
        "python",
        "-m",
        "rayfleet.node.serve.control",
        "up",
        "--config-json",
        json.dumps(config),
        "--timeout",
        str(timeout),
    ]
    say(describe(served, run_dir))
    aws = Aws(out.region)
    if group is not None:  # a group at zero (its min) has no node for the replicas: start what they take
        name, nodes = group
        say(f"replicas on worker group {name}: {nodes} node(s)")
        bring_up(aws, out, {name: nodes})
    record = launch(aws, out, "serve", [], run_name=serve_run_name(run), command=command)
    say(f"trainer task {record['task_arn'].rsplit('/', 1)[-1]} deploys it; following its log")
    code = follow_task(aws, out, record["task_arn"], record["log_stream"])
    if code == 0:
        kept.keep(aws.client("s3"), out.results_bucket, run, config)  # a head that starts again gets it back
        say(
            f"serving at {out.serve_endpoint} (from the allowed sources only); key: aws secretsmanager "
            f"get-secret-value --secret-id {out.serve_api_key_secret_arn} --query SecretString --output text"
        )
        say(f"kept in s3://{out.results_bucket}/{kept.KEY}: re-applied to a restarted head until rayfleet serve down")
    return code


def on_ecs(action: str, outputs: str | None, timeout: float) -> int:
    """status and down on ECS: a trainer task runs them against the head (the laptop cannot reach it)."""
    out = Outputs.load(outputs)
    aws = Aws(out.region)
    command = ["python", "-m", "rayfleet.node.serve.control", action]
    record = launch(aws, out, "serve", [], run_name=f"serve-{action}-{datetime.now(UTC):%H%M%S}", command=command)
    code = follow_task(aws, out, record["task_arn"], record["log_stream"])
    if action == "down" and code == 0:
        kept.forget(aws.client("s3"), out.results_bucket)  # nothing served: no head gets it back, autostop may stop
    return code


def dashboard() -> str:
    state = local_cluster.load_state()
    if state is None:
        raise RayfleetError("no local cluster is running (rayfleet cluster up); nothing is served")
    return state.dashboard_url


def default_config() -> Path:
    """The built-in serving config: recipes/serve.yaml of the project the verb runs in."""
    return local_state.project_dir() / "recipes" / "serve.yaml"


def serve_verb(
    action: str,
    run: str | None = None,
    on: str = "auto",
    config: str | None = None,
    sets: list[str] | None = None,
    timeout_s: float | None = None,
    outputs: str | None = None,
    runs_dir: str = LOCAL_RUNS,
) -> int:
    """`rayfleet serve up|status|down`: `up` serves `run` (its config: `config`, default recipes/serve.yaml, with
    `sets` KEY=VALUE overrides) locally or on ECS, as `on` says (auto: ECS once deployed)."""
    ray_auth.use_token_auth()  # first: Ray reads its auth mode once, when it is imported
    timeout_s = 900.0 if timeout_s is None else timeout_s
    target = choose_target(on, outputs)
    if action == "up":
        if not run:
            raise ConfigError("which run? rayfleet serve up --run <run> (rayfleet runs lists them)")
        cfg = load_config(ServeConfig, config or default_config(), [s for item in sets or [] for s in item.split()])
        if target == "local":
            return up_local(run, cfg, runs_dir, timeout_s)
        return up_ecs(run, cfg, outputs, timeout_s)
    if target == "ecs":
        return on_ecs(action, outputs, timeout_s)
    if action == "down":
        control.shutdown(dashboard())
        say("Serve shut down: no applications, no replicas, no proxy")
        return 0
    print("\n".join(lines(control.status(dashboard()))))
    return 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ops.serve", "rayfleet serve up|status|down")


def serving_group(cfg: ServeConfig, out: Outputs) -> tuple[str, int] | None:
    """The worker group the replicas go to and the nodes they take there: the cheapest group (per node) whose
    node holds a replica; None where the catalog knows none of the groups' types (Ray is the judge). ConfigError
    (the last group's reason) when no group's node holds one."""
    refusal, known = None, []
    for name, group in out.worker_groups.items():
        shape = INSTANCE_TYPES.get(group.instance_type)
        if shape is not None:
            known.append((float(shape["usd_per_hour"]), name, group, shape))
    for _, name, group, shape in sorted(known, key=lambda k: (k[0], k[1])):
        try:
            where = f"worker group {name}'s nodes ({group.instance_type})"
            check_fits(cfg, float(shape["vcpus"]), int(shape["gpus"]), where)
        except ConfigError as exc:
            refusal = exc
            continue
        per_node = int(shape["vcpus"] // cfg.cpus_per_replica)
        if cfg.gpus_per_replica:
            per_node = min(per_node, int(shape["gpus"]) // cfg.gpus_per_replica)
        replicas = cfg.replicas or (cfg.autoscaling.min_replicas if cfg.autoscaling else 1) or 1
        return name, min(-(-replicas // max(per_node, 1)), group.max_nodes or 1)
    if refusal is not None:
        raise refusal
    return None
