"""The rehearsal's ECS: a small agent and service scheduler that run moto's tasks as podman containers.

Every `step()`:
  * services: each service's RUNNING tasks are brought to its desiredCount (RunTask in moto with the
    group `service:<name>`, as ECS's scheduler does, then the containers); a stopped service task is
    replaced, with ECS-like back-off when replacements keep stopping; desiredCount 0 (`make stop`) stops
    them. runningCount/pendingCount are written back to moto.
  * trainers: tasks RunTask'd with startedBy=rayfleet (rayfleet/ecs/launch.py) are started with their
    containerOverrides (command, environment) applied to the task definition.
  * every task: a container that exits is noted; when an essential one exits the task's other containers
    are stopped (each with its stopTimeout) and the task is STOPPED in moto with the exit codes; a task
    stopped in moto (StopTask, `make stop`) has its containers stopped; health checks run at their
    interval (`podman healthcheck run`: no systemd timers needed) and an essential container that turns
    unhealthy stops its task, as ECS does.

Starting a task, as the ECS agent does: secrets resolved from Secrets Manager by their valueFrom ARN, as the
task definition's execution role (handed to podman as secrets: never on a command line; `podman inspect` shows
them, as `docker inspect` shows an ECS task's), the task role's credentials in every container of the task
(the session keys of its taskRoleArn, as podman secrets too: what ECS's credentials endpoint hands the task;
none without a task role), a pod per task (awsvpc: the task's
containers share one network namespace, each keeps its own IPC and /dev/shm), the service's Cloud Map
names as network aliases of the pod, the task's volumes (one without a host path, or with one this host
lacks, is an empty podman volume of the task, removed with it; ECS makes an empty task-scoped volume the same
way and, like podman, copies the owner of the image's directory at the mount point into it) mounted as each
container's mountPoints say, containers started in dependsOn order, and each container's output shipped to
CloudWatch Logs as the awslogs driver names it (<prefix>/<container>/<task id>).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rayfleet.core.aws import STARTED_BY
from tools.moto_stack.iam import role_name
from tools.rehearsal import admission, podman
from tools.rehearsal.host import Adaptation
from tools.rehearsal.log_shipper import LogShipper
from tools.rehearsal.store import GcsStore

SERVICE_STARTED_BY = "ecs-svc/rehearsal"
BACKOFF_S = (0, 5, 10, 20, 40, 60)
DEPENDS_TIMEOUT_S = 600


def _primary_deployment(service: dict) -> str | None:
    primary = [d for d in service.get("deployments", []) if d.get("status") == "PRIMARY"]
    return primary[0]["id"] if primary else None


def say(message: str) -> None:
    print(f"[rehearsal] {message}", flush=True)


@dataclass
class ContainerRun:
    definition: dict
    podman_name: str
    state: str = "PENDING"  # PENDING, RUNNING, STOPPED
    exit_code: int | None = None
    health: str = "UNKNOWN"
    next_health_check: float = 0.0
    started_at: float = 0.0
    shipper: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.definition["name"]

    @property
    def essential(self) -> bool:
        return self.definition.get("essential", True)


@dataclass
class TaskRun:
    arn: str
    key: str  # head, worker, trainer
    service: str | None
    pod: str
    containers: dict[str, ContainerRun]
    aliases: list[str] = field(default_factory=list)
    status: str = "PROVISIONING"  # PROVISIONING, RUNNING, STOPPING, STOPPED
    reason: str = ""
    deployment: str | None = None  # the service deployment that started it (a forced new one replaces it)
    volumes: dict[str, str] = field(default_factory=dict)  # task volume name -> podman volume or host path
    task_role: str | None = None  # the role name of the definition's taskRoleArn: its containers' credentials
    execution_role: str | None = None  # the role name of its executionRoleArn: what fetches its secrets
    started_at: float = field(default_factory=time.monotonic)
    thread: threading.Thread | None = None

    @property
    def id(self) -> str:
        return self.arn.rsplit("/", 1)[-1]

    @property
    def short(self) -> str:
        return f"{self.key} {self.id[:8]}"


class Agent:
    def __init__(
        self,
        moto,
        deployed: dict,
        adaptation: Adaptation,
        rid: str,
        network: dict,
        extra_env: dict,
        log_dir,
        stand_in: GcsStore | None = None,
    ):
        self.moto = moto
        self.ecs = moto.client("ecs")
        self.cluster = deployed["cluster"]
        self.services = deployed["services"]  # name -> {"task_definition": key, "dns_names", "network"}
        self.rendered_arns = dict(deployed["task_definitions"])  # key -> the ARN registered from the picture
        self.adaptation = adaptation
        self.rid = rid
        self.network = network
        self.extra_env = extra_env
        self.log_dir = log_dir
        self.stand_in = stand_in  # the GCS store: its endpoint's name in every pod, its CA in the head's bundle
        self.tasks: dict[str, TaskRun] = {}
        self.refused: set[str] = set()  # task ARNs whose definitions the rehearsal did not render
        self.failures: dict[str, int] = {}
        self.next_start: dict[str, float] = {}
        self.lock = threading.Lock()
        self.closing = False
        self._definitions: dict[str, dict] = {}

    # -- the loop ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Start nothing more, let tasks being started finish that, and end every log follower this agent
        started (the containers go with `remove_everything`, after this)."""
        self.closing = True
        for run in list(self.tasks.values()):
            if run.thread is not None:
                run.thread.join(timeout=120)
        for run in self.tasks.values():
            for container in run.containers.values():
                if container.shipper is not None:
                    container.shipper.close()

    def step(self) -> None:
        self._observe_containers()
        self._observe_moto()
        self._schedule_services()
        self._start_trainers()
        self._health_checks()

    def live(self, service: str | None = None, key: str | None = None) -> list[TaskRun]:
        return [
            t
            for t in self.tasks.values()
            if t.status != "STOPPED" and (service is None or t.service == service) and (key is None or t.key == key)
        ]

    # -- services ----------------------------------------------------------------------------------------
    def _schedule_services(self) -> None:
        names = list(self.services)
        described = {
            s["serviceName"]: s for s in self.ecs.describe_services(cluster=self.cluster, services=names)["services"]
        }
        for name, info in self.services.items():
            desired = described.get(name, {}).get("desiredCount", 0)
            deployment = _primary_deployment(described.get(name, {}))
            for old in [t for t in self.live(service=name) if t.status != "STOPPING" and t.deployment != deployment]:
                # minimumHealthyPercent 0: ECS stops the old deployment's tasks, then starts the new one's
                self.stop_task(old, f"Replaced by deployment {deployment} (forceNewDeployment)", in_moto=True)
            live = [t for t in self.live(service=name) if t.status not in ("STOPPING",)]
            if len(live) < desired and time.monotonic() >= self.next_start.get(name, 0):
                self._start_service_task(name, info, described[name])
            elif len(live) > desired:
                newest = max(live, key=lambda t: t.started_at)
                self.stop_task(newest, "Scaling activity initiated by (deployment ecs-svc/rehearsal)", in_moto=True)
            running = sum(1 for t in self.live(service=name) if t.status == "RUNNING")
            pending = sum(1 for t in self.live(service=name) if t.status == "PROVISIONING")
            self.moto.record_service(self.cluster, name, running, pending)

    def _start_service_task(self, name: str, info: dict, service: dict) -> None:
        kwargs = {}
        if service.get("networkConfiguration") or info.get("network"):
            kwargs["networkConfiguration"] = service.get("networkConfiguration") or info["network"]
        if info.get("placement"):  # moto's CreateService keeps no placement constraints: ECS's scheduler does
            kwargs["placementConstraints"] = info["placement"]
        response = self.ecs.run_task(
            cluster=self.cluster,
            taskDefinition=service["taskDefinition"],
            count=1,
            group=f"service:{name}",
            startedBy=SERVICE_STARTED_BY,
            **kwargs,
        )
        if not response.get("tasks"):
            reasons = (
                ", ".join(f.get("reason", "?") for f in response.get("failures", []))
                or "no container instance has room"
            )
            say(f"service {name}: cannot place a task ({reasons}); retrying")
            self.next_start[name] = time.monotonic() + 10
            return
        task = response["tasks"][0]
        run = self._launch(task, service=name, aliases=info.get("dns_names", []), overrides=None)
        if run is None:  # refused: ask again in a minute, as ECS backs off a service that cannot start
            self.next_start[name] = time.monotonic() + 60
        else:
            run.deployment = _primary_deployment(service)

    # -- trainers ----------------------------------------------------------------------------------------
    def _start_trainers(self) -> None:
        pages = self.ecs.get_paginator("list_tasks").paginate(
            cluster=self.cluster, startedBy=STARTED_BY, desiredStatus="RUNNING"
        )
        new = [arn for page in pages for arn in page["taskArns"] if arn not in self.tasks and arn not in self.refused]
        if not new:
            return
        for task in self.ecs.describe_tasks(cluster=self.cluster, tasks=new)["tasks"]:
            self._launch(task, service=None, aliases=[], overrides=task.get("overrides") or {})

    # -- starting a task ---------------------------------------------------------------------------------
    def _definition(self, arn: str) -> dict:
        if arn not in self._definitions:
            self._definitions[arn] = self.ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"]
        return self._definitions[arn]

    def _admitted(self, task: dict, definition: dict) -> str | None:
        """The rendered definition this task's is (tools/rehearsal/admission.py); None after stopping it."""
        rendered = {key: self._definition(arn) for key, arn in self.rendered_arns.items()}
        try:
            return admission.admit(definition, rendered, podman.image_exists)
        except admission.NotRendered as exc:
            reason = f"refused: not a task definition this rehearsal rendered ({exc})"[:255]
            self.refused.add(task["taskArn"])
            with contextlib.suppress(Exception):
                self.ecs.stop_task(cluster=self.cluster, task=task["taskArn"], reason=reason)
            # said after the stop: whoever reads this line finds the task stopped (a test raced it under load)
            say(f"task {task['taskArn'].rsplit('/', 1)[-1][:8]} {reason}")
            return None

    def _launch(self, task: dict, service: str | None, aliases: list[str], overrides: dict | None) -> TaskRun | None:
        definition = self._definition(task["taskDefinitionArn"])
        key = self._admitted(task, definition)
        if key is None:
            return None
        task_id = task["taskArn"].rsplit("/", 1)[-1]
        pod = f"rf-{self.rid}-{key}-{task_id[:8]}"
        containers = {}
        for original in definition["containerDefinitions"]:
            adapted = self.adaptation.container(key, original)
            for override in (overrides or {}).get("containerOverrides", []):
                if override.get("name") == adapted["name"]:
                    if override.get("command"):
                        adapted["command"] = override["command"]
                    env = {e["name"]: e["value"] for e in adapted.get("environment", [])}
                    env.update({e["name"]: e["value"] for e in override.get("environment", [])})
                    adapted["environment"] = [{"name": k, "value": v} for k, v in env.items()]
            containers[adapted["name"]] = ContainerRun(adapted, f"{pod}-{adapted['name']}")
        run = TaskRun(task["taskArn"], key, service, pod, containers, aliases)
        # The definition's roles (launch.py overrides no taskRoleArn; an override here would not be honoured).
        run.task_role = role_name(definition["taskRoleArn"]) if definition.get("taskRoleArn") else None
        run.execution_role = role_name(definition["executionRoleArn"]) if definition.get("executionRoleArn") else None
        for volume in definition.get("volumes") or []:
            host = (volume.get("host") or {}).get("sourcePath")
            run.volumes[volume["name"]] = host if host and Path(host).exists() else f"{pod}-{volume['name']}"
        with self.lock:
            self.tasks[run.arn] = run
        self.moto.record_pending(self.cluster, run.arn)
        say(f"starting task {run.short}" + (f" for service {service}" if service else " (RunTask by rayfleet)"))
        run.thread = threading.Thread(target=self._start, args=(run,), name=f"start-{run.id[:8]}", daemon=True)
        run.thread.start()
        return run

    def _start(self, run: TaskRun) -> None:
        if self.closing:
            return
        try:
            secrets = self._resolve_secrets(run)
            args = [
                "pod",
                "create",
                "--name",
                run.pod,
                "--label",
                f"{podman.LABEL}={self.rid}",
                "--share",
                "net,uts",
                "--network",
                self.network["name"],
                "--hostname",
                run.pod,
            ]
            for alias in run.aliases:
                args += ["--network-alias", alias]
            for name, address in (self.stand_in.hosts if self.stand_in else {}).items():
                args += ["--add-host", f"{name}:{address}"]
            podman.podman(*args)
            for source in run.volumes.values():
                if not source.startswith("/"):
                    podman.podman("volume", "create", "--label", f"{podman.LABEL}={self.rid}", source)
            started: set[str] = set()
            order = list(run.containers.values())
            deadline = time.monotonic() + DEPENDS_TIMEOUT_S
            while len(started) < len(order):
                if run.status in ("STOPPING", "STOPPED") or self.closing:
                    return
                progressed = False
                for container in order:
                    if container.name in started or not self._dependencies_met(run, container):
                        continue
                    self._run_container(run, container, secrets.get(container.name, []))
                    started.add(container.name)
                    progressed = True
                if not progressed:
                    if time.monotonic() > deadline:
                        raise RuntimeError("dependsOn conditions not met within 10 minutes")
                    time.sleep(1)
            run.status = "RUNNING"
            self.moto.record_running(self.cluster, run.arn, "UNKNOWN")
            say(f"task {run.short} RUNNING ({', '.join(run.containers)})")
        except Exception as exc:
            reason = f"CannotStartContainerError: {exc}"
            if "secret" in str(exc).lower() and "ResourceInitializationError" in str(exc):
                reason = str(exc)
            say(f"task {run.short} could not start: {reason}")
            self.stop_task(run, reason, in_moto=True)

    def _resolve_secrets(self, run: TaskRun) -> dict[str, list[str]]:
        """Each container's `secrets`, fetched by valueFrom as the ECS agent does (with the task's execution
        role), and the task role's credentials, all as podman secrets."""
        result: dict[str, list[str]] = {}
        role = self._role_credentials(run)
        for container in run.containers.values():
            result[container.name] = list(role)
        if any(c.definition.get("secrets") for c in run.containers.values()) and run.execution_role is None:
            raise RuntimeError("ResourceInitializationError: unable to pull secrets: the task has no execution role")
        client = self.moto.client("secretsmanager", run.execution_role) if run.execution_role else None
        for container in run.containers.values():
            for i, secret in enumerate(container.definition.get("secrets", [])):
                try:
                    value = client.get_secret_value(SecretId=secret["valueFrom"])["SecretString"]
                except Exception as exc:
                    raise RuntimeError(
                        f"ResourceInitializationError: unable to pull secrets: {secret['valueFrom']}: {exc}"
                    ) from None
                name = f"{podman.secret_prefix(self.rid)}{run.id[:8]}-{container.name}-{i}"
                podman.create_secret(name, value)
                result.setdefault(container.name, []).append(f"{name},type=env,target={secret['name']}")
        return result

    def _role_credentials(self, run: TaskRun) -> list[str]:
        """The task role's session keys as podman secrets of the task, shared by its containers (sidecars
        included, as ECS gives every container of a task the task role); none without a task role."""
        if run.task_role is None:
            return []
        specs = []
        for name, value in self.moto.credentials_of(run.task_role).items():
            secret = f"{podman.secret_prefix(self.rid)}{run.id[:8]}-role-{name.lower()}"
            podman.create_secret(secret, value)
            specs.append(f"{secret},type=env,target={name}")
        return specs

    def _dependencies_met(self, run: TaskRun, container: ContainerRun) -> bool:
        for dep in container.definition.get("dependsOn", []) or []:
            other = run.containers.get(dep["containerName"])
            if other is None:
                continue
            condition = dep.get("condition", "START")
            if condition == "START" and other.state == "PENDING":
                return False
            if condition == "HEALTHY" and other.health != "HEALTHY":
                return False
            if condition == "COMPLETE" and other.state != "STOPPED":
                return False
            if condition == "SUCCESS" and not (other.state == "STOPPED" and other.exit_code == 0):
                return False
        return True

    def _run_container(self, run: TaskRun, container: ContainerRun, secrets: list[str]) -> None:
        d = container.definition
        args = [
            "run",
            "-d",
            "--pull=never",  # only images built or loaded here (tools/rehearsal/admission.py)
            "--name",
            container.podman_name,
            "--pod",
            run.pod,
            "--label",
            f"{podman.LABEL}={self.rid}",
            "--label",
            f"rayfleet.task={run.id}",
            "--label",
            f"rayfleet.container={d['name']}",
        ]
        if d.get("memory"):
            args += ["--memory", f"{d['memory']}m"]
        if d.get("memoryReservation"):
            args += ["--memory-reservation", f"{d['memoryReservation']}m"]
        if d.get("cpu"):
            args += ["--cpu-shares", str(max(2, int(d["cpu"])))]
        lp = d.get("linuxParameters") or {}
        if lp.get("sharedMemorySize"):  # podman 4.3 ignores --shm-size for a container in a pod: mount it
            args += ["--tmpfs", f"/dev/shm:rw,nosuid,nodev,noexec,size={lp['sharedMemorySize']}m"]
        if lp.get("initProcessEnabled"):
            args.append("--init")
        for cap in (lp.get("capabilities") or {}).get("add", []):
            args += ["--cap-add", cap]
        for cap in (lp.get("capabilities") or {}).get("drop", []):
            args += ["--cap-drop", cap]
        for dev in lp.get("devices", []):
            perms = "".join(p[0] for p in dev.get("permissions", ["read", "write", "mknod"]))
            args += ["--device", f"{dev['hostPath']}:{dev.get('containerPath', dev['hostPath'])}:{perms}"]
        for limit in d.get("ulimits", []):
            args += ["--ulimit", f"{limit['name']}={limit['softLimit']}:{limit['hardLimit']}"]
        check = d.get("healthCheck")
        if check:
            command = check["command"]
            args += ["--health-cmd", json.dumps(command[1:]) if command[0] == "CMD" else " ".join(command[1:])]
            args += [
                "--health-interval",
                f"{check.get('interval', 30)}s",
                "--health-timeout",
                f"{check.get('timeout', 5)}s",
                "--health-retries",
                str(check.get("retries", 3)),
                "--health-start-period",
                f"{check.get('startPeriod', 0)}s",
            ]
        for entry in d.get("environment", []):
            args += ["--env", f"{entry['name']}={entry['value']}"]
        for name, value in self.extra_env.items():
            args += ["--env", f"{name}={value}"]
        for secret in secrets:
            args += ["--secret", secret]
        if d.get("workingDirectory"):
            args += ["--workdir", d["workingDirectory"]]
        if d.get("user"):
            args += ["--user", d["user"]]
        if d.get("readonlyRootFilesystem"):
            args += ["--read-only", "--read-only-tmpfs=false"]  # what ECS gives: nothing writable but the mounts
        for option in d.get("dockerSecurityOptions") or []:
            args += ["--security-opt", option]
        if d.get("privileged"):
            args.append("--privileged")
        args += ["--stop-timeout", str(d.get("stopTimeout", 30))]
        for mount in d.get("mountPoints") or []:
            source = run.volumes.get(mount["sourceVolume"])
            if source is not None:
                args += ["--volume", f"{source}:{mount['containerPath']}{':ro' if mount.get('readOnly') else ''}"]
        ca_at = next((e["value"] for e in d.get("environment", []) if e["name"] == "RAY_REDIS_CA_CERT"), None)
        if self.stand_in and ca_at in self.stand_in.mounts:
            args += ["--volume", f"{self.stand_in.mounts[ca_at]}:{ca_at}:ro"]
        if d.get("entryPoint"):
            args += ["--entrypoint", json.dumps(d["entryPoint"])]
        args.append(d["image"])
        args += d.get("command") or []
        podman.podman(*args, timeout=300)
        container.state, container.started_at = "RUNNING", time.monotonic()
        if check:
            container.health = "UNKNOWN"
            container.next_health_check = time.monotonic() + min(check.get("interval", 30), 5)
        options = (d.get("logConfiguration") or {}).get("options", {})
        if (d.get("logConfiguration") or {}).get("logDriver") == "awslogs" and options.get("awslogs-group"):
            stream = f"{options.get('awslogs-stream-prefix', d['name'])}/{d['name']}/{run.id}"
            local = open(self.log_dir / f"{container.podman_name}.log", "a") if self.log_dir else None  # noqa: SIM115
            container.shipper = LogShipper(
                self.moto.client("logs"), container.podman_name, options["awslogs-group"], stream, local
            )
            container.shipper.start()

    # -- watching ----------------------------------------------------------------------------------------
    def _observe_containers(self) -> None:
        listed = podman.podman(
            "ps", "-a", "--filter", f"label={podman.LABEL}={self.rid}", "--format", "json", check=False
        )
        if listed.returncode != 0:
            # `podman ps` fails now and then when any container on the host is removed while it lists
            # (containers/podman#11810: "does not exist in database"; the images tests remove theirs beside the
            # rehearsal). Read as an empty listing, it made every running container look gone and the agent
            # stopped every task. Nothing is concluded from a failed look: the next one decides.
            return
        states = {}
        for entry in json.loads(listed.stdout or "[]"):
            for name in entry.get("Names", []):
                states[name] = entry
        for run in list(self.live()):
            if run.status == "PROVISIONING":
                continue
            for container in run.containers.values():
                entry = states.get(container.podman_name)
                if container.state != "RUNNING":
                    continue
                if entry is None or entry.get("State") in ("exited", "stopped", "dead"):
                    container.state = "STOPPED"
                    container.exit_code = entry.get("ExitCode") if entry else None
                    if run.status == "RUNNING":
                        say(f"task {run.short}: container {container.name} exited ({container.exit_code})")
                    if container.essential and run.status == "RUNNING":
                        self.stop_task(
                            run,
                            f"Essential container in task exited ({container.name}: exit {container.exit_code})",
                            in_moto=True,
                        )
            if run.status == "STOPPING" and all(c.state != "RUNNING" for c in run.containers.values()):
                self._stopped(run)

    def _observe_moto(self) -> None:
        """Tasks stopped through the API (StopTask, `make stop`): stop their containers."""
        arns = [t.arn for t in self.live() if t.status in ("RUNNING", "PROVISIONING")]
        for start in range(0, len(arns), 100):
            for task in self.ecs.describe_tasks(cluster=self.cluster, tasks=arns[start : start + 100])["tasks"]:
                if task.get("desiredStatus") == "STOPPED":
                    run = self.tasks[task["taskArn"]]
                    self.stop_task(run, task.get("stoppedReason") or "Task stopped by the API", in_moto=False)

    def _health_checks(self) -> None:
        now = time.monotonic()
        for run in self.live():
            if run.status not in ("RUNNING", "PROVISIONING"):  # a container may wait on another's HEALTHY
                continue
            for container in run.containers.values():
                check = container.definition.get("healthCheck")
                if not check or container.state != "RUNNING" or now < container.next_health_check:
                    continue
                container.next_health_check = now + check.get("interval", 30)
                podman.podman(
                    "healthcheck", "run", container.podman_name, check=False, timeout=check.get("timeout", 5) + 30
                )
                info = podman.state(container.podman_name) or {}
                status = ((info.get("Health") or info.get("Healthcheck") or {}).get("Status") or "").lower()
                health = {"healthy": "HEALTHY", "unhealthy": "UNHEALTHY"}.get(status, "UNKNOWN")
                if health != container.health:
                    say(f"task {run.short}: container {container.name} is {health}")
                container.health = health
                essentials = [c for c in run.containers.values() if c.essential and c.definition.get("healthCheck")]
                task_health = (
                    "UNHEALTHY"
                    if any(c.health == "UNHEALTHY" for c in essentials)
                    else "HEALTHY"
                    if essentials and all(c.health == "HEALTHY" for c in essentials)
                    else "UNKNOWN"
                )
                if run.status == "RUNNING":
                    self.moto.record_running(self.cluster, run.arn, task_health)
                if health == "UNHEALTHY" and container.essential:
                    self.stop_task(run, f"Task failed container health checks ({container.name})", in_moto=True)

    # -- stopping ----------------------------------------------------------------------------------------
    def stop_task(self, run: TaskRun, reason: str, in_moto: bool) -> None:
        if run.status in ("STOPPING", "STOPPED"):
            return
        run.status, run.reason = "STOPPING", reason
        say(f"stopping task {run.short}: {reason}")
        if in_moto:
            with contextlib.suppress(Exception):
                self.ecs.stop_task(cluster=self.cluster, task=run.arn, reason=reason[:255])
        running = [c for c in run.containers.values() if c.state == "RUNNING"]
        for container in running:
            threading.Thread(
                target=podman.podman,
                args=("stop", "-t", str(container.definition.get("stopTimeout", 30)), container.podman_name),
                kwargs={"check": False, "timeout": container.definition.get("stopTimeout", 30) + 60},
                daemon=True,
            ).start()
        if not running:
            self._stopped(run)

    def _stopped(self, run: TaskRun) -> None:
        run.status = "STOPPED"
        essential = next((c for c in run.containers.values() if c.essential), None)
        code = essential.exit_code if essential else None
        self.moto.record_exit(self.cluster, run.arn, code)
        for container in run.containers.values():
            if container.shipper is not None:
                container.shipper.join(timeout=10)  # the last lines reach CloudWatch Logs before the pod goes
        podman.podman("pod", "rm", "-f", run.pod, check=False)
        for source in run.volumes.values():
            if not source.startswith("/"):
                podman.podman("volume", "rm", "-f", source, check=False)
        say(f"task {run.short} STOPPED (exit {code}): {run.reason}")
        if run.service:
            lived = time.monotonic() - run.started_at
            failures = 0 if lived > 300 else self.failures.get(run.service, 0) + 1
            self.failures[run.service] = failures
            delay = BACKOFF_S[min(failures, len(BACKOFF_S)) - 1] if failures else 0
            self.next_start[run.service] = time.monotonic() + delay
