"""The capacity fallback's steps (rayfleet/ecs/fallback.py) with a fake clock and recording AWS clients; on moto,
through `rayfleet run`: tests/integration/test_capacity_on_moto.py."""

from __future__ import annotations

from rayfleet.ecs.capacity import Reason
from rayfleet.ecs.fallback import Fallback
from rayfleet.ecs.outputs import Outputs

GROUPS = {
    "spot": {"service_name": "w-spot", "autoscaling_group": "asg-spot", "instance_types": ["g5.xlarge", "g6.xlarge"],
             "max_nodes": 2, "spot": "spot-preferred", "gpus": 1},
    "only": {"service_name": "w-only", "autoscaling_group": "asg-only", "instance_types": ["g5.xlarge"],
             "max_nodes": 2, "spot": "spot-only", "gpus": 1},
    "big": {"service_name": "w-big", "autoscaling_group": "asg-big", "instance_types": ["g5.12xlarge"],
            "max_nodes": 2, "gpus": 4},
}  # fmt: skip
NAMES = {"region": "us-east-1", "cluster_name": "c", "private_subnet_ids": [], "task_security_group_id": "sg"}
NAMES |= {"trainer_task_definition": "t", "head_service_name": "h", "results_bucket": "b", "trainer_log_group": "l"}
OUT = Outputs.from_flat(**NAMES, worker_groups=GROUPS)
NO_SPOT = Reason("spot worker group: Spot capacity not available for g5.xlarge", False, group="spot")


class Aws:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.desired = {"w-spot": 2}  # what each service wants now (the run raised spot from 0 to 2)

    def client(self, name: str):
        return self

    def describe_auto_scaling_groups(self, AutoScalingGroupNames):
        spec = {"LaunchTemplateId": "lt-1", "LaunchTemplateName": "rf-spot", "Version": "3"}  # as Describe names it
        policy = {"LaunchTemplate": {"LaunchTemplateSpecification": spec}, "InstancesDistribution": {}}
        return {
            "AutoScalingGroups": [{"AutoScalingGroupName": AutoScalingGroupNames[0], "MixedInstancesPolicy": policy}]
        }

    def update_auto_scaling_group(self, **kwargs):
        self.calls.append(("asg", kwargs["AutoScalingGroupName"], kwargs["MixedInstancesPolicy"]))

    def describe_services(self, cluster, services):
        return {"services": [{"serviceName": s, "desiredCount": self.desired.get(s, 0)} for s in services]}

    def update_service(self, cluster, service, desiredCount):
        self.calls.append(("service", service, desiredCount))


def fallback(allowed, alternatives=(), said=None):
    now = [1000.0]
    said = [] if said is None else said
    found = Fallback(Aws(), OUT, allowed, alternatives, after_s=300, say=said.append, clock=lambda: now[0])
    return found, now


def test_each_step_after_the_reason_lasted_and_in_the_recipes_order():
    said: list[str] = []
    found, now = fallback(("types", "on-demand", "group"), (("big", 1),), said)
    asked, before = {"spot": 2}, {"spot": 0}
    assert found.consider([NO_SPOT], asked, before) is None and found.steps == []  # the reason just began
    now[0] += 299
    assert found.consider([NO_SPOT], asked, before) is None and found.steps == []
    now[0] += 1
    assert found.consider([NO_SPOT], asked, before) is None
    assert [s["step"] for s in found.steps] == ["types"] and found.aws.calls == []  # the group tries them itself
    assert said[-1] == (
        "[rayfleet] capacity: worker group spot: spot worker group: Spot capacity not available for g5.xlarge for 5"
        " min: its Auto Scaling group tries its other types itself (g6.xlarge)"
    )
    now[0] += 300
    assert found.consider([NO_SPOT], asked, before) is None
    (call,) = found.aws.calls
    on_demand = {"OnDemandPercentageAboveBaseCapacity": 100}
    template = {"LaunchTemplateSpecification": {"LaunchTemplateId": "lt-1", "Version": "3"}}  # an update takes one
    assert call == ("asg", "asg-spot", {"LaunchTemplate": template, "InstancesDistribution": on_demand})
    now[0] += 300
    assert found.consider([NO_SPOT], asked, before) == {"big": 1}  # the run moves: the group's service back
    assert found.aws.calls[-1] == ("service", "w-spot", 0)
    assert found.steps[-1] | {"by": ""} == {"step": "group", "group": "spot", "waited_min": 5.0, "to": "big",
                                            "reason": NO_SPOT.text, "by": ""}  # fmt: skip
    now[0] += 300
    assert found.consider([NO_SPOT], asked, before) is None and len(found.steps) == 3  # nothing left to try


def test_the_move_lowers_the_group_by_what_the_run_raised_it_no_more():
    said: list[str] = []
    found, now = fallback(("group",), (("big", 1),), said)
    found.aws.desired = {"w-spot": 3}  # the run raised spot 1 -> 2; the queue raised it to 3 meanwhile
    found.consider([NO_SPOT], {"spot": 2}, {"spot": 1})
    now[0] += 300
    assert found.consider([NO_SPOT], {"spot": 2}, {"spot": 1}) == {"big": 1}
    assert found.aws.calls == [("service", "w-spot", 2)] and said[-1].endswith("; spot back to 2")
    found, now = fallback(("group",), (("big", 1),))
    found.aws.desired = {"w-spot": 1}  # autostop or `deploy stop` took it lower already: left alone
    found.consider([NO_SPOT], {"spot": 2}, {"spot": 1})
    now[0] += 300
    assert found.consider([NO_SPOT], {"spot": 2}, {"spot": 1}) == {"big": 1} and found.aws.calls == []


def test_steps_that_do_not_apply_are_passed_over_and_a_reason_gone_restarts_the_wait():
    found, now = fallback(("types", "on-demand"))
    only = Reason("worker group: InsufficientInstanceCapacity for g5.xlarge", False, group="only")
    now[0] += 1000
    found.consider([only], {"only": 1}, {"only": 0})
    now[0] += 300
    assert found.consider([only], {"only": 1}, {"only": 0}) is None
    assert found.steps == [] and found.aws.calls == []  # one type, Spot only: no step of the two applies
    found, now = fallback(("on-demand",))
    found.consider([NO_SPOT], {"spot": 1}, {"spot": 0})
    now[0] += 200
    found.consider([], {"spot": 1}, {"spot": 0})  # its capacity came for a while
    now[0] += 200
    assert found.consider([NO_SPOT], {"spot": 1}, {"spot": 0}) is None and found.steps == []  # a new spell
    fatal = Reason("spot worker group: vCPU quota 0", True, group="spot")
    now[0] += 1000
    assert found.consider([fatal], {"spot": 1}, {"spot": 0}) is None and found.steps == []  # start() fails on it
