"""moto_server, with the few ECS behaviours a deployment of Terraform's task definitions depends on.

    python -m tools.moto_stack.ecs -H 127.0.0.1 -p PORT    (the tests' EcsMotoServer, a moto_server process)
    ecs.patch()                                               (the rehearsal's moto, in its own process)

moto 5.2.5's ECS places tasks by CPU and memory against container instances, but:

  * RegisterContainerInstance ignores `totalResources` and `attributes`: every instance registers as
    4096 CPU units and 7482 MiB, whatever its type, without GPUs. The head task Terraform renders takes
    8847 MiB (infra/modules/ray/sizing.tf, 60% of an m5.xlarge), so moto_server alone places no head
    at all. Here the instance registers what its ECS agent reports, as in ECS: CPU, MEMORY and the GPU
    ids, and its attributes (ECS_INSTANCE_ATTRIBUTES: rayfleet.node-group).
  * RunTask ignores placement constraints and GPUs, and answers `failures: []` when it places fewer tasks
    than asked. Here the task definition's and the request's constraints hold (memberOf with
    `attribute:<name> ==|!= <value>` expressions, distinctInstance within the task group), a task takes
    as many of the instance's GPU ids as its containers' resourceRequirements ask for, and each instance
    that could not take a task is a failure with ECS's reason (RESOURCE:MEMORY, RESOURCE:CPU,
    RESOURCE:GPU, MemberOf placement constraint unsatisfied., DistinctInstance placement constraint
    unsatisfied.).
  * StopTask of a task already stopped gives its resources back a second time; here only once.
  * (S3) DeleteObjects is authorized against the bucket, not each key: tools/moto_stack/s3.py, applied too.

Everything else is moto's own. Still not modelled: the service scheduler (CreateService starts no task;
the stack and the tests start service tasks as it would), capacity providers scaling Auto Scaling
groups (instances are registered by the stack), memberOf expressions beyond one attribute comparison,
placement strategies (moto fills instances in registration order).
"""

from __future__ import annotations

import json
import re
import sys
import threading

_context = threading.local()
_EXPRESSION = re.compile(r"^\s*attribute:(?P<name>[\w.\-]+)\s*(?P<op>==|!=)\s*(?P<value>[\w.\-]+)\s*$")


# -- the patches (applied once, in the process that serves moto) -------------------------------------------------
def _gpu_ids(resources: list[dict]) -> list[str] | None:
    for r in resources:
        if r.get("name") == "GPU":
            return r.setdefault("stringSetValue", [])
    return None


def _set_resources(instance, total: list[dict]) -> None:
    for listing in (instance.registered_resources, instance.remaining_resources):
        for given in total:
            name = given.get("name")
            if name in ("CPU", "MEMORY"):
                for r in listing:
                    if r.get("name") == name:
                        r["integerValue"] = int(given.get("integerValue", 0))
            elif name == "GPU":
                listing[:] = [r for r in listing if r.get("name") != "GPU"]
                listing.append(
                    {
                        "name": "GPU",
                        "type": "STRINGSET",
                        "doubleValue": 0.0,
                        "integerValue": 0,
                        "longValue": 0,
                        "stringSetValue": list(given.get("stringSetValue", [])),
                    }
                )


def _matches(instance, constraint: dict) -> bool:
    kind = constraint.get("type")
    if kind == "memberOf":
        match = _EXPRESSION.match(constraint.get("expression") or "")
        if match is None:
            raise ValueError(f"moto stack: unsupported memberOf expression {constraint.get('expression')!r}")
        equal = instance.attributes.get(match["name"]) == match["value"]
        return equal if match["op"] == "==" else not equal
    return True


def _distinct(backend, cluster_name: str, instance, group: str) -> bool:
    return not any(
        t.container_instance_arn == instance.container_instance_arn
        and t.group == group
        and t.last_status != "STOPPED"
        and t.desired_status != "STOPPED"
        for t in backend.tasks.get(cluster_name, {}).values()
    )


def _reason(backend, cluster_name: str, instance, requirements: dict, placement: dict) -> str | None:
    """Why `instance` cannot take one more task (None: it can)."""
    for constraint in placement["constraints"]:
        if constraint.get("type") == "memberOf" and not _matches(instance, constraint):
            return "MemberOf placement constraint unsatisfied."
        if constraint.get("type") == "distinctInstance" and not _distinct(
            backend, cluster_name, instance, placement["group"]
        ):
            return "DistinctInstance placement constraint unsatisfied."
    remaining = {r["name"]: r for r in instance.remaining_resources}
    if requirements.get("MEMORY", 0) > remaining["MEMORY"]["integerValue"]:
        return "RESOURCE:MEMORY"
    if requirements.get("CPU", 0) > remaining["CPU"]["integerValue"]:
        return "RESOURCE:CPU"
    gpus = _gpu_ids(instance.remaining_resources)
    if requirements.get("GPU", 0) > len(gpus or []):
        return "RESOURCE:GPU"
    return None


