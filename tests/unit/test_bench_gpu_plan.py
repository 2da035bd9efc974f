"""bench.gpu's plan (which pairs run, in what order, with what settings), its budget, its command line and
the set-up it builds on the machine. No Ray and no training."""

from __future__ import annotations

import importlib
import json
from argparse import Namespace
from pathlib import Path

import pytest

# The benchmarks are leaves that nothing imports (pyproject.toml's import contracts): loaded by name.
gpu = importlib.import_module("bench.gpu")
plan_mod = importlib.import_module("bench.gpu_plan")
run = importlib.import_module("bench.gpu_run")
setup = importlib.import_module("bench.gpu_setup")


def _settings(device="cuda", **kw) -> object:
    args = Namespace(shape=None, ddp_batches=None, only=frozenset({"ddp", "fsdp"}), work=Path("/w"), cpus=16)
    args.budget, args.timeouts, args.keep_checkpoints = None, (), False
    for key, value in kw.items():
        setattr(args, key, value)
    return gpu.settings_from(args, device, stamp="S")


def test_the_budget_clips_timeouts_and_skips_optional_pairs():
    step = run.Step("s", "ddp-job", (), 300, 60)
    runner = run.Runner(_settings(), run.Clock(0), Path("/tmp"))
    assert runner.budget(step) == (300, "")
    runner.clock.elapsed = lambda: 0.0  # the budget's clock held still: 100 s of budget are 100 s left
    runner.clock.budget_s = 100
    timeout, why = runner.budget(step)
    assert timeout == 100 and why == ""
    timeout, why = runner.budget(step, optional_need=150)
    assert timeout is None and why.startswith("skipped:")
    runner.clock.budget_s = runner.clock.elapsed() + 5
    assert runner.budget(step)[1].startswith("skipped:")


# ---- the plan ----


def test_the_gpu_plan_runs_tier_one_first_and_the_extra_batch_last():
    pairs = plan_mod.plan(_settings())
    assert [p.key for p in pairs] == [
        "ddp-eager-b128",
        "ddp-graph-b128",
        "fsdp-base",
        "ddp-compile-ro-b128",
        "ddp-compile-b128",
        "fsdp-accum2",
        "ddp-graph-b256",
    ]
    assert [p.optional for p in pairs] == [False] * 6 + [True]
    graph = pairs[1]
    assert graph.bench.argv[-2:] == ("--variants", "bf16-cl-fullgraph") and graph.bench_variant == "bf16-cl-fullgraph"
    assert {"cuda_graph=true", "epochs=3", "num_workers=1", "device=cuda", "data_dir=/w/data"} <= set(graph.job.argv)
    assert graph.job.argv[:2] == ("-m", "rayfleet.train.ddp") and graph.job.run_name == "S-ddp-graph-b128"
    compiled = set(pairs[3].job.argv)
    assert {"compile=true", "compile_mode=reduce-overhead", "cuda_graph=false"} <= compiled
    base, accum = pairs[2], pairs[5]
    assert base.checkpoint_row and accum.checkpoint_row  # both report their pause
    assert {"--compile", "--no-ac", "--seq-len", "2048", "--batch", "8"} <= set(base.bench.argv)
    assert accum.bench.argv[-2:] == ("--grad-accum", "2")
    keys = {"seq_len=2048", "micro_batch_size=8", "activation_checkpointing=false", "compile=true", "export=false"}
    keys |= {"max_steps=40", "warmup_steps=5", "log_every=10", "checkpoint_every=20", "grad_accum=1"}
    assert keys <= set(base.job.argv) and "model=/w/models/pythia-1.4b" in base.job.argv
    assert "grad_accum=2" in accum.job.argv and "grad_accum=1" not in accum.job.argv
    assert "checkpoint_every=20" in accum.job.argv  # saves at the step that is measured for MFU


