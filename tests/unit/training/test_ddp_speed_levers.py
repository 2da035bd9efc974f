"""The DDP job's speed levers change speed, not learning: the bf16 gradient all-reduce and the bf16 CPU
path each train a small subset as well as plain fp32 does (timings live in bench/vs_blueprint.py)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from training.core.config import load_config
from training.data import fashion_mnist
from training.data.device_batches import DeviceSplit
from training.ddp import Runtime, build_model, evaluate, train_epoch
from training.ddp_config import DDPConfig
from training.parallel import parallelize

CPU = torch.device("cpu")
TEST, BATCH = 300, 32
# Training images: 3 epochs of 384 are 36 steps (bf16 is emulated, slow, on most CPUs); the fp32 hook test
# affords 108 steps, where evaluation accuracy is steadier.
BF16_TRAIN, HOOK_TRAIN = 384, 1152


@pytest.fixture
def process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _splits(data_dir, train_images):
    train = DeviceSplit(fashion_mnist.load(data_dir, train=True).head(train_images), CPU)
    test = DeviceSplit(fashion_mnist.load(data_dir, train=False).head(TEST), CPU)
    return train, test


def _train(cfg, splits):
    """The job's own model, step and evaluation, three epochs from the same seeded initialization:
    (train loss of epoch 1, of epoch 3, test accuracy after, the model)."""
    rt = Runtime.resolve(cfg, CPU)
    torch.manual_seed(0)
    model, optimizer = build_model(cfg, rt)  # on CPU: small convolutions as GEMM, fused Adam
    wrapped = parallelize(model, CPU, "ddp", grad_compression=cfg.grad_compression)
    torch.manual_seed(1)
    train, test = splits
    losses = []
    for epoch in (1, 2, 3):
        loss_sum, seen, _ = train_epoch(wrapped, optimizer, train, cfg, rt, epoch, 0, 1)
        losses.append(float(loss_sum) / seen)
    _, correct, tested = evaluate(model, test, cfg, rt, 0, 1)
    return losses[0], losses[-1], float(correct) / tested, model


def _config(data_dir, *overrides):
    return load_config(
        DDPConfig, None, [f"data_dir={data_dir}", f"batch_size={BATCH}", "lr=3e-3", "eval_batch_size=100", *overrides]
    )


def _compare(small_dataset, train_images, *overrides):
    splits = _splits(small_dataset, train_images)
    plain = _train(_config(small_dataset, "precision=fp32"), splits)
    lever = _train(_config(small_dataset, *overrides), splits)
    return plain, lever


def _assert_learns_like(plain, lever):
    for first, second, accuracy, _ in (plain, lever):
        assert second < first * 0.8, (first, second)  # the loss fell
        assert accuracy > 0.4, accuracy  # well above chance (0.1)
    assert lever[1] < plain[1] * 1.1, (plain[1], lever[1])  # and as far as in fp32
    assert lever[2] >= plain[2] - 0.05, (plain[2], lever[2])  # accuracy holds (300 test images)


def test_bf16_gradient_all_reduce_learns_like_fp32(small_dataset, process_group):
    plain, lever = _compare(small_dataset, HOOK_TRAIN, "precision=fp32", "grad_compression=bf16")
    _assert_learns_like(plain, lever)
    # The hook really ran: gradients rounded to bf16 move the weights a little differently.
    assert not torch.equal(plain[3].fc.weight, lever[3].fc.weight)


def test_bf16_autocast_on_cpu_learns_like_fp32(small_dataset, process_group):
    plain, lever = _compare(small_dataset, BF16_TRAIN, "precision=bf16")
    assert Runtime.resolve(_config(small_dataset, "precision=bf16"), CPU).amp_dtype is torch.bfloat16
    _assert_learns_like(plain, lever)
    assert not torch.equal(plain[3].fc.weight, lever[3].fc.weight)
