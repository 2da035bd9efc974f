"""The agent runs only the task definitions the rehearsal rendered, recognised by content (issue 27 item 3)."""

from __future__ import annotations

import copy

import pytest

from tools.rehearsal.admission import NotRendered, admit

HEAD = {
    "family": "demo-ray-head",
    "networkMode": "awsvpc",
    "taskRoleArn": "arn:aws:iam::123456789012:role/demo-head-task",
    "containerDefinitions": [{"name": "ray-head", "image": "localhost/rayfleet/ray-head:test", "command": ["head"]}],
}
TRAINER = {
    "family": "demo-trainer",
    "networkMode": "awsvpc",
    "containerDefinitions": [{"name": "trainer", "image": "localhost/rayfleet/trainer:test", "command": ["ddp"]}],
}
RENDERED = {"head": HEAD, "trainer": TRAINER}


def described(spec: dict, revision: int = 7) -> dict:
    """As moto describes it: the same content plus its bookkeeping."""
    return {**copy.deepcopy(spec), "revision": revision, "status": "ACTIVE", "taskDefinitionArn": f"arn:x:{revision}"}


def here(image: str) -> bool:
    return image.startswith("localhost/")


def test_a_rendered_definition_is_admitted_whatever_its_revision():
    assert admit(described(HEAD, 3), RENDERED, here) == "head"
    assert admit(described(TRAINER, 9), RENDERED, here) == "trainer"


def test_a_rayfleet_family_with_a_host_mount_is_refused():
    """Before: any definition of a known family (or any RunTask tagged startedBy=rayfleet) ran."""
    evil = described(TRAINER)
    evil["volumes"] = [{"name": "root", "host": {"sourcePath": "/"}}]
    evil["containerDefinitions"][0]["mountPoints"] = [{"sourceVolume": "root", "containerPath": "/host"}]
    with pytest.raises(NotRendered, match="demo-trainer differs from the rendered definition in"):
        admit(evil, RENDERED, here)


def test_privileges_are_content_too():
    evil = described(HEAD)
    evil["containerDefinitions"][0]["privileged"] = True
    with pytest.raises(NotRendered, match="containerDefinitions"):
        admit(evil, RENDERED, here)


def test_an_unknown_family_is_refused():
    with pytest.raises(NotRendered, match="family other is none of the rendered"):
        admit({**described(HEAD), "family": "other"}, RENDERED, here)


def test_the_trainer_may_run_another_image_this_host_has():
    """rayfleet run IMAGE=...: the one difference the launcher makes (rayfleet/ecs/launch.py trainer_with_image)."""
    own = described(TRAINER)
    own["containerDefinitions"][0]["image"] = "localhost/acme/recipe:1"
    assert admit(own, RENDERED, here) == "trainer"
    own["containerDefinitions"][0]["image"] = "docker.io/evil/miner:latest"
    with pytest.raises(NotRendered, match="not on this host"):
        admit(own, RENDERED, here)


def test_only_the_trainer_may_change_its_image():
    head = described(HEAD)
    head["containerDefinitions"][0]["image"] = "localhost/acme/recipe:1"
    with pytest.raises(NotRendered):
        admit(head, RENDERED, here)
