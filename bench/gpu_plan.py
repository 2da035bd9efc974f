"""What bench.gpu runs: the variants (edit them here), the settings per --device and --shape, the stage list.

Pairs run by tier, in list order within a tier: tier 1 (the figures that matter most), then tier 2, both
required (a short budget clips their timeouts); then tier 3, optional (the extra --ddp-batches), each run
only if the budget still leaves its usual time. On an H100 with the default 420 s budget expect tier 1 to fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench import gpu_setup
from bench.gpu_run import Step


@dataclass(frozen=True)
class DDPVariant:
    key: str
    label: str
    job: tuple[str, ...]  # rayfleet.train.ddp overrides
    bench: str  # bench.ddp_step --variants
    tier: int = 1
    cpu: bool = False  # also in --device cpu runs
    more_batches: bool = False  # also at the further --ddp-batches (tier 3: if the budget allows)


@dataclass(frozen=True)
class FSDPVariant:
    key: str
    label: str
    job: tuple[str, ...]  # rayfleet.train.fsdp overrides, over the base ones in plan()
    bench: tuple[str, ...]  # bench.fsdp_throughput flags, over the base ones
    tier: int = 1
    checkpoint_row: bool = False  # the job's longest checkpoint pause in a row of its own


DDP_VARIANTS = (
    DDPVariant("eager", "eager bf16", ("cuda_graph=false",), "bf16-cl", cpu=True),
    DDPVariant("graph", "whole-step CUDA graph", ("cuda_graph=true",), "bf16-cl-fullgraph", more_batches=True),
    DDPVariant(
        "compile-ro",
        "compile reduce-overhead",
        ("compile=true", "compile_mode=reduce-overhead", "cuda_graph=false"),
        "bf16-cl-graphs",
        tier=2,
    ),
    # torch.compile's default mode (no CUDA graphs): the other mode issue 33 asks never to crash.
    DDPVariant("compile", "compile default", ("compile=true", "cuda_graph=false"), "bf16-cl-compile", tier=2),
)
FSDP_VARIANTS = (
    FSDPVariant("base", "", (), (), checkpoint_row=True),
    # Checkpoints as often as the base job's, so the pause is measured at the step that passes 50% MFU too.
    FSDPVariant("accum2", ", grad-accum 2", ("grad_accum=2",), ("--grad-accum", "2"), 2, checkpoint_row=True),
)
OPTIONAL_TIER = 3


@dataclass(frozen=True)
class Profile:
    """What --device changes: the DDP job's size, the benches' step counts, the FSDP job's steps, compile."""

    ddp_batches: str
    ddp_job: tuple[str, ...]
    ddp_bench: tuple[str, ...]
    fsdp_job: tuple[str, ...]
    fsdp_bench: tuple[str, ...]
    fsdp_steps: int
    budget_s: float


PROFILES = {
    "cuda": Profile(
        ddp_batches="128,256",
        ddp_job=("epochs=3",),
        ddp_bench=(),
        fsdp_job=("compile=true", "max_steps=40", "warmup_steps=5", "log_every=10", "checkpoint_every=20"),
        fsdp_bench=("--compile", "--steps", "10", "--warmup", "3"),
        fsdp_steps=40,
        budget_s=420,
    ),
    "cpu": Profile(
        ddp_batches="32",
        ddp_job=("epochs=2", "train_subset=2000", "test_subset=1000"),
        ddp_bench=("--steps", "20", "--warmup", "3"),
        fsdp_job=("compile=false", "max_steps=6", "warmup_steps=1", "log_every=2", "checkpoint_every=3"),
        fsdp_bench=("--steps", "3", "--warmup", "1"),
        fsdp_steps=6,
        budget_s=900,
    ),
}
SIZES = {"pythia-1.4b": (2048, 8), "tiny": (128, 4)}  # --shape: the FSDP seq_len, micro batch per device
# Seconds per kind of stage: the timeout on cuda, on cpu; the usual time on an H100 (tier 3's budget test).
TIMEOUTS = {
    "probe": (180, 180, 10),
    "data": (180, 180, 10),
    "model": (420, 300, 40),
    "ddp-bench": (240, 300, 40),
    "ddp-job": (300, 300, 60),
    "fsdp-bench": (300, 300, 90),
    "fsdp-job": (420, 420, 150),
}


