"""The Ray images' entry point: ray start flags from the task's environment, resources capped by the
container's limits, the bounded wait for the head, and jobs by name."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from scripts import ray_node

PORTS = json.loads((Path(__file__).resolve().parents[2] / "infra" / "catalog" / "ray_ports.json").read_text())
MIB = 1024 * 1024


def test_every_port_the_security_group_opens_is_pinned_on_ray_start():
    env = {"RAYFLEET_RAY_PORTS": json.dumps(PORTS), "RAYFLEET_OBJECT_STORE_MIB": "100"}
    command = ray_node.head_command(env)
    joined = " ".join(command)
    for name, span in PORTS.items():
        if name == "collectives":
            continue  # NCCL and torch's TCPStore pick ephemeral ports; the group opens that range
        assert str(span["from"]) in joined, name
    assert "--head" in command and "--num-cpus=0" in command and "--num-gpus=0" in command
    assert "--dashboard-host=0.0.0.0" in command and "--block" in command


def test_resources_are_capped_by_cgroup_limits_and_shm(tmp_path):
    (tmp_path / "cpu.max").write_text("200000 100000\n")  # 2 CPUs
    (tmp_path / "memory.max").write_text(str(8 * 1024 * MIB))
    env = {"RAYFLEET_NUM_CPUS": "48", "RAYFLEET_NUM_GPUS": "4", "RAYFLEET_OBJECT_STORE_MIB": str(10**7)}
    res = ray_node.resources(env, cgroup=tmp_path)
    assert res["num_cpus"] == 2 and res["num_gpus"] == 4
    assert res["object_store_memory"] <= ray_node.shm_bytes() - 64 * MIB  # never more than /dev/shm holds
    assert res["memory"] <= 8 * 1024 * MIB - res["object_store_memory"]


def test_unlimited_cgroups_leave_the_request_alone(tmp_path):
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "memory.max").write_text("max\n")
    res = ray_node.resources({"RAYFLEET_NUM_CPUS": "3", "NVIDIA_VISIBLE_DEVICES": "0,1"}, cgroup=tmp_path)
    assert res["num_cpus"] == 3 and res["num_gpus"] == 2 and "memory" not in res


def test_the_wait_ends_when_the_head_starts_listening(capsys):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def late_head():
        time.sleep(1.5)
        server.bind(("127.0.0.1", port))
        server.listen()

    threading.Thread(target=late_head, daemon=True).start()
    try:
        assert ray_node.wait_for_head("localhost", port, timeout=20, interval=0.2) == "127.0.0.1"
    finally:
        server.close()
    out = capsys.readouterr().out
    assert "waiting for the head localhost" in out and "answers after" in out


def test_the_wait_is_bounded_with_a_clear_error():
    started = time.monotonic()
    with pytest.raises(SystemExit) as exc:
        ray_node.wait_for_head("head.rayfleet-test.invalid", 6379, timeout=1, interval=0.2)
    assert time.monotonic() - started < 10
    assert "did not answer within 1s" in str(exc.value) and "make status" in str(exc.value)


def test_jobs_by_name_or_module_and_a_driver_that_offers_nothing():
    assert ray_node.job_command("ddp", ["epochs=1"])[1:] == ["-m", "training.ddp", "epochs=1"]
    assert ray_node.job_command("fsdp", [])[1:] == ["-m", "training.fsdp"]
    assert ray_node.job_command("my_pkg.train", ["x=1"])[1:] == ["-m", "my_pkg.train", "x=1"]
    command = ray_node.join_command({"RAYFLEET_NUM_GPUS": "8"}, "10.0.0.5", block=False, driver_only=True)
    assert "--address=10.0.0.5:6379" in command and "--num-gpus=0" in command and "--num-cpus=0" in command


def test_a_recipe_driver_pins_the_jobs_entrypoint_to_its_own_node(monkeypatch):
    assert ray_node.job_command("recipe", [])[1:] == ["-m", "scripts.recipe_driver"]
    env = {"HOSTNAME": "ip-10-0-1-7"}
    command = ray_node.join_command(env, "10.0.0.5", block=False, driver_only=True)
    assert '--resources={"rayfleet_trainer_ip-10-0-1-7": 1}' in command  # only this trainer offers it
    assert not [c for c in ray_node.join_command(env, "10.0.0.5", block=True) if c.startswith("--resources")]
    seen = {}

    def fake_run(cmd, env=None, check=False):
        seen.setdefault("calls", []).append((cmd, env))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(ray_node, "wait_for_head", lambda host, port, timeout: "10.0.0.5")
    monkeypatch.setattr(ray_node.subprocess, "run", fake_run)
    task_env = {"RAY_AUTH_MODE": "token", "RAYFLEET_HEAD_HOST": "head.rf.local", "HOSTNAME": "ip-10-0-1-7"}
    assert ray_node.main(["driver", "recipe"], env=task_env) == 0
    job_cmd, job_env = seen["calls"][1]
    assert job_cmd[1:] == ["-m", "scripts.recipe_driver"]
    assert job_env["RAYFLEET_DASHBOARD_URL"] == "http://10.0.0.5:8265"
    assert job_env["RAYFLEET_TRAINER_RESOURCE"] == "rayfleet_trainer_ip-10-0-1-7"
    assert job_env["RAY_ADDRESS"] == "10.0.0.5:6379"


def test_usage_and_missing_head_name(capsys):
    assert ray_node.main([], env={}) == 2
    with pytest.raises(SystemExit) as exc:
        ray_node.main(["worker"], env={"RAY_AUTH_MODE": "token"})
    assert "RAYFLEET_HEAD_HOST is not set" in str(exc.value)
