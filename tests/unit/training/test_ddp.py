"""What the device makes of the config: the loop never branches on the platform beyond this."""

from __future__ import annotations

import torch

from training.core.config import load_config
from training.ddp import Runtime
from training.ddp_config import DDPConfig


def cfg(data_dir, *overrides):
    return load_config(DDPConfig, None, [f"data_dir={data_dir}", *overrides])


def test_gpu_gets_bf16_and_channels_last(small_dataset):
    rt = Runtime.resolve(cfg(small_dataset), torch.device("cuda", 0))
    assert rt.amp_dtype is torch.bfloat16 and rt.channels_last


def test_cpu_runs_fp32_nchw_with_small_convs_as_gemm(small_dataset, monkeypatch):
    monkeypatch.setattr("training.precision.cpu_has_native_bf16", lambda: False)
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