@dataclass(frozen=True)
class Settings:
    device: str
    shape: str
    ddp_batches: tuple[int, ...]
    only: frozenset[str]
    work: Path
    cpus: float
    budget_s: float
    stamp: str
    timeouts: tuple[tuple[str, float], ...] = ()
    keep_checkpoints: bool = False

    @property
    def profile(self) -> Profile:
        return PROFILES[self.device]

    @property
    def data_dir(self) -> Path:
        return self.work / "data"

    def model_paths(self) -> tuple[Path, Path]:
        return self.work / "models" / self.shape, self.work / "text" / f"{self.shape}.txt"

    def model_spec(self) -> dict:
        """The model folder and corpus: enough blocks that no FSDP job reads one twice."""
        seq_len, micro = SIZES[self.shape]
        accum = max(int(_overrides(v.job).get("grad_accum", 1)) for v in FSDP_VARIANTS)
        return gpu_setup.wanted(self.shape, seq_len, self.profile.fsdp_steps * micro * accum)

    def data_present(self) -> bool:
        from rayfleet.train.data.layout import is_synthetic, missing_files

        return not missing_files(self.data_dir) and is_synthetic(self.data_dir)  # the marker is written last

    def step(self, key: str, kind: str, argv: list[str], run_name: str | None = None) -> Step:
        given = dict(self.timeouts)
        on_cuda, on_cpu, typical = TIMEOUTS[kind]
        default = on_cuda if self.device == "cuda" else on_cpu
        return Step(key, kind, tuple(argv), given.get(key, given.get(kind, default)), typical, run_name)

    def describe(self) -> str:
        seq_len, micro = SIZES[self.shape]
        budget = f"budget {self.budget_s:.0f} s" if self.budget_s else "no time budget"
        return (
            f"--device {self.device}; DDP batch {'/'.join(map(str, self.ddp_batches))} per device, "
            f"{' '.join(self.profile.ddp_job)}; FSDP {self.shape}, seq_len {seq_len} x {micro} per device, no "
            f"activation checkpointing, {' '.join(self.profile.fsdp_job)}; {budget}"
        )


@dataclass(frozen=True)
class Pair:
    """One table row: a step bench and the job it isolates."""

    key: str
    family: str  # ddp, fsdp
    what: str
    bench: Step
    job: Step
    tier: int = 1
    bench_variant: str | None = None
    checkpoint_row: bool = False

    @property
    def optional(self) -> bool:
        return self.tier >= OPTIONAL_TIER


def _overrides(items) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items)


def _render(overrides: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in overrides.items()]


def setup_steps(s: Settings) -> list[Step]:
    steps = []
    if "ddp" in s.only:
        argv = ["-m", "rayfleet.train.data.synthetic", str(s.data_dir), "--train", "60000", "--test", "10000"]
        steps.append(s.step("data", "data", argv))
    if "fsdp" in s.only:
        model_dir, corpus = s.model_paths()
        spec = s.model_spec()
        argv = ["-m", "bench.gpu_setup", "--model-dir", str(model_dir), "--corpus", str(corpus)]
        argv += ["--shape", s.shape, "--seq-len", str(spec["seq_len"]), "--blocks", str(spec["blocks"])]
        steps.append(s.step("model", "model", argv))
    return steps


def plan(s: Settings) -> list[Pair]:
    """The pairs in the order they run (by tier; DDP before FSDP within one)."""
    common = {"num_workers": "1", "cpus_per_worker": f"{s.cpus:g}", "device": s.device, "max_failures": "0"}
    common |= {"keep_checkpoints": "1", "storage": str(s.work / "runs")}
    pairs = []
    if "ddp" in s.only:
        for i, batch in enumerate(s.ddp_batches):
            for v in DDP_VARIANTS:
                if (s.device == "cpu" and not v.cpu) or (i > 0 and not v.more_batches):
                    continue
                key = f"ddp-{v.key}-b{batch}"
                bench = ["-m", "bench.ddp_step", "--device", s.device, "--batch", str(batch), "--variants", v.bench]
                job = common | {"data_dir": str(s.data_dir), "batch_size": str(batch)}
                job |= _overrides(s.profile.ddp_job) | _overrides(v.job) | {"run_name": f"{s.stamp}-{key}"}
                pairs.append(
                    Pair(
                        key,
                        "ddp",
                        f"DDP {v.label}, batch {batch}",
                        s.step(f"{key}-bench", "ddp-bench", [*bench, *s.profile.ddp_bench]),
                        s.step(f"{key}-job", "ddp-job", ["-m", "rayfleet.train.ddp", *_render(job)], job["run_name"]),
                        tier=OPTIONAL_TIER if i > 0 else v.tier,
                        bench_variant=v.bench,
                    )
                )
    if "fsdp" in s.only:
        seq_len, micro = SIZES[s.shape]
        model_dir, corpus = s.model_paths()
        for v in FSDP_VARIANTS:
            key = f"fsdp-{v.key}"
            bench = ["-m", "bench.fsdp_throughput", "--shape", s.shape, "--seq-len", str(seq_len)]
            bench += ["--batch", str(micro), "--no-ac", *s.profile.fsdp_bench, *v.bench]
            job = common | {"model": str(model_dir), "data": str(corpus), "seq_len": str(seq_len)}
            job |= {"micro_batch_size": str(micro), "grad_accum": "1", "activation_checkpointing": "false"}
            job |= {"export": "false", **_overrides(s.profile.fsdp_job), **_overrides(v.job)}
            job["run_name"] = f"{s.stamp}-{key}"
            pairs.append(
                Pair(
                    key,
                    "fsdp",
                    f"FSDP {s.shape}, seq {seq_len} x {micro}{v.label}",
                    s.step(f"{key}-bench", "fsdp-bench", bench),
                    s.step(f"{key}-job", "fsdp-job", ["-m", "rayfleet.train.fsdp", *_render(job)], job["run_name"]),
                    tier=v.tier,
                    checkpoint_row=v.checkpoint_row,
                )
            )
    return sorted(pairs, key=lambda p: p.tier)  # stable: the list order within a tier
