"""bench.gpu's pure parts: the step benches' tables, the jobs' metrics rows, failure rows, the table, a stage
(the plan, its budget and the set-up: test_bench_gpu_plan.py).

No Ray and no training: the one subprocess here is a two-line Python (a stage's timeout and failure)."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

# The benchmarks are leaves that nothing imports (pyproject.toml's import contracts); this test of
# bench.gpu's pure parts loads them by name instead.
report = importlib.import_module("bench.gpu_report")
run = importlib.import_module("bench.gpu_run")

DDP_STEP_OUTPUT = """\
[W1126 08:00:00] Warning: something about NCCL
| variant | batch/dev | devices | images/s/dev | last loss | device |
|---|---|---|---|---|---|
| bf16-cl | 128 | 1 | 41,234 | 0.512 | NVIDIA H100 80GB HBM3 |
| bf16-cl-fullgraph | 128 | 1 | 88,001 | 0.498 | NVIDIA H100 80GB HBM3 |
"""

FSDP_OUTPUT = """\
some log line | with a bar
| shape | params | seq | batch/dev | devices | tokens/s/dev | TFLOP/s/dev | MFU | peak GiB | device |
|---|---|---|---|---|---|---|---|---|---|
| pythia-1.4b (no AC) +compile | 1,414.6M | 2048 | 8 | 1 | 31,500 | 312.40 | 31.6% | 51.2 | NVIDIA H100 80GB HBM3 |
"""


# ---- the benches' tables ----


def test_markdown_rows_reads_the_last_table_by_its_header():
    rows = report.markdown_rows(DDP_STEP_OUTPUT)
    assert [r["variant"] for r in rows] == ["bf16-cl", "bf16-cl-fullgraph"]
    assert rows[1]["images/s/dev"] == "88,001"
    assert report.markdown_rows("no table here\n| a |\n") == []


def test_ddp_bench_picks_the_variant_and_fails_clearly_without_it():
    assert report.ddp_bench(DDP_STEP_OUTPUT, "bf16-cl-fullgraph")["images_per_s"] == 88001
    with pytest.raises(report.BenchOutputError, match="bf16-cl-graphs"):
        report.ddp_bench(DDP_STEP_OUTPUT, "bf16-cl-graphs")


def test_fsdp_bench_reads_tokens_mfu_and_peak():
    result = report.fsdp_bench(FSDP_OUTPUT)
    assert result["tokens_per_s"] == 31500
    assert result["mfu"] == pytest.approx(0.316)
    assert result["peak_gib"] == 51.2
    cpu = FSDP_OUTPUT.replace("31.6%", "n/a").replace("| 51.2 |", "| - |")
    assert report.fsdp_bench(cpu)["mfu"] is None and report.fsdp_bench(cpu)["peak_gib"] is None
    with pytest.raises(report.BenchOutputError):
        report.fsdp_bench("Traceback ...\nRuntimeError: CUDA out of memory\n")


def test_number():
    assert report.number("12,345") == 12345
    assert report.number("45.5%") == pytest.approx(0.455)
    assert report.number("1.25x") == 1.25
    assert report.number("n/a") is None and report.number("-") is None and report.number(None) is None


# ---- the jobs' metrics rows ----


def test_ddp_job_is_the_mean_of_epochs_after_the_first():
    rows = [
        {"epoch": 1, "images_per_s": 10_000, "images_per_s_per_worker": 10_000, "test_accuracy": 0.7},
        {"epoch": 2, "images_per_s": 30_000, "images_per_s_per_worker": 30_000, "test_accuracy": 0.8},
        {"epoch": 3, "images_per_s": 40_000, "images_per_s_per_worker": 40_000, "test_accuracy": 0.85},
    ]
    result = report.ddp_job(rows)
    assert result["images_per_s"] == 35_000 and result["epochs"] == [2, 3] and result["warm"]
    assert result["first_images_per_s"] == 10_000 and result["test_accuracy"] == 0.85
    alone = report.ddp_job(rows[:1])
    assert alone["images_per_s"] == 10_000 and not alone["warm"]
    with pytest.raises(ValueError):
        report.ddp_job([])


def test_fsdp_job_means_after_the_first_row_and_takes_the_longest_checkpoint_pause():
    rows = [
        {"step": 10, "tokens_per_s_per_device": 1_000, "mfu": 0.1, "peak_memory_gib": 50.0},
        {"step": 20, "tokens_per_s_per_device": 30_000, "mfu": 0.3, "peak_memory_gib": 52.0, "checkpoint_pause_s": 4},
        {"step": 30, "tokens_per_s_per_device": 32_000, "mfu": 0.32, "peak_memory_gib": 52.0},
        {"step": 40, "tokens_per_s_per_device": 34_000, "mfu": 0.34, "peak_memory_gib": 51.0, "checkpoint_pause_s": 6},
    ]
    rows[2]["checkpoint_write_s"] = 11.5  # the one saved at step 20, written in the background
    result = report.fsdp_job(rows)
    assert result["tokens_per_s"] == 32_000 and result["mfu"] == pytest.approx(0.32)
    assert result["steps"] == [20, 30, 40] and result["peak_gib"] == 52.0
    assert result["checkpoint_pause_s"] == 6 and result["checkpoints"] == 2 and result["checkpoint_write_s"] == 11.5
    cpu = [{**r, "mfu": None, "peak_memory_gib": None} for r in rows[:2]]
    cpu[1].pop("checkpoint_pause_s")
    result = report.fsdp_job(cpu)
    assert result["mfu"] is None and result["peak_gib"] is None and result["checkpoint_pause_s"] is None


# ---- failures ----


def test_last_error_line_finds_the_error_not_the_noise_after_it():
    log = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 3, in <module>\n'
        "RuntimeError: CUDA error: an illegal memory access\n"
        "(raylet) some shutdown chatter\n"
    )
    assert report.last_error_line(log) == "RuntimeError: CUDA error: an illegal memory access"
    config = "run starting\nerror: invalid DDPConfig:\n  cuda_graph: Extra inputs are not permitted\n"
    assert report.last_error_line(config) == "error: invalid DDPConfig: cuda_graph: Extra inputs are not permitted"
    assert report.last_error_line("just\nlines\n") == "lines"
    assert report.last_error_line("") == "no output"
    assert len(report.last_error_line("error: " + "x" * 500)) == 160


def test_a_failure_is_one_escaped_table_cell():
    row = report.Row("DDP x", job=report.failed("exit 1: error: a | b\nsecond line"))
    assert row.cells()[1] == "failed: exit 1: error: a \\| b second line"
    assert report.table_line(row).count(" | ") == 4


def test_a_failed_job_keeps_what_its_rows_measured():
    ddp = [{"epoch": 1, "images_per_s_per_worker": 9_000}, {"epoch": 2, "images_per_s_per_worker": 30_000}]
    assert report.partial("failed: timeout", "ddp", ddp) == "failed: timeout; before it: 30,000 img/s (epochs 2)"
    fsdp = [{"step": s, "tokens_per_s_per_device": 1_000 * s} for s in (10, 20, 30)]
    assert report.partial("failed: x", "fsdp", fsdp) == "failed: x; before it: 25,000 tok/s/dev (steps 20-30)"
    assert report.partial("failed: x", "fsdp", []) == "failed: x"


# ---- rows and the table ----


def test_ddp_row_side_by_side_and_with_a_failed_bench():
    job = report.ddp_job(
        [
            {"epoch": 1, "images_per_s_per_worker": 10_000, "test_accuracy": 0.7},
            {"epoch": 2, "images_per_s_per_worker": 44_000, "test_accuracy": 0.81},
        ]
    )
    bench = report.ddp_bench(DDP_STEP_OUTPUT, "bf16-cl-fullgraph")
    row = report.ddp_row("DDP graph, batch 128", job, bench)
    assert (row.job, row.bench, row.ratio) == ("44,000 img/s", "88,001 img/s", "0.50x")
    assert "test acc 0.8100" in row.notes and "epoch 1 10,000 img/s" in row.notes
    failed = report.ddp_row("DDP graph, batch 128", job, "failed: exit 2: unknown variant")
    assert failed.bench == "failed: exit 2: unknown variant" and failed.ratio == "-" and failed.job == "44,000 img/s"


def test_fsdp_and_checkpoint_rows():
    rows = [
        {"step": 10, "tokens_per_s_per_device": 1_000, "mfu": 0.1, "peak_memory_gib": 50.0},
        {"step": 20, "tokens_per_s_per_device": 31_500, "mfu": 0.3, "peak_memory_gib": 52.0},
    ]
    job = report.fsdp_job(rows)
    row = report.fsdp_row("FSDP", job, report.fsdp_bench(FSDP_OUTPUT))
    assert (row.job, row.bench, row.ratio) == ("31,500 tok/s/dev", "31,500 tok/s/dev", "1.00x")
    assert "MFU 30.0%" in row.notes and "MFU 31.6%" in row.notes and "52.0 GiB" in row.notes
    assert report.checkpoint_row("pause", job).job == "n/a"
    saved = report.checkpoint_row("pause", {**job, "checkpoint_pause_s": 7.25, "checkpoints": 2})
    assert saved.job == "7.25 s" and "max over 2 checkpoint(s)" in saved.notes and "background" not in saved.notes
    written = report.checkpoint_row(
        "pause", {**job, "checkpoint_pause_s": 0.5, "checkpoints": 1, "checkpoint_write_s": 9}
    )
    assert written.job == "0.50 s" and "in the background in up to 9.0 s" in written.notes
    assert report.checkpoint_row("pause", "failed: timeout").job == "failed: timeout"


def test_render_has_one_table_under_the_header():
    text = report.render("T", ["- device: X"], [report.Row("a", "1", "2", "0.50x", "n")], ["footer"])
    lines = text.splitlines()
    assert lines[0] == "# T" and "- device: X" in lines
    table = [line for line in lines if line.startswith("|")]
    assert table[0] == "| what | job through Ray Train | step bench | job / bench | notes |"
    assert table[1] == "|---|---|---|---|---|" and table[2] == "| a | 1 | 2 | 0.50x | n |"
    assert lines[-1] == "footer"


def test_the_document_is_written_after_every_row(tmp_path, capsys):
    out, logs = tmp_path / "t.md", tmp_path / "t"
    logs.mkdir()
    doc = run.Document(out, logs, ["- h"])
    assert "| what |" in out.read_text()
    doc.add(report.Row("first", job="1"), {"key": "first"})
    assert "| first | 1 |" in out.read_text()
    assert json.loads((logs / "results.json").read_text()) == [{"key": "first"}]
    doc.finish(["done"])
    assert out.read_text().endswith("done\n")
    assert "| first | 1 | - | - | - |" in capsys.readouterr().out


# ---- stages ----


def test_a_stage_that_fails_or_hangs_becomes_a_failure(tmp_path):
    clock = run.Clock()
    fails = run.Step("x", "ddp-bench", ("-c", "print('error: boom'); print('bye'); raise SystemExit(3)"), 30)
    outcome = run.run_step(fails, {}, tmp_path / "x.log", 30, clock)
    assert not outcome.ok and outcome.error == "exit 3: error: boom"
    hangs = run.Step("y", "ddp-bench", ("-c", "import time; print('waiting', flush=True); time.sleep(60)"), 1)
    outcome = run.run_step(hangs, {}, tmp_path / "y.log", 1, clock)
    assert not outcome.ok and outcome.error == "timeout after 1 s (last: waiting)"
    ok = run.run_step(run.Step("z", "probe", ("-c", "print('ok')"), 30), {}, tmp_path / "z.log", 30, clock)
    assert ok.ok and "ok" in ok.output and (tmp_path / "z.log").read_text().startswith(f"$ {sys.executable}")
