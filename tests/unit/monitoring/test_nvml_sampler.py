"""The NVML sampler with an NVML stand-in: every GPU read, unsupported values skipped, no GPU a clear error."""

from __future__ import annotations

import pytest

from monitoring import spec as metric_spec
from monitoring.__main__ import EXIT_NO_GPU, main
from monitoring.nvml_sampler import NoGPU, NvmlSampler
from tests.fakes.fake_nvml import FakeNvml

SPEC = metric_spec.load()


def test_sampler_reads_every_gpu_and_skips_unsupported_values():
    sampler = NvmlSampler(FakeNvml(gpus=2, no_ecc=(1,), throttled=(1,)))
    gpu0, gpu1 = sampler.sample()
    assert gpu0.values["GPUUtilization"] == 0.0 and gpu1.values["GPUUtilization"] == 20.0
    assert gpu0.values["GPUMemoryUsed"] == 1024 and gpu0.values["GPUMemoryTotal"] == 81559
    assert gpu0.values["GPUPowerDraw"] == 350 and gpu0.values["GPUPowerLimit"] == 700
    assert gpu0.values["GPUECCErrorsCorrected"] == 3 and gpu0.values["GPUECCErrorsUncorrected"] == 0
    assert "GPUECCErrorsCorrected" not in gpu1.values  # NotSupported: left out, not fatal
    assert gpu0.values["GPUThrottled"] == 0.0 and gpu1.values["GPUThrottled"] == 1.0  # idle is not throttling
    assert set(gpu0.values) <= {m.name for m in SPEC.metrics}


def test_no_library_or_no_gpu_is_a_clear_error(capsys):
    with pytest.raises(NoGPU, match="no NVIDIA driver"):
        NvmlSampler(FakeNvml(library=False))
    with pytest.raises(NoGPU, match="no GPUs"):
        NvmlSampler(FakeNvml(gpus=0))
    assert main([], nvml=FakeNvml(library=False)) == EXIT_NO_GPU
    assert "pass --idle-without-gpu" in capsys.readouterr().err
