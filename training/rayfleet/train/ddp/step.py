"""The DDP job's training step, eager or captured whole as one CUDA graph.

Why a graph: at 128 images per GPU a 28x28 ResNet-18 step is a few hundred small kernels, and the GPU
finishes each faster than Python and the driver launch the next (on an H100 the GPU was busy 1.3 ms of a
6-8 ms step). `torch.compile(mode="reduce-overhead")` graphs the model only: DDP's gradient hooks and the
optimizer still launch kernel by kernel. Here the forward, the backward, DDP's all-reduce and the fused Adam
step are captured once, and every later step is one copy of the batch into the graph's input and one replay.

How (PyTorch's whole-network capture, with DDP's conditions): the caller builds the DDP wrapper on
`capture_stream()`; the first `WARMUP` steps run eagerly on that stream (DDP settles its buckets over its
first iterations, cuDNN and Inductor pick their kernels); then one step is captured. The warm-up steps are
real steps on real batches, so the run trains exactly as the eager one does. Adam is `capturable` (its step
count lives on the GPU) in both modes, so checkpoints are the same either way.

A batch of another size (an epoch's last, partial one) runs eagerly on the same parameters and buffers: the
same arithmetic, no second capture, and with torch.compile no recompilation (compiled code is bypassed for
it), so the epoch keeps every sample and accuracy does not change.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F

WARMUP = 11  # PyTorch's CUDA-graph notes ask DDP for at least 11 eager iterations before capture

Autocast = Callable[..., AbstractContextManager]


def capture_stream(device: torch.device, graph: bool) -> torch.cuda.Stream | None:
    """The side stream the DDP wrapper is built on, the warm-up runs on and the graph is captured on."""
    return torch.cuda.Stream(device) if graph else None


def on_stream(stream: torch.cuda.Stream | None) -> AbstractContextManager:
    return torch.cuda.stream(stream) if stream is not None else nullcontext()


def make_capturable(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """On a GPU, Adam keeps its step count on the device, so the step can be captured (and a checkpoint
    written on a CPU loads into a graph). Its arithmetic is the same."""
    for group in optimizer.param_groups:
        group["capturable"] = device.type == "cuda"


class TrainStep:
    """`step(x, y)` trains on one batch and returns its mean loss as a device tensor. With a graph the
    tensor is the graph's output, overwritten by the next step: read it (or add it up) before then."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        autocast: Autocast,
        batch_size: int,
        *,
        compiled: bool = False,
        stream: torch.cuda.Stream | None = None,
        warmup: int = WARMUP,
    ):
        self.model, self.optimizer, self.autocast = model, optimizer, autocast
        self.batch_size, self.compiled, self.stream, self.warmup = batch_size, compiled, stream, warmup
        self.warmed = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self.eager_steps = self.replays = 0

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != self.batch_size:
            return self._off_size(x, y)
        if self.stream is None:
            return self._eager(x, y)
        if self.graph is None and self.warmed < self.warmup:
            self.warmed += 1
            return self._warm(x, y)
        if self.graph is None:
            self._capture(x, y)
        static_x, static_y, static_loss = self.static
        static_x.copy_(x)
        static_y.copy_(y)
        self.graph.replay()
        self.replays += 1
        return static_loss

    def _eager(self, x, y, cache: bool = True) -> torch.Tensor:
        with self.autocast(cache):
            loss = F.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.eager_steps += 1
        return loss.detach()

    def _off_size(self, x, y) -> torch.Tensor:
        if not self.compiled:
            return self._eager(x, y)
        with torch.compiler.set_stance("force_eager"):  # one odd batch per epoch: never worth a recompile
            return self._eager(x, y)

    def _warm(self, x, y) -> torch.Tensor:
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            loss = self._eager(x, y, cache=False)
        torch.cuda.current_stream().wait_stream(self.stream)
        return loss

    def _capture(self, x, y) -> None:
        static_x, static_y = torch.empty_like(x), torch.empty_like(y)  # empty_like keeps channels_last
        self.graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)  # the captured backward writes the gradients, never adds
        torch.cuda.synchronize()
        # thread_local: Ray's and NCCL's own threads may call CUDA while this thread captures.
        with torch.cuda.graph(self.graph, stream=self.stream, capture_error_mode="thread_local"):
            with self.autocast(False):  # no weight-cast cache: every replay casts the updated weights
                loss = F.cross_entropy(self.model(static_x), static_y)
            loss.backward()
            self.optimizer.step()
        self.static = (static_x, static_y, loss.detach())
