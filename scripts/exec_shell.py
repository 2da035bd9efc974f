"""A shell (or one command) inside a running container, through ECS Exec and the Session Manager plugin.

    python -m scripts.exec_shell [--target head|worker-N|trainer] [--command "ray status"]
    make exec                       # interactive shell in the head
    make exec TARGET=worker-2 CMD="nvidia-smi"
    make ray-status                 # `ray status` on the head

Needs AWS's `session-manager-plugin` on PATH, like `aws ecs execute-command` does.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys

from scripts.aws import Aws, PluginMissing, RayfleetError, run_cli
from scripts.cluster_tasks import running_tasks
from scripts.tf_outputs import Outputs

PLUGIN = "session-manager-plugin"
INSTALL_HINT = (
    "the Session Manager plugin is not installed: see "
    "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html"
    " (Debian/Ubuntu: the session-manager-plugin .deb; macOS: brew install --cask session-manager-plugin)"
)


def find_task(aws: Aws, out: Outputs, target: str) -> tuple[str, str]:
    """(task ARN, container name) for head, worker-N (1-based, oldest first) or trainer (newest)."""
    match = re.fullmatch(r"head|trainer|worker-(\d+)", target)
    if not match:
        raise RayfleetError(f"--target {target!r}: use head, trainer or worker-N (N from 1)")
    role = target.split("-")[0]
    container = {"head": out.head_container_name, "worker": out.worker_container_name}.get(
        role, out.trainer_container_name
    )
    tasks = running_tasks(aws.client("ecs"), out)[role]
    if not tasks:
        raise RayfleetError(f"no running {role} task in {out.cluster_name} (make status)")
    if role == "trainer":
        return tasks[-1]["taskArn"], container  # the newest run
    index = int(match.group(1)) - 1 if match.group(1) else 0
    if index >= len(tasks):
        raise RayfleetError(f"{target}: only {len(tasks)} worker task(s) are running")
    return tasks[index]["taskArn"], container


def plugin_argv(ecs, response: dict, profile: str) -> list[str]:
    """The Session Manager plugin's arguments for an ExecuteCommand response (as the AWS CLI builds them)."""
    cluster = response["clusterArn"].rsplit("/", 1)[-1]
    task_id = response["taskArn"].rsplit("/", 1)[-1]
    described = ecs.describe_tasks(cluster=cluster, tasks=[task_id])["tasks"]
    if not described:
        raise RayfleetError(f"task {task_id} is gone")
    runtime_id = next(c["runtimeId"] for c in described[0]["containers"] if c["name"] == response["containerName"])
    target = {"Target": f"ecs:{cluster}_{task_id}_{runtime_id}"}
    return [PLUGIN, json.dumps(response["session"]), ecs.meta.region_name, "StartSession", profile,
            json.dumps(target), ecs.meta.endpoint_url]  # fmt: skip


def exec_in(aws: Aws, out: Outputs, target: str, command: str, ecs=None) -> int:
    if shutil.which(PLUGIN) is None:
        raise PluginMissing(INSTALL_HINT)
    task_arn, container = find_task(aws, out, target)
    ecs = ecs or aws.client("ecs")
    response = ecs.execute_command(
        cluster=out.cluster_name, task=task_arn, container=container, interactive=True, command=command
    )
    argv = plugin_argv(ecs, response, aws.session.profile_name or "")
    # Ctrl-C belongs to the remote shell: the plugin handles it, this process must not die of it.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.call(argv)
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.exec_shell", description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="head", help="head (default), worker-N or trainer")
    parser.add_argument("--command", default="/bin/bash", help='default: an interactive shell; e.g. "ray status"')
    parser.add_argument("--outputs", help="Terraform outputs JSON (default: .rayfleet/outputs.json)")
    args = parser.parse_args(argv)
    out = Outputs.load(args.outputs)
    return exec_in(Aws(out.region), out, args.target, args.command)


if __name__ == "__main__":
    sys.exit(run_cli(main))
