"""What the device makes of the config: the loop never branches on the platform beyond this."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rayfleet.core.config import load_config
from rayfleet.train.ddp.config import DDPConfig, Runtime
from rayfleet.train.ddp.report import StepTracking
from rayfleet.train.tracking.progress import Progress


def cfg(data_dir, *overrides):
    return load_config(DDPConfig, None, [f"data_dir={data_dir}", *overrides])


def test_gpu_gets_bf16_and_channels_last(small_dataset):
    rt = Runtime.resolve(cfg(small_dataset), torch.device("cuda", 0))
    assert rt.amp_dtype is torch.bfloat16 and rt.channels_last


def test_cpu_runs_fp32_nchw_with_small_convs_as_gemm(small_dataset, monkeypatch):
    monkeypatch.setattr("rayfleet.train.precision.cpu_has_native_bf16", lambda: False)
    rt = Runtime.resolve(cfg(small_dataset), torch.device("cpu"))
    assert rt.amp_dtype is None and not rt.channels_last and rt.small_convs_as_gemm
    assert not Runtime.resolve(cfg(small_dataset), torch.device("cuda", 0)).small_convs_as_gemm
    assert Runtime.resolve(cfg(small_dataset, "small_convs_as_gemm=true"), torch.device("cuda", 0)).small_convs_as_gemm
    assert not Runtime.resolve(cfg(small_dataset, "small_convs_as_gemm=false"), torch.device("cpu")).small_convs_as_gemm
    x = torch.ones(2, 2)
    with rt.autocast():
        assert (x @ x).dtype == torch.float32


def test_precision_can_be_forced(small_dataset):
    assert Runtime.resolve(cfg(small_dataset, "precision=fp32"), torch.device("cuda", 0)).amp_dtype is None
    assert Runtime.resolve(cfg(small_dataset, "precision=bf16"), torch.device("cpu")).amp_dtype is torch.bfloat16
    assert not Runtime.resolve(cfg(small_dataset, "channels_last=false"), torch.device("cuda", 0)).channels_last


def test_step_tracking_logs_the_loss_and_the_gradient_norm_every_n_steps(small_dataset, tmp_path):
    model = torch.nn.Linear(3, 2)
    model(torch.ones(4, 3)).pow(2).sum().backward()
    want = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
    logged = []
    scalars = SimpleNamespace(log=lambda step, values: logged.append((step, values)))
    config = cfg(small_dataset, "log_every_steps=2", "progress_every_s=3600")
    tracking = StepTracking(scalars, Progress(20, 0, 3600), config, steps=10, world=2, model=model)
    for step in range(1, 6):
        tracking(step, torch.tensor(float(step)))
    assert [step for step, _ in logged] == [2, 4]
    assert logged[1][1]["train/step_loss"] == 4.0
    assert logged[1][1]["train/grad_norm"] == pytest.approx(want)