_patched = False


def patch() -> None:
    """Apply the patches to moto's ECS in this process (once; a second call changes nothing)."""
    global _patched
    if _patched:
        return
    _patched = True
    from tools.moto_stack import s3

    s3.patch()  # DeleteObjects authorized per key, as AWS does (the stack enforces IAM)
    from moto.core.responses import ActionResult
    from moto.ecs import models, responses

    backend_cls = models.EC2ContainerServiceBackend
    response_cls = responses.EC2ContainerServiceResponse

    def register_container_instance(self):
        cluster_str = self._get_param("cluster", "default")
        document = json.loads(self._get_param("instanceIdentityDocument"))
        instance = self.ecs_backend.register_container_instance(cluster_str, document["instanceId"])
        _set_resources(instance, self._get_param("totalResources") or [])
        for attribute in self._get_param("attributes") or []:
            instance.attributes[attribute["name"]] = attribute.get("value")
        return ActionResult({"containerInstance": instance})

    calculate = backend_cls._calculate_task_resource_requirements

    def calculate_with_gpus(task_definition):
        requirements = calculate(task_definition)
        requirements["GPU"] = sum(
            int(r.get("value", 0))
            for c in task_definition.container_definitions
            for r in c.get("resourceRequirements") or []
            if r.get("type") == "GPU"
        )
        return requirements

    can_be_placed = backend_cls._can_be_placed

    def can_be_placed_here(instance, requirements):
        placement = getattr(_context, "placement", None)
        if placement is None:
            return can_be_placed(instance, requirements)
        return _reason(placement["backend"], placement["cluster"], instance, requirements, placement) is None

    update = backend_cls.update_container_instance_resources

    def update_with_gpus(self, instance, requirements, removing=False):
        update(self, instance, requirements, removing)
        wanted, ids = requirements.get("GPU", 0), _gpu_ids(instance.remaining_resources)
        if not wanted or ids is None:
            return
        if removing:
            registered = _gpu_ids(instance.registered_resources) or []
            ids.extend([g for g in registered if g not in ids][:wanted])
        else:
            del ids[:wanted]

    run_task = backend_cls.run_task

    def run_task_placed(self, cluster_str, task_definition_str, count, *args, **kwargs):
        cluster = self._get_cluster(cluster_str)
        definition = self.describe_task_definition(task_definition_str)
        group = kwargs.get("group") or (args[5] if len(args) > 5 else None) or f"family:{definition.family}"
        placement = {
            "backend": self,
            "cluster": cluster.name,
            "group": group,
            "constraints": [*(definition.placement_constraints or []), *getattr(_context, "constraints", [])],
        }
        _context.placement = placement
        try:
            tasks = run_task(self, cluster_str, task_definition_str, count, *args, **kwargs)
        finally:
            _context.placement = None
        failures = []
        if len(tasks) < count:
            requirements = self._calculate_task_resource_requirements(definition)
            for instance in self.container_instances.get(cluster.name, {}).values():
                reason = _reason(self, cluster.name, instance, requirements, placement)
                if reason:
                    failures.append({"arn": instance.container_instance_arn, "reason": reason})
        _context.failures = failures
        return tasks

    original_response_run_task = response_cls.run_task

    def response_run_task(self):
        _context.constraints = self._get_param("placementConstraints") or []
        _context.failures = []
        try:
            result = original_response_run_task(self)
        finally:
            _context.constraints = []
        return ActionResult({"tasks": result.result["tasks"], "failures": _context.failures})

    stop_task = backend_cls.stop_task

    def stop_task_once(self, cluster_str, task_str, reason):
        cluster = self._get_cluster(cluster_str)
        task_id = task_str.split("/")[-1]
        for arn, task in self.tasks.get(cluster.name, {}).items():
            if arn.endswith(task_id) and task.last_status == "STOPPED":
                return task
        return stop_task(self, cluster_str, task_str, reason)

    response_cls.register_container_instance = register_container_instance
    response_cls.run_task = response_run_task
    backend_cls._calculate_task_resource_requirements = staticmethod(calculate_with_gpus)
    backend_cls._can_be_placed = staticmethod(can_be_placed_here)
    backend_cls.update_container_instance_resources = update_with_gpus
    backend_cls.run_task = run_task_placed
    backend_cls.stop_task = stop_task_once


def main(argv: list[str] | None = None) -> None:
    from moto.server import main as moto_server

    patch()
    moto_server(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
