"""The promised commands on one default deployment (infra/'s own variables: worker groups ddp, 1 x A10G nodes,
and fsdp, 4 x A10G nodes with EFA, both at zero), against moto with IAM enforced under the rendered roles:
`make train-ddp` and `make train-fsdp` with no arguments each pick their group, say so and scale only it; both
run at once (two driver slots); a recipe no group holds is refused before anything is uploaded; autostop takes
each group back to zero, as the control task reads its groups from its own task definition.

What moto cannot show: instances launching (moto's container instances exist from the start, so the nodes
"joining" are a snapshot written here, in the control task's format, with as many workers as the services
want), the ranks training (tests/integration/test_iam_roles_on_moto.py reads the staged data as the task role;
the local cluster trains), a real Spot capacity failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import UTC, datetime

import pytest

from rayfleet.core.aws import STARTED_BY, Aws
from rayfleet.core.bucket import RAY_STATUS
from rayfleet.core.config import load_yaml
from rayfleet.ecs import capacity
from rayfleet.ecs.outputs import Outputs
from rayfleet.ecs.start import start
from rayfleet.node.control.autostop import Autostop, Settings
from rayfleet.train.data import synthetic
from tests.integration.helpers import REPO, control_environment, verbs_env
from tools.moto_stack import stack

pytestmark = pytest.mark.integration
IDLE = {"jobs": [], "serve": []}


class NodesJoin:
    """The head's snapshot while the capacity providers bring up what the worker services want: every 0.3 s, as
    many alive workers as the services' desired counts add up to."""

    def __init__(self, server, out: dict) -> None:
        self.ecs, self.s3, self.out = server.client("ecs"), server.client("s3"), out
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        services = [g["service_name"] for g in self.out["worker_groups"].values()]
        while not self.done.wait(0.3):
            found = self.ecs.describe_services(cluster=self.out["cluster_name"], services=services)["services"]
            workers = sum(s["desiredCount"] for s in found)
            nodes = [{"node_id": "h", "alive": True, "head": True, "resources": {"CPU": 8.0}}]
            nodes += [{"node_id": f"w{i}", "alive": True, "head": False, "resources": {}} for i in range(workers)]
            body = {"taken_at": datetime.now(UTC).isoformat(timespec="seconds"), "nodes": nodes, "jobs": []}
            self.s3.put_object(Bucket=self.out["results_bucket"], Key=RAY_STATUS, Body=json.dumps(body).encode())

    def __enter__(self) -> NodesJoin:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def run(env: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rayfleet.cli.main", *argv],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def desired(server, out: dict) -> dict[str, int]:
    names = {g["service_name"]: name for name, g in out["worker_groups"].items()}
    found = server.client("ecs").describe_services(cluster=out["cluster_name"], services=list(names))["services"]
    return {names[s["serviceName"]]: s["desiredCount"] for s in found}


def control_env(server, out: dict) -> dict[str, str]:
    return control_environment(server.client("ecs"), out["cluster_name"], out["control_service_name"])


def test_train_ddp_and_train_fsdp_on_one_default_deployment(ecs_moto, tmp_path, monkeypatch):
    """One deployment, both flagships, no arguments: each goes to its own group, both at once, and each group
    stops by itself. On the single-group code the FSDP recipe was refused on the default deployment."""
    (tmp_path / "aws").mkdir()
    out = stack.create(ecs_moto, tmp_path / "aws", stack.default_picture(var_files=()), trainer_slots=2)
    env = verbs_env(ecs_moto.url, out["outputs_file"], stack.REGION)
    synthetic.generate(tmp_path / "data", train=10, test=10)
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "tiny_shakespeare.txt").write_text("First Citizen:\nBefore we proceed any further.\n" * 20)
    assert desired(ecs_moto, out) == {"ddp": 0, "fsdp": 0}  # nothing runs, nothing is paid, until a run needs it

    with NodesJoin(ecs_moto, out):
        ddp = run(
            env,
            "run",
            "recipes/ddp.yaml",
            "--on",
            "ecs",
            "--detach",
            "--name",
            "ddp-1",
            "--set",
            f"data={tmp_path / 'data'}",
        )
        assert ddp.returncode == 0, ddp.stdout + ddp.stderr
        assert "[rayfleet] worker group ddp: 1 node(s) x g5.xlarge, $1.01/h (the cheapest of 2 that fit)" in ddp.stdout
        assert desired(ecs_moto, out) == {"ddp": 1, "fsdp": 0}  # the idle 4-GPU group stays at zero

        fsdp = run(
            env,
            "run",
            "recipes/fsdp.yaml",
            "--on",
            "ecs",
            "--detach",
            "--name",
            "fsdp-1",
            "--set",
            f"data={tmp_path / 'text'}",
        )
        assert fsdp.returncode == 0, fsdp.stdout + fsdp.stderr
        assert "[rayfleet] worker group fsdp: 2 node(s) x g5.12xlarge, $11.34/h (the only one that fits)" in fsdp.stdout
        assert desired(ecs_moto, out) == {"ddp": 1, "fsdp": 2}

    shown = run(env, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    groups = {g["group"]: g for g in json.loads(shown.stdout)["groups"]}
    assert {n: (g["desired"], g["max"], g["instance_types"]) for n, g in groups.items()} == {
        "ddp": (1, 2, ["g5.xlarge"]),
        "fsdp": (2, 2, ["g5.12xlarge"]),
    }
    ecs = ecs_moto.client("ecs")
    trainers = ecs.list_tasks(cluster=out["cluster_name"], startedBy=STARTED_BY, desiredStatus="RUNNING")["taskArns"]
    assert len(trainers) == 2  # both drivers at once: the head holds two (concurrent_runs = 2)
    s3 = ecs_moto.client("s3")
    for name, group in (("ddp-1", "ddp"), ("fsdp-1", "fsdp")):  # what the job's queue entry and placement follow
        packaged = load_yaml(s3.get_object(Bucket=out["results_bucket"], Key=f"runs/{name}/recipe.yaml")["Body"].read())
        assert packaged["resources"]["group"] == group

    wide = tmp_path / "wide.yaml"
    wide.write_text(
        json.dumps({"name": "wide", "entrypoint": "t.py", "resources": {"workers": 3, "gpus_per_worker": 4}})
    )
    (tmp_path / "t.py").write_text("print(1)\n")
    refused = run(env, "run", str(wide), "--on", "ecs", "--detach", "--name", "wide-1")
    assert refused.returncode == 2 and refused.stderr.strip().startswith("error: recipe wide fits no worker group")
    assert "ddp (2 node(s) x g5.xlarge)" in refused.stderr and "fsdp (2 node(s) x g5.12xlarge)" in refused.stderr
    listed = ecs_moto.client("s3").list_objects_v2(Bucket=out["results_bucket"], Prefix="runs/wide-1/")
    assert listed.get("KeyCount", 0) == 0  # refused before anything was packaged or uploaded

    for arn in trainers:  # the runs ended
        ecs.stop_task(cluster=out["cluster_name"], task=arn, reason="run over")
    settings = Settings.from_env(control_env(ecs_moto, out))  # the groups as the control task reads them
    assert {n: (g.service, g.min_nodes, g.idle_s) for n, g in settings.groups.items()} == {
        "ddp": ("rayfleet-ray-worker-ddp", 0, 1800.0),
        "fsdp": ("rayfleet-ray-worker-fsdp", 0, 1800.0),
    }
    # A start on one group waits for that group alone: another group's capacity that cannot come is not its own.
    quota = capacity.Reason("fsdp worker group: vCPU quota 0 (VcpuLimitExceeded)", True, group="fsdp")
    for key, value in env.items():  # this process calls start() itself, as the operator
        monkeypatch.setenv(key, value)
    outputs = Outputs.load(out["outputs_file"])
    ecs.update_service(
        cluster=out["cluster_name"], service=out["worker_groups"]["fsdp"]["service_name"], desiredCount=2
    )
    with NodesJoin(ecs_moto, out):  # moto runs no task: the services' running counts stay 0, so fsdp counts 0 here
        started = start(Aws(stack.REGION), outputs, say=lambda _: None, poll_s=0.2, starts={"ddp": 2},
                        why=lambda *a: [quota])  # fmt: skip
    assert started["groups"] == {"ddp": 2} and started["workers"] >= 2

    now = [datetime.now(UTC).timestamp()]
    control = Autostop(settings, ecs_moto.client_as("ecs", "control"), clock=lambda: now[0], say=lambda _: None)
    control.tick(IDLE)
    now[0] += 1800
    decided = control.tick(IDLE)["groups"]
    assert decided["ddp"]["stopped"] and decided["fsdp"]["stopped"]
    assert desired(ecs_moto, out) == {"ddp": 0, "fsdp": 0}


SPOT_GROUP = '{ spot = { instance_types = ["g5.xlarge"], spot = "spot-preferred" } }'  # HCL, as -var takes it


def test_a_spot_group_whose_capacity_does_not_come_falls_back_to_on_demand(ecs_moto, tmp_path, monkeypatch, capsys):
    """`rayfleet run` on a spot-preferred group whose Spot capacity does not come: after the recipe's minutes it
    switches the group's Auto Scaling group to on-demand (as the operator, IAM enforced), says so in one line, the
    nodes come, and the run's record keeps the step; `rayfleet deploy stop` puts Spot back. The reason itself is
    Auto Scaling's activity, which moto does not produce: it is given here, while the group is on Spot."""
    from rayfleet.cli.main import main
    from rayfleet.core.run_dir import RunDir
    from rayfleet.ecs import capacity

    (tmp_path / "aws").mkdir()
    picture = stack.default_picture(var_files=(), variables={"worker_groups": SPOT_GROUP})
    out = stack.create(ecs_moto, tmp_path / "aws", picture, trainer_slots=2)
    asg = out["worker_groups"]["spot"]["autoscaling_group"]
    ecs_moto.client("ec2").create_launch_template(
        LaunchTemplateName="spot", LaunchTemplateData={"InstanceType": "g5.xlarge", "ImageId": "ami-12c6146b"}
    )
    autoscaling = ecs_moto.client("autoscaling")
    autoscaling.create_auto_scaling_group(  # what Terraform made (moto's stack makes no Auto Scaling groups)
        AutoScalingGroupName=asg,
        MinSize=0,
        MaxSize=2,
        VPCZoneIdentifier=out["private_subnet_ids"][0],
        MixedInstancesPolicy={
            "LaunchTemplate": {"LaunchTemplateSpecification": {"LaunchTemplateName": "spot"}},
            "InstancesDistribution": {"OnDemandPercentageAboveBaseCapacity": 0},
        },
    )

    def on_demand() -> bool:
        (found,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[asg])["AutoScalingGroups"]
        return found["MixedInstancesPolicy"]["InstancesDistribution"]["OnDemandPercentageAboveBaseCapacity"] == 100

    no_spot = capacity.Reason("worker group: Spot capacity not available for g5.xlarge", False, group="spot")
    looks = []

    def reasons(*_):  # a fallback that never comes ends the wait at its third look, not at start's timeout
        looks.append(1)
        gave_up = capacity.Reason("no fallback was taken", True, group="spot")
        return [] if on_demand() else [no_spot] if len(looks) < 3 else [gave_up]

    monkeypatch.setattr(capacity, "_reasons", reasons)
    for key, value in verbs_env(ecs_moto.url, out["outputs_file"], stack.REGION).items():
        monkeypatch.setenv(key, value)
    (tmp_path / "t.py").write_text("print(1)\n")
    recipe = {"name": "spotty", "entrypoint": "t.py", "resources": {"workers": 1, "gpus_per_worker": 1}}
    (tmp_path / "spotty.yaml").write_text(json.dumps({**recipe, "capacity_fallback_after_min": 0}))

    class NodesOnDemand(NodesJoin):  # the nodes come once the group launches on-demand
        def run(self) -> None:
            while not self.done.wait(0.3):
                nodes = [{"node_id": "h", "alive": True, "head": True, "resources": {}}]
                nodes += [{"node_id": "w", "alive": True, "head": False, "resources": {}}] if on_demand() else []
                body = {"taken_at": datetime.now(UTC).isoformat(timespec="seconds"), "nodes": nodes, "jobs": []}
                self.s3.put_object(Bucket=out["results_bucket"], Key=RAY_STATUS, Body=json.dumps(body).encode())

    with NodesOnDemand(ecs_moto, out):
        code = main(["run", str(tmp_path / "spotty.yaml"), "--on", "ecs", "--detach", "--name", "spotty-1"])
    said = capsys.readouterr().out
    assert code == 0, said
    assert (
        "[rayfleet] capacity: worker group spot: worker group: Spot capacity not available for g5.xlarge for 0 min:"
        f" on-demand instead of Spot in the group ({asg})"
    ) in said
    assert on_demand() and said.index("on-demand instead of Spot") < said.index("Ray sees the head and 1/1 workers")
    record = RunDir(f"s3://{out['results_bucket']}/runs", "spotty-1", region=stack.REGION).record()
    (step,) = record["capacity_steps"]
    assert (step["step"], step["group"], step["waited_min"]) == ("on-demand", "spot", 0.0)
    assert step["by"].startswith("rayfleet run on the operator's machine")

    assert main(["deploy", "stop"]) == 0
    assert not on_demand() and "worker group spot: back to Spot above its on-demand base" in capsys.readouterr().out
