"""Issue 54 R2 in the control task's queue follower (rayfleet/node/control/queue_scaling.py): an entry no live run
wrote does not keep the GPU workers at their maximum, and the priority ceiling is the operator's setting."""

from __future__ import annotations

import json
import time

from rayfleet.core.run_queue import Entry, Queue
from rayfleet.core.worker_groups import ECS_GROUPS_VAR, ecs_groups_from
from rayfleet.node.control.queue_scaling import QueueScaling

NODE = {"vcpus": 4, "gpus": 1, "memory_mib": 16384, "min": 0, "max": 8, "idle_minutes": 30}
GROUPS = ecs_groups_from({ECS_GROUPS_VAR: json.dumps({"default": {"service": "workers", **NODE}})})


class Ecs:
    """The worker service as ECS keeps it: its desired count, and each update asked for."""

    def __init__(self, desired: int = 0):
        self.desired, self.updates, self.by_service = desired, [], {}  # desired: every service's at first

    def describe_services(self, cluster: str, services: list[str]) -> dict:
        return {
            "services": [{"serviceName": services[0], "desiredCount": self.by_service.get(services[0], self.desired)}]
        }

    def update_service(self, cluster: str, service: str, desiredCount: int) -> None:
        self.updates.append(desiredCount)
        self.by_service[service] = desiredCount


def job(run: str, status: str = "RUNNING") -> dict:
    return {
        "submission_id": f"rayfleet-{run}",
        "status": status,
        "metadata": {"rayfleet_run": run},
        "type": "SUBMISSION",
    }


def entry(run: str, workers: int, **more) -> Entry:
    now = time.time()
    fields = {"priority": 0, "submitted_at": now - 10, "heartbeat_at": now, "submission_id": f"rayfleet-{run}"}
    return Entry(run=run, workers=workers, cpus_per_worker=4.0, gpus_per_worker=1, **{**fields, **more})


def follower(tmp_path, ecs: Ecs, env: dict | None = None, groups=None) -> tuple[QueueScaling, list[str]]:
    said: list[str] = []
    queue = Queue(str(tmp_path))
    return QueueScaling(queue, groups or GROUPS, ecs, "c", say=said.append, env=env or {}), said


def test_an_entry_of_a_run_with_no_live_ray_job_raises_nothing(tmp_path):
    """Found in the issue: one refreshed entry (any job may write queue/) held the workers at the group's
    maximum for as long as it was refreshed, while autostop believed it had stopped them."""
    ecs = Ecs()
    capacity, said = follower(tmp_path, ecs)
    capacity.queue.put(entry("forged", 512, priority=9))
    ended = job("forged", "FAILED")
    assert capacity.tick({"jobs": [ended, job("someone-else")]})["default"] == {"wanted": None, "ignored": 1}
    assert ecs.updates == [] and said == [
        f"[rayfleet] queue: {tmp_path}/queue/forged.json ignored: its run has no live Ray job or trainer task"
    ]
    capacity.queue.put(entry("real", 1))
    assert capacity.tick({"jobs": [ended, job("real")]})["default"]["raised_from"] == 0 and ecs.updates == [1]


def test_a_forged_entry_of_the_wrong_type_never_stops_the_round(tmp_path):
    ecs = Ecs()
    capacity, said = follower(tmp_path, ecs)
    (tmp_path / "queue").mkdir()
    (tmp_path / "queue" / "bad.json").write_text(json.dumps({"run": "bad", "priority": [], "workers": "all"}))
    capacity.queue.put(entry("real", 2))
    assert capacity.tick({"jobs": [job("real")]})["default"]["wanted"] == 2 and ecs.updates == [2]
    assert len(said) == 2 and "bad.json ignored: not a queue entry: missing 'submitted_at'" in said[0]


def test_the_priority_ceiling_is_the_control_tasks_setting(tmp_path):
    ecs = Ecs()
    capacity, _ = follower(tmp_path, ecs, env={"RAYFLEET_MAX_PRIORITY": "3"})
    capacity.queue.put(entry("early", 1, priority=3))
    capacity.queue.put(entry("pushy", 8, priority=9, submitted_at=time.time()))
    decided = capacity.tick({"jobs": [job("early"), job("pushy")]})["default"]
    assert decided["why"].startswith("early waits for 1 node(s)") and ecs.updates == [1]  # pushy is clamped to 3


def test_without_a_snapshot_every_fresh_valid_entry_counts(tmp_path):
    """What the follower does when the caller cannot give it Ray's jobs: as before, liveness aside."""
    ecs = Ecs()
    capacity, _ = follower(tmp_path, ecs)
    capacity.queue.put(entry("waits", 3))
    assert capacity.tick()["default"]["wanted"] == 3


def test_each_group_is_raised_for_its_own_runs_only(tmp_path):
    """Per group: a run on ddp raises ddp's service, with ddp's node shape, and never fsdp's; its group's line
    counts its live runs (autostop's measure of which groups are in use)."""
    small, large = {**NODE, "service": "w-ddp"}, {**NODE, "service": "w-fsdp", "gpus": 4, "vcpus": 48}
    groups = ecs_groups_from({ECS_GROUPS_VAR: json.dumps({"ddp": small, "fsdp": large})})
    ecs = Ecs()
    capacity, said = follower(tmp_path, ecs, groups=groups)
    capacity.queue.put(entry("small", 2, group="ddp"))
    decided = capacity.tick({"jobs": [job("small")]})
    assert decided["ddp"] == {
        "wanted": 2,
        "desired": 2,
        "why": "small waits for 2 node(s)",
        "raised_from": 0,
        "runs": 1,
    }
    assert decided["fsdp"] == {"wanted": None} and ecs.by_service == {"w-ddp": 2}
    capacity.queue.put(entry("big", 8, group="fsdp"))  # 8 workers x 1 GPU
    decided = capacity.tick({"jobs": [job("small"), job("big")]})
    assert decided["fsdp"]["wanted"] == 2 and ecs.by_service == {"w-ddp": 2, "w-fsdp": 2}  # 8 GPUs: 2 x 4-GPU nodes
    assert said[-1] == "queue: big waits for 2 node(s): w-fsdp 0 -> 2"
