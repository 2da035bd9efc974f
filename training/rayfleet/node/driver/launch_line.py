"""The command line and environment that start one node's launcher (torchrun or accelerate launch) for a
launcher recipe: rayfleet sets the node count, node rank, processes per node and rendezvous from the recipe's
`resources` (RAYFLEET_* variables of the job); rayfleet/node/driver/multinode.py runs it on each worker node."""

from __future__ import annotations

from dataclasses import dataclass

LAUNCHERS = ("torchrun", "accelerate")


@dataclass(frozen=True)
class Shape:
    nodes: int
    cpus: float
    gpus: int

    @property
    def procs_per_node(self) -> int:
        return self.gpus or 1

    @classmethod
    def from_env(cls, env: dict) -> Shape:
        return cls(
            nodes=int(env.get("RAYFLEET_NUM_WORKERS") or 1),
            cpus=float(env.get("RAYFLEET_CPUS_PER_WORKER") or 1),
            gpus=int(env.get("RAYFLEET_GPUS_PER_WORKER") or 0),
        )


def launcher_argv(
    launcher: str, shape: Shape, rank: int, master: str, port: int, options: list[str], target: list[str]
) -> list[str]:
    """The interpreter's arguments (after `python`) that start `launcher` for node `rank` of `shape`."""
    if launcher == "torchrun":
        return [
            "-m",
            "torch.distributed.run",
            f"--nnodes={shape.nodes}",
            f"--node-rank={rank}",
            f"--nproc-per-node={shape.procs_per_node}",
            f"--master-addr={master}",
            f"--master-port={port}",
            *options,
            *target,
        ]
    if launcher == "accelerate":  # its multi-process path is torchrun's; on CPU nodes gloo (launcher_env)
        return [
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            f"--num_machines={shape.nodes}",
            f"--machine_rank={rank}",
            f"--num_processes={shape.nodes * shape.procs_per_node}",
            f"--main_process_ip={master}",
            f"--main_process_port={port}",
            *options,
            *target,
        ]
    raise ValueError(f"unknown launcher {launcher!r}; one of {', '.join(LAUNCHERS)}")


def launcher_env(launcher: str, shape: Shape, rank: int, attempt: int, node_id: str) -> dict[str, str]:
    env = {"RAYFLEET_NODE_RANK": str(rank), "RAYFLEET_ATTEMPT": str(attempt), "RAYFLEET_RAY_NODE_ID": node_id}
    if launcher == "accelerate" and not shape.gpus:
        env["ACCELERATE_USE_CPU"] = "true"  # accelerate picks gloo across processes only when told it is on CPU
    return env
