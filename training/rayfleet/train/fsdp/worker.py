"""What the FSDP loop (rayfleet/train/fsdp/__init__.py `run_loop`) takes from the Ray Train worker it runs on, besides
its checkpoints: its rank, the world size, its device, Ray Train's preemption notice, the wait for Ray Train's
restart after a notice's checkpoint, and the hang watchdog's report of its steps.

One small object, so that the loop itself, not a copy of it, also runs in a plain process (a test's, in a
one-rank gloo group). The checkpoints reach Ray Train through `ray.train.report` and `ray.train.get_checkpoint`
(rayfleet/train/checkpoint/__init__.py), the one other point where such a process stands in for Ray Train.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rayfleet.train.control.hang_watch import Steps


@dataclass(frozen=True)
class Worker:
    rank: int
    world: int
    device: torch.device
    preemption_info: Callable[[], object | None]  # ray.train.get_preemption_info: the notice, or None
    sleep: Callable[[float], None] = time.sleep  # the wait for the restart after a notice's checkpoint
    watch: Callable[[str, int], Steps] = Steps.start  # (run name, rank): the hang watchdog's view of the steps

    @classmethod
    def of_ray_train(cls) -> Worker:
        """This Ray Train worker's (called on the worker, inside the training function)."""
        import ray.train
        import ray.train.torch

        ctx = ray.train.get_context()
        device = ray.train.torch.get_device()
        return cls(ctx.get_world_rank(), ctx.get_world_size(), device, ray.train.get_preemption_info)
