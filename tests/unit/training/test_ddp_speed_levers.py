"""The DDP job's speed levers change speed, not learning: the bf16 gradient all-reduce and the bf16 CPU
path each train a small subset as well as plain fp32 does (timings live in bench/vs_blueprint.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist

from training.core.config import load_config
from training.data import fashion_mnist
from training.data.device_batches import DeviceSplit
from training.ddp import Runtime, evaluate, train_epoch
from training.ddp_config import DDPConfig
from training.models.resnet import resnet18_grayscale
from training.models.small_convs import gemm_small_convs
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


def _train(initial, cfg, rt, splits):  # the job's own step and evaluation; the model from one initialization
    """Three epochs from `initial`: (train loss of epoch 1, of epoch 3, test accuracy after, the model)."""
    model = copy.deepcopy(initial)
    wrapped = parallelize(model, CPU, "ddp", grad_compression=cfg.grad_compression)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=True)
    train, test = splits
    losses = []
    for epoch in (1, 2, 3):
        loss_sum, seen = train_epoch(wrapped, optimizer, train, cfg, rt, epoch, 0, 1)
        losses.append(float(loss_sum) / seen)
    _, correct, tested = evaluate(model, test, cfg, rt, 0, 1)
    return losses[0], losses[-1], float(correct) / tested, model


def _initial_model():
    torch.manual_seed(0)
    model = resnet18_grayscale()
    gemm_small_convs(model)  # as the job does on CPU
    return model


def _config(data_dir, *overrides):
    return load_config(
        DDPConfig, None, [f"data_dir={data_dir}", f"batch_size={BATCH}", "lr=3e-3", "eval_batch_size=100", *overrides]
    )


def _compare(small_dataset, train_images, *overrides, rt_of=lambda cfg: Runtime.resolve(cfg, CPU)):
    initial, splits = _initial_model(), _splits(small_dataset, train_images)
    plain_cfg = _config(small_dataset, "precision=fp32")
    lever_cfg = _config(small_dataset, *overrides)
    torch.manual_seed(1)
    plain = _train(initial, plain_cfg, Runtime.resolve(plain_cfg, CPU), splits)
    torch.manual_seed(1)
    lever = _train(initial, lever_cfg, rt_of(lever_cfg), splits)
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
