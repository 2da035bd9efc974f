"""`rayfleet launch`: the trainer's job command, and what a placement failure means."""

from __future__ import annotations

from rayfleet.ecs.launch import build_command, explain


def test_job_command_and_placement_explanations():
    assert build_command("fsdp", ["epochs=1"], "bkt", "r1") == [
        "fsdp",
        "storage=s3://bkt/runs",
        "run_name=r1",
        "epochs=1",
    ]
    assert "free GPU" in explain([{"reason": "RESOURCE:GPU"}])
    assert "custom detail" in explain([{"reason": "OTHER", "detail": "custom detail"}])
