"""CPU and memory of the GPU-metrics sidecar at its default intervals, as a table.

    python -m bench.sidecar_cost [--seconds 120] [--gpus 8]

Runs `python -m monitoring` (sample every 10 s, publish every 60 s) as its own process, publishing to a
real moto_server, with the tests' NVML stand-in for the GPUs (no driver here; real NVML reads are
microseconds each). Reads the process's CPU time and resident memory from /proc. Target: under 1% of one
core and under 50 MB RSS.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.helpers import MotoServer

REPO = Path(__file__).resolve().parents[1]
RUNNER = (
    "import sys; from tests.fakes.fake_nvml import FakeNvml; from monitoring.__main__ import main; "
    "sys.exit(main(sys.argv[2:], nvml=FakeNvml(gpus=int(sys.argv[1]))))"
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def memory_mb(pid: int) -> dict[str, float]:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {key: int(status[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="steady-state window measured")
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args(argv)
    moto = MotoServer().start()
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL_CLOUDWATCH": moto.url,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "RAYFLEET_CLUSTER_NAME": "bench",
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(args.gpus)], env=env, cwd=REPO, stdout=subprocess.DEVNULL
    )
    try:
        time.sleep(5)  # start-up (imports, first sample) is not steady state
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.seconds)
        cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
        memory = memory_mb(proc.pid)
        assert proc.poll() is None, "the sidecar exited during the measurement"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        moto.stop()
    share = 100 * (cpu1 - cpu0) / (t1 - t0)
    print(f"| sidecar, {args.gpus} GPUs, 10 s sample / 60 s publish | value | target |")
    print("|---|---|---|")
    print(f"| CPU, % of one core over {t1 - t0:.0f} s | {share:.3f} | < 1 |")
    print(f"| RSS now, MB | {memory['VmRSS']:.1f} | < 50 |")
    print(f"| RSS peak, MB | {memory['VmHWM']:.1f} | < 50 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
