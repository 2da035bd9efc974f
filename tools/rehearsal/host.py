"""What the rehearsal changes in the task definitions to run them all on one machine, said in one line.

ECS gives each task its instance's share; here every task shares one host. So memory, shared memory and
Ray's object store (RAYFLEET_OBJECT_STORE_MIB) are scaled by one factor that makes all tasks that run at
once (head, trainer, every worker) fit in MEMORY_SHARE of the host's memory; a Ray container keeps at
least MIN_RAY_MEMORY_MIB (limits, not use: beside much bigger workers a small head overcommits a little).
Workers advertise the host's CPUs split between them; without GPUs the GPU resourceRequirements are
dropped, RAYFLEET_NUM_GPUS becomes 0 and the gpu-metrics sidecar runs with --idle-without-gpu; ulimits
are capped at what this host lets a container have; host networking (the EFA shape) becomes the
rehearsal's bridge network and devices this host lacks are dropped. Everything else is the task
definition's, untouched.
"""

from __future__ import annotations

import copy
import os
import resource
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

MEMORY_SHARE = 0.8
MIN_MEMORY_MIB = 128
MIN_RAY_MEMORY_MIB = 3072  # a Ray container (one with shared memory) is never scaled below this: limits, not use
SIZE_ENV = ("RAYFLEET_OBJECT_STORE_MIB",)
ULIMITS = {"nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC, "memlock": resource.RLIMIT_MEMLOCK}


def engine_ulimits() -> dict[str, tuple[int, int]]:
    """The container engine's default_ulimits (CONTAINERS_CONF, images/containers.conf by default): what a
    container gets here. Hosts that cap open files or processes refuse more (runc: operation not permitted),
    and an explicit --ulimit drops these defaults, so the rehearsal passes them and caps at them."""
    from tools.rehearsal.podman import env

    path = Path(env()["CONTAINERS_CONF"])
    try:
        conf = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    limits = {}
    for item in conf.get("containers", {}).get("default_ulimits", []):
        name, _, values = item.partition("=")
        soft, _, hard = values.partition(":")
        limits[name] = (int(soft), int(hard or soft))
    return limits


@dataclass(frozen=True)
class Host:
    cpus: int
    memory_mib: int
    gpus: int

    @classmethod
    def here(cls) -> Host:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        gpus = sum(1 for _ in Path("/dev").glob("nvidia[0-9]*"))
        return cls(os.cpu_count() or 1, memory, gpus)


def _env(definition: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in definition.get("environment", [])}


def _set_env(definition: dict, name: str, value: str) -> None:
    for entry in definition.setdefault("environment", []):
        if entry["name"] == name:
            entry["value"] = value
            return
    definition["environment"].append({"name": name, "value": value})


def is_gpu_metrics(definition: dict) -> bool:
    return definition["name"] == "gpu-metrics" or "/gpu-metrics:" in definition.get("image", "")


@dataclass
class Adaptation:
    host: Host
    factor: float
    worker_cpus: int | None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def plan(cls, picture: dict, host: Host) -> Adaptation:
        counts = {"head": 0, "worker": 0, "trainer": 1}  # one trainer at a time beside the services
        for service in picture["services"]:
            counts[service["taskDefinition"]] = counts.get(service["taskDefinition"], 0) + service["desiredCount"]
        total = sum(
            counts.get(key, 0)
            * sum(c.get("memory") or c.get("memoryReservation") or 0 for c in spec["containerDefinitions"])
            for key, spec in picture["taskDefinitions"].items()
        )
        budget = host.memory_mib * MEMORY_SHARE
        factor = min(1.0, budget / total) if total else 1.0
        workers = max(1, sum(n for key, n in counts.items() if key.startswith("worker")))  # every group's
        return cls(host, factor, max(1, host.cpus // workers))

    def container(self, key: str, definition: dict) -> dict:
        """The container definition as the rehearsal runs it on this host."""
        d = copy.deepcopy(definition)
        if self.factor < 1:
            lp = d.get("linuxParameters") or {}
            floor = MIN_RAY_MEMORY_MIB if lp.get("sharedMemorySize") else MIN_MEMORY_MIB  # a Ray node needs some
            for field_name in ("memory", "memoryReservation"):
                if d.get(field_name):
                    d[field_name] = max(min(floor, d[field_name]), int(d[field_name] * self.factor))
            if lp.get("sharedMemorySize"):
                lp["sharedMemorySize"] = max(256, int(lp["sharedMemorySize"] * self.factor))
            env = _env(d)
            for name in SIZE_ENV:
                if env.get(name):
                    _set_env(d, name, str(max(78, int(int(env[name]) * self.factor))))
        env = _env(d)
        if key.startswith("worker") and env.get("RAYFLEET_NUM_CPUS") and self.worker_cpus is not None:
            _set_env(d, "RAYFLEET_NUM_CPUS", str(min(int(env["RAYFLEET_NUM_CPUS"]), self.worker_cpus)))
        if self.host.gpus == 0:
            d["resourceRequirements"] = [r for r in d.get("resourceRequirements", []) if r["type"] != "GPU"] or None
            if d["resourceRequirements"] is None:
                d.pop("resourceRequirements")
            if env.get("RAYFLEET_NUM_GPUS"):
                _set_env(d, "RAYFLEET_NUM_GPUS", "0")
            if is_gpu_metrics(d) and not d.get("command"):
                d["command"] = ["--idle-without-gpu"]
        engine = engine_ulimits()
        for limit in d.get("ulimits", []):
            hard = resource.getrlimit(ULIMITS[limit["name"]])[1] if limit["name"] in ULIMITS else resource.RLIM_INFINITY
            if limit["name"] in engine:
                hard = (
                    engine[limit["name"]][1] if hard == resource.RLIM_INFINITY else min(hard, engine[limit["name"]][1])
                )
            if hard != resource.RLIM_INFINITY:
                limit["hardLimit"] = min(limit["hardLimit"], hard)
                limit["softLimit"] = min(limit["softLimit"], limit["hardLimit"])
        if d.get("ulimits"):  # an explicit --ulimit drops the engine's defaults: keep the others
            named = {limit["name"] for limit in d["ulimits"]}
            for name, (soft, hard) in engine.items():
                if name not in named:
                    d["ulimits"].append({"name": name, "softLimit": soft, "hardLimit": hard, "rehearsal": True})
        lp = d.get("linuxParameters") or {}
        if lp.get("devices"):
            lp["devices"] = [dev for dev in lp["devices"] if Path(dev["hostPath"]).exists()]
        return d

    def line(self, picture: dict) -> str:
        """Everything changed, in one line."""
        parts = []
        sizes, cpus, gpus, ulimits, devices, sidecar = [], None, None, set(), set(), False
        for key, spec in picture["taskDefinitions"].items():
            for original in spec["containerDefinitions"]:
                adapted = self.container(key, original)
                if original.get("memory") and adapted.get("memory") != original["memory"]:
                    sizes.append(f"{original['name']} {original['memory']}→{adapted['memory']}")
                before, after = _env(original), _env(adapted)
                if before.get("RAYFLEET_NUM_CPUS") != after.get("RAYFLEET_NUM_CPUS"):
                    cpus = f"workers' RAYFLEET_NUM_CPUS {before['RAYFLEET_NUM_CPUS']}→{after['RAYFLEET_NUM_CPUS']}"
                if original.get("resourceRequirements") != adapted.get("resourceRequirements") or before.get(
                    "RAYFLEET_NUM_GPUS"
                ) != after.get("RAYFLEET_NUM_GPUS"):
                    gpus = (
                        "GPU resourceRequirements dropped and RAYFLEET_NUM_GPUS "
                        f"{before.get('RAYFLEET_NUM_GPUS', '?')}→{after.get('RAYFLEET_NUM_GPUS', '?')}"
                    )
                if is_gpu_metrics(original) and adapted.get("command") != original.get("command"):
                    sidecar = True
                for a, b in zip(original.get("ulimits", []), adapted.get("ulimits", []), strict=False):
                    if a != b:
                        ulimits.add(f"{a['name']} {a['hardLimit']}→{b['hardLimit']}")
                lp_a, lp_b = original.get("linuxParameters") or {}, adapted.get("linuxParameters") or {}
                for dev in lp_a.get("devices", []):
                    if dev not in lp_b.get("devices", []):
                        devices.add(dev["hostPath"])
            if spec.get("networkMode") == "host":
                parts.append(f"{key}'s host networking → the rehearsal's bridge network")
        gpu_words = "no GPU" if self.host.gpus == 0 else f"{self.host.gpus} GPU(s)"
        head = f"adapted to this host ({self.host.cpus} CPUs, {self.host.memory_mib / 1024:.1f} GiB, {gpu_words}): "
        if sizes:
            parts.insert(0, f"memory, shared memory and object store x{self.factor:.2f} (MiB: {', '.join(sizes)})")
        if cpus:
            parts.append(cpus)
        if gpus:
            parts.append(gpus)
        if sidecar:
            parts.append("gpu-metrics runs --idle-without-gpu")
        if ulimits:
            parts.append(f"ulimit {', '.join(sorted(ulimits))} (this host's container limit, containers.conf)")
        if devices:
            parts.append(f"devices absent here dropped ({', '.join(sorted(devices))})")
        return head + ("; ".join(parts) if parts else "nothing")
