"""The DDP job's two precision levers, each proved in one step: the bf16 gradient all-reduce averages the
gradients of real ranks in bf16, and bf16 autocast runs the model in bf16 while its loss and its step stay
close to fp32's. Learning over epochs with these levers is compared by `make bench BENCH=speed-levers`
(bench/speed_levers_learning.py); their speed by bench/vs_blueprint.py."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from rayfleet.core.config import load_config
from rayfleet.train.data import fashion_mnist
from rayfleet.train.data.device_batches import DeviceSplit
from rayfleet.train.ddp.config import DDPConfig
from rayfleet.train.parallel import parallelize

CPU = torch.device("cpu")
WORLD = 2
BF16_UNIT_ROUNDOFF = 2.0**-8  # 8 significant bits, rounding to nearest


def _hook_model() -> torch.nn.Module:
    """A small CNN for the all-reduce: the hook sees only gradient buckets, so any model shows it; this one
    keeps each spawned rank from importing torchvision (ResNet-18) and Ray (rayfleet.train.ddp), seconds apiece."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 13 * 13, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    )


def _flat_grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    F.cross_entropy(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in getattr(model, "module", model).parameters()])


def _rank(rank: int, world: int, tmp: str) -> None:
    """One spawned rank: its own batch's gradient, unreduced (a plain copy of the model) and through the
    job's parallelize() with and without grad_compression=bf16; the results go to `tmp` for the test."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # the same initialization on every rank (DDP would broadcast rank 0's anyway)
        model = _hook_model()
        batch = torch.Generator().manual_seed(100 + rank)  # a different batch per rank
        x, y = torch.randn(4, 1, 28, 28, generator=batch), torch.randint(0, 10, (4,), generator=batch)
        local = _flat_grads(copy.deepcopy(model), x, y)
        locals_ = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(locals_, local)
        bf16 = parallelize(copy.deepcopy(model), CPU, "ddp", grad_compression="bf16")
        fp32 = parallelize(copy.deepcopy(model), CPU, "ddp", grad_compression="none")
        result = {"bf16": _flat_grads(bf16, x, y), "fp32": _flat_grads(fp32, x, y), "locals": torch.stack(locals_)}
        torch.save(result, f"{tmp}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_bf16_all_reduce_averages_two_ranks_gradients_in_bf16(tmp_path):
    """Two gloo ranks: grad_compression=bf16 averages exactly as bf16 does, within bf16 rounding of fp32's average."""
    mp.spawn(_rank, args=(WORLD, str(tmp_path)), nprocs=WORLD)
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(WORLD)]
    locals_ = ranks[0]["locals"]
    assert not torch.equal(locals_[0], locals_[1])  # two batches: there is something to average
    fp32_average = locals_.div(WORLD).sum(0)
    # bf16_compress_hook: each rank casts its bucket to bf16 and divides by the world size; the all-reduce
    # sums the bf16 values, which are copied back into the fp32 gradient.
    hook_average = sum(g.to(torch.bfloat16).div(WORLD) for g in locals_).float()
    for rank in ranks:
        assert torch.equal(rank["fp32"], fp32_average)
        assert torch.equal(rank["bf16"], hook_average), (rank["bf16"] - hook_average).abs().max()
    got = ranks[0]["bf16"]
    assert torch.equal(got.to(torch.bfloat16).float(), got)  # every value is a bf16 number
    assert not torch.equal(got, fp32_average)  # so the rounding is visible
    # Two roundings (each rank's value, then their sum), each at most one unit roundoff of what it rounds.
    bound = 2 * BF16_UNIT_ROUNDOFF * (1 + BF16_UNIT_ROUNDOFF) * locals_.abs().div(WORLD).sum(0)
    assert bool(((got - fp32_average).abs() <= bound).all())


@pytest.fixture(scope="module")
def one_step(small_dataset):
    """One step of the job's own train_epoch, from the same initialization and batch, at precision fp32 and
    bf16: its loss, gradient and parameter update, and the dtypes that conv1 and fc computed in."""
    from rayfleet.train.ddp import (
        Runtime,
        build_model,
        make_step,
        train_epoch,
    )  # here: spawned ranks import this module, not Ray

    batch = 16
    data = DeviceSplit(fashion_mnist.load(small_dataset, train=True).head(batch), CPU)
    steps = {}
    for precision in ("fp32", "bf16"):
        cfg = load_config(
            DDPConfig, None, [f"data_dir={small_dataset}", f"batch_size={batch}", "lr=1e-3", f"precision={precision}"]
        )
        rt = Runtime.resolve(cfg, CPU)
        torch.manual_seed(0)
        model, optimizer = build_model(cfg, rt)
        dtypes = {}
        for name in ("conv1", "fc"):
            record = lambda _m, _i, out, name=name, dtypes=dtypes: dtypes.update({name: out.dtype})  # noqa: E731
            getattr(model, name).register_forward_hook(record)
        before = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
        loss_sum, seen, _ = train_epoch(
            make_step(model, optimizer, cfg, rt), data, cfg, rt, 1, 0, 1
        )  # one batch: one step
        assert seen == batch
        steps[precision] = SimpleNamespace(
            amp_dtype=rt.amp_dtype,
            dtypes=dtypes,
            loss=float(loss_sum) / seen,
            grad=torch.cat([p.grad.reshape(-1) for p in model.parameters()]),
            update=torch.nn.utils.parameters_to_vector(model.parameters()).detach() - before,
        )
    return steps


def test_bf16_autocast_runs_the_convolutions_and_the_linear_layer_in_bf16(one_step):
    """precision=bf16 gives the job's step an autocast that runs conv1 and fc in bf16 (fp32 runs them in fp32)."""
    assert one_step["bf16"].amp_dtype is torch.bfloat16
    assert one_step["bf16"].dtypes == {"conv1": torch.bfloat16, "fc": torch.bfloat16}
    assert one_step["fp32"].amp_dtype is None
    assert one_step["fp32"].dtypes == {"conv1": torch.float32, "fc": torch.float32}


def test_bf16_autocast_loss_of_a_batch_is_within_2_percent_of_fp32(one_step):
    """From one initialization, the bf16 loss of a batch is the fp32 loss to 2% (measured 0.1-0.4%)."""
    fp32, bf16 = one_step["fp32"].loss, one_step["bf16"].loss
    assert bf16 == pytest.approx(fp32, rel=0.02)


def test_bf16_autocast_step_moves_the_weights_the_way_fp32_does(one_step):
    """One bf16 step's gradient and update go the fp32 step's way: cosine, and first-order descent, above 0.9."""
    fp32, bf16 = one_step["fp32"], one_step["bf16"]
    assert F.cosine_similarity(bf16.grad, fp32.grad, dim=0) > 0.9  # measured 0.95
    # Adam's first step is about lr * sign(gradient) in every weight, so the updates' own cosine (measured
    # 0.8) counts the many near-zero gradients whose sign bf16 flips as much as the large ones. Weighted by
    # the fp32 gradient, it is the descent each step buys:
    descent = float(bf16.update @ fp32.grad) / float(fp32.update @ fp32.grad)
    assert descent > 0.9, descent  # measured 0.95