def test_the_cpu_plan_is_tiny_and_only_runs_what_cpus_can():
    s = _settings("cpu")
    assert s.shape == "tiny" and s.budget_s == 900
    pairs = plan_mod.plan(s)
    assert [p.key for p in pairs] == ["ddp-eager-b32", "fsdp-base", "fsdp-accum2"]
    assert {"device=cpu", "train_subset=2000", "epochs=2", "batch_size=32"} <= set(pairs[0].job.argv)
    assert {"compile=false", "max_steps=6", "seq_len=128"} <= set(pairs[1].job.argv)
    assert "--compile" not in pairs[1].bench.argv


def test_only_timeouts_and_the_setup_steps():
    s = _settings(only=frozenset({"fsdp"}), timeouts=(("fsdp-job", 99.0), ("fsdp-base-job", 77.0)))
    pairs = plan_mod.plan(s)
    assert [p.family for p in pairs] == ["fsdp", "fsdp"]
    assert pairs[0].job.timeout_s == 77 and pairs[1].job.timeout_s == 99 and pairs[0].bench.timeout_s == 300
    steps = plan_mod.setup_steps(s)
    assert [step.key for step in steps] == ["model"]
    assert s.model_spec()["blocks"] == 40 * 8 * 2  # max_steps x micro batch x the largest grad_accum
    assert steps[0].argv[-4:] == ("--seq-len", "2048", "--blocks", "640")
    assert [step.key for step in plan_mod.setup_steps(_settings(only=frozenset({"ddp"})))] == ["data"]


def test_parse_args_rejects_unknown_families_and_bad_timeouts(capsys):
    assert gpu.parse_args(["--only", "fsdp", "--timeout", "model=60"]).timeouts == (("model", 60.0),)
    with pytest.raises(SystemExit):
        gpu.parse_args(["--only", "ddp,zero"])
    with pytest.raises(SystemExit):
        gpu.parse_args(["--timeout", "model"])


def test_dry_run_lists_every_stage_with_its_timeout(capsys):
    assert gpu.main(["--dry-run", "--device", "cuda", "--work", "/w"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines][:4] == ["data", "model", "ddp-eager-b128-bench", "ddp-eager-b128-job"]
    assert lines[-1].split()[:3] == ["ddp-graph-b256-job", "300", "s"]


def test_pairs_pick_rows_in_their_order_and_only_their_set_up(capsys):
    argv = ["--dry-run", "--device", "cuda", "--work", "/w", "--pairs", "fsdp-accum2,ddp-compile-ro-b128"]
    assert gpu.main(argv) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert keys[:4] == ["data", "model", "fsdp-accum2-bench", "fsdp-accum2-job"]
    assert keys[4:] == ["ddp-compile-ro-b128-bench", "ddp-compile-ro-b128-job"]
    assert gpu.main(["--dry-run", "--device", "cuda", "--work", "/w", "--pairs", "fsdp-base"]) == 0
    assert next(line.split()[0] for line in capsys.readouterr().out.splitlines()) == "model"  # no DDP data
    with pytest.raises(SystemExit) as exited:
        gpu.main(["--dry-run", "--device", "cuda", "--pairs", "fsdp-base,ddp-nope"])
    assert exited.value.code == 2 and "no pair ddp-nope" in capsys.readouterr().err


# ---- set-up ----


def test_setup_sizes_the_corpus_and_reuses_only_a_complete_build(tmp_path):
    assert setup.lines_for(blocks=640, seq_len=2048, tokens=46_000, lines=6000) >= 640 * 2048 * 6000 / 46_000
    spec = setup.wanted("tiny", 128, 48)
    model_dir, corpus = tmp_path / "m", tmp_path / "c.txt"
    assert not setup.is_built(model_dir, corpus, spec)
    model_dir.mkdir()
    corpus.write_text("text")
    (model_dir / setup.MARKER).write_text(json.dumps({**spec, "blocks": 60}))
    assert setup.is_built(model_dir, corpus, spec)
    assert not setup.is_built(model_dir, corpus, {**spec, "blocks": 61})
    assert not setup.is_built(model_dir, corpus, setup.wanted("tiny", 256, 48))
