"""A small NVML stand-in with pynvml's names, for tests: the real library needs an NVIDIA driver.

Each GPU's readings follow a simple script: utilization = base + 10 * sample_number (mod 100), so tests
can compute the exact statistic sets they expect. GPUs listed in `no_ecc` raise NotSupported for ECC,
like consumer cards do; `uncorrectable` gives GPUs uncorrectable ECC errors, and every call on a GPU in
`lost` fails with NVML's "GPU is lost" (fell off the bus).
"""

from __future__ import annotations

from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


NVML_ERROR_GPU_IS_LOST = 15


class NVMLError_GpuIsLost(NVMLError):
    value = NVML_ERROR_GPU_IS_LOST


NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
nvmlClocksThrottleReasonGpuIdle = 0x1
nvmlClocksThrottleReasonApplicationsClocksSetting = 0x2
nvmlClocksThrottleReasonHwSlowdown = 0x8


class FakeNvml:
    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_MEMORY_ERROR_TYPE_CORRECTED = NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    nvmlClocksThrottleReasonGpuIdle = nvmlClocksThrottleReasonGpuIdle
    nvmlClocksThrottleReasonApplicationsClocksSetting = nvmlClocksThrottleReasonApplicationsClocksSetting

    def __init__(
        self,
        gpus: int = 2,
        library: bool = True,
        no_ecc: tuple[int, ...] = (),
        throttled: tuple[int, ...] = (),
        uncorrectable: dict[int, int] | None = None,
        lost: tuple[int, ...] = (),
    ):
        self.gpus, self.library, self.no_ecc, self.throttled = gpus, library, no_ecc, throttled
        self.uncorrectable, self.lost = uncorrectable or {}, lost
        self.calls = 0  # utilization reads per GPU 0: one per sample
        self.initialized = False

    def _alive(self, handle) -> None:
        if handle in self.lost:
            raise NVMLError_GpuIsLost("GPU is lost")

    def utilization(self, index: int, sample: int) -> float:
        return float((20 * index + 10 * sample) % 100)

    def nvmlInit(self):
        if not self.library:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
        self.initialized = True

    def nvmlShutdown(self):
        self.initialized = False

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        self._alive(handle)
        return b"Fake H100"

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._alive(handle)
        sample = self.calls if handle == 0 else self.calls - 1
        if handle == 0:
            self.calls += 1
        return SimpleNamespace(gpu=self.utilization(handle, sample), memory=5.0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._alive(handle)
        return SimpleNamespace(used=1024 * 2**20, total=81559 * 2**20)

    def nvmlDeviceGetPowerUsage(self, handle):
        self._alive(handle)
        return 350_000  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        self._alive(handle)
        return 700_000

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._alive(handle)
        return 55

    def nvmlDeviceGetClockInfo(self, handle, clock):
        self._alive(handle)
        return 1980

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter):
        self._alive(handle)
        if handle in self.no_ecc:
            raise NVMLError_NotSupported("Not Supported")
        return 3 if error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED else self.uncorrectable.get(handle, 0)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        self._alive(handle)
        return nvmlClocksThrottleReasonHwSlowdown if handle in self.throttled else nvmlClocksThrottleReasonGpuIdle
