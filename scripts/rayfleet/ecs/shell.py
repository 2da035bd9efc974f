"""A shell (or one command) inside a running container, through ECS Exec: `aws ecs execute-command`.

    rayfleet exec                                   # an interactive shell in the head
    rayfleet exec --node worker-2 --command nvidia-smi
    rayfleet exec --command "ray status"

This module finds the task and its container through the adapter, checks what would otherwise end in a
stack trace from the CLI (no CLI, no Session Manager plugin, no such task, the ECS Exec agent not running),
then becomes the AWS CLI (os.execv), which starts the session with AWS's `session-manager-plugin`. The CLI
is the one `make setup` installs in .venv (requirements/ops.txt), else the first `aws` on PATH; it reads
the credentials and AWS_ENDPOINT_URL from the environment itself, as boto3 does.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import sysconfig

from rayfleet.core.aws import Aws, PluginMissing
from rayfleet.core.errors import ConfigError, RayfleetError
from rayfleet.core.moved import gone
from rayfleet.ecs.outputs import Outputs
from rayfleet.ecs.tasks import running_tasks

PLUGIN = "session-manager-plugin"
PLUGIN_DOC = (
    "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html"
)
EXEC_AGENT = "ExecuteCommandAgent"
# What the AWS CLI calls for this verb (not a boto3 call: tools/operator_policy.py adds these to the operator's).
CLI_ACTIONS = ("ecs:ExecuteCommand",)
SCRIPTS_DIR = sysconfig.get_path("scripts")  # where `make setup`'s pip put `aws`: .venv/bin
TARGET = re.compile(r"head|trainer|worker-([1-9][0-9]*)")


class CliMissing(RayfleetError):
    pass


class ExecUnavailable(RayfleetError):
    pass


def find_cli() -> str:
    """The `aws` of this Python environment (`make setup` installs it), else the first one on PATH."""
    found = shutil.which("aws", path=os.pathsep.join([SCRIPTS_DIR, os.environ.get("PATH", "")]))
    if found is None:
        raise CliMissing("the AWS CLI (`aws`) is not installed: `make setup` installs it into .venv")
    return found


def check_plugin() -> None:
    """`aws ecs execute-command` runs `session-manager-plugin` from PATH, so it is looked for there."""
    if shutil.which(PLUGIN) is None:
        raise PluginMissing(
            f"the Session Manager plugin is not installed ({PLUGIN} is not on PATH): see {PLUGIN_DOC}"
            " (Debian/Ubuntu: the session-manager-plugin .deb; macOS: brew install --cask session-manager-plugin)"
        )


def parse_target(target: str) -> tuple[str, int | None]:
    """("head" | "worker" | "trainer", the 0-based worker index or None)."""
    match = TARGET.fullmatch(target)
    if not match:
        raise ConfigError(f"--node {target!r}: use head, trainer or worker-N (N from 1)")  # exit 2
    return target.split("-")[0], int(match.group(1)) - 1 if match.group(1) else None


def find_task(aws: Aws, out: Outputs, target: str) -> tuple[dict, str]:
    """(the described task, container name) for head, worker-N (1-based, oldest first) or trainer (newest)."""
    role, index = parse_target(target)
    tasks = running_tasks(aws.client("ecs"), out)[role]
    groups = {f"service:{g.service_name}": g.container_name for g in out.worker_groups.values()}
    if not tasks:
        raise RayfleetError(f"no running {role} task in {out.cluster_name} (rayfleet status)")
    if role == "trainer":
        return tasks[-1], out.trainer_container_name  # the newest run
    if role == "head":
        return tasks[0], out.head_container_name
    index = index or 0
    if index >= len(tasks):
        raise RayfleetError(f"{target}: only {len(tasks)} worker task(s) are running (rayfleet status)")
    return tasks[index], groups.get(tasks[index].get("group", ""), "ray-worker")


def check_exec_agent(task: dict, container: str) -> None:
    """ECS Exec needs the task started with it on and the agent in the container RUNNING (DescribeTasks)."""
    task_id = task["taskArn"].rsplit("/", 1)[-1]
    if task.get("lastStatus") != "RUNNING":
        raise ExecUnavailable(f"task {task_id} is {task.get('lastStatus', 'in no known state')}, not RUNNING")
    if not task.get("enableExecuteCommand"):
        raise ExecUnavailable(
            f"task {task_id} was started without ECS Exec (enableExecuteCommand); "
            "`rayfleet deploy` turns it on for the services, `rayfleet launch` for trainers, "
            "for the tasks started after"
        )
    entry = next((c for c in task.get("containers", []) if c.get("name") == container), None)
    if entry is None:
        raise ExecUnavailable(f"task {task_id} has no container {container}")
    agent = next((a for a in entry.get("managedAgents", []) if a.get("name") == EXEC_AGENT), {})
    status = agent.get("lastStatus", "not reported")
    if status != "RUNNING":
        reason = f" ({' '.join(agent['reason'].split())})" if agent.get("reason") else ""
        raise ExecUnavailable(
            f"the ECS Exec agent in {container} of task {task_id} is {status}{reason}, not RUNNING: "
            "retry in a minute; if it stays so, check the task role's ssmmessages permissions (rayfleet deploy)"
        )


def cli_argv(cli: str, region: str, cluster: str, task_arn: str, container: str, command: str) -> list[str]:
    return [
        cli,
        "ecs",
        "execute-command",
        "--region",
        region,
        "--cluster",
        cluster,
        "--task",
        task_arn,
        "--container",
        container,
        "--interactive",
        "--command",
        command,
    ]


def command_line(aws: Aws, out: Outputs, target: str, command: str) -> list[str]:
    """Every check that can fail before the session, then the `aws ecs execute-command` argv."""
    parse_target(target)  # a bad target is refused before anything else
    cli = find_cli()
    check_plugin()
    task, container = find_task(aws, out, target)
    check_exec_agent(task, container)
    return cli_argv(cli, aws.region, out.cluster_name, task["taskArn"], container, command)


def exec_in(aws: Aws, out: Outputs, target: str, command: str) -> None:
    """Become the AWS CLI: its exit code is ours, Ctrl-C and the terminal are the session's."""
    argv = command_line(aws, out, target, command)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        raise CliMissing(f"cannot run {argv[0]}: {exc.strerror}; `make setup` installs the AWS CLI") from None


def open_shell(node: str = "head", command: str = "/bin/bash", outputs: str | None = None) -> int:
    """`rayfleet exec`: `command` (default a shell) in `node`'s container: head, worker-N or trainer."""
    out = Outputs.load(outputs)
    exec_in(Aws(out.region), out, node, command)
    return 1  # not reached: exec_in replaces this process or raises


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ecs.shell", "rayfleet exec")
