"""One sample of every GPU through NVML (`pynvml`, from nvidia-ml-py; the library comes from the driver).

A value a GPU does not support (ECC on consumer cards, power limits in some VMs) is left out of that GPU's
sample instead of failing the whole sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class NoGPU(RuntimeError):
    """No NVML library (no NVIDIA driver), or a driver with no GPUs."""


@dataclass
class GpuSample:
    index: int
    name: str
    values: dict[str, float] = field(default_factory=dict)  # metric name -> value
    throttle_reasons: int = 0
    lost: bool = False  # NVML says the GPU is lost (fell off the bus): no values


class GpuLost(Exception):
    pass


class NvmlSampler:
    def __init__(self, nvml):
        self.nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NoGPU(f"NVML is not available ({exc}): no NVIDIA driver on this host?") from None
        self.count = nvml.nvmlDeviceGetCount()
        if self.count == 0:
            nvml.nvmlShutdown()
            raise NoGPU("NVML found no GPUs on this host")
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.count)]
        # Reasons that only mean "idle" or "clocks set by the admin" are not throttling.
        self._benign = nvml.nvmlClocksThrottleReasonGpuIdle | nvml.nvmlClocksThrottleReasonApplicationsClocksSetting

    def close(self) -> None:
        self.nvml.nvmlShutdown()

    def _optional(self, fn, *args):
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:  # NotSupported and friends: this GPU has no such value
            if getattr(exc, "value", None) == self.nvml.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost from None
            return None

    def sample(self) -> list[GpuSample]:
        samples = []
        for index, handle in enumerate(self.handles):
            try:
                samples.append(self._sample_one(index, handle))
            except GpuLost:  # every call on it fails the same way: no values, and the node is suspect
                samples.append(GpuSample(index=index, name="lost", lost=True))
        return samples

    def _sample_one(self, index: int, handle) -> GpuSample:
        n = self.nvml
        name = self._optional(n.nvmlDeviceGetName, handle) or "unknown"
        out = GpuSample(index=index, name=name.decode() if isinstance(name, bytes) else name)
        values = out.values
        util = self._optional(n.nvmlDeviceGetUtilizationRates, handle)
        if util is not None:
            values["GPUUtilization"] = float(util.gpu)
            values["GPUMemoryUtilization"] = float(util.memory)
        memory = self._optional(n.nvmlDeviceGetMemoryInfo, handle)
        if memory is not None:
            values["GPUMemoryUsed"] = memory.used / 2**20
            values["GPUMemoryTotal"] = memory.total / 2**20
        for metric, fn, args, scale in (
            ("GPUPowerDraw", n.nvmlDeviceGetPowerUsage, (), 1e-3),  # milliwatts
            ("GPUPowerLimit", n.nvmlDeviceGetEnforcedPowerLimit, (), 1e-3),
            ("GPUTemperature", n.nvmlDeviceGetTemperature, (n.NVML_TEMPERATURE_GPU,), 1),
            ("GPUSMClock", n.nvmlDeviceGetClockInfo, (n.NVML_CLOCK_SM,), 1),
            (
                "GPUECCErrorsCorrected",
                n.nvmlDeviceGetTotalEccErrors,
                (n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
                1,
            ),
            (
                "GPUECCErrorsUncorrected",
                n.nvmlDeviceGetTotalEccErrors,
                (n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC),
                1,
            ),
        ):
            value = self._optional(fn, handle, *args)
            if value is not None:
                values[metric] = float(value) * scale
        reasons = self._optional(n.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
        if reasons is not None:
            out.throttle_reasons = int(reasons)
            values["GPUThrottled"] = 1.0 if reasons & ~self._benign else 0.0
        return out
