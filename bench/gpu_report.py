"""bench.gpu's pure half: reading the step benches' tables and the jobs' metrics rows, and the one table.

No torch, no Ray, no subprocess: what tests/unit/test_bench_gpu.py checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COLUMNS = ("what", "job through Ray Train", "step bench", "job / bench", "notes")
_SEPARATOR = re.compile(r"^\s*\|(\s*:?-{3,}:?\s*\|)+\s*$")
_ERROR = re.compile(r"(^error\b|error:|Error\b|Exception\b|\bfailed\b|Traceback|Killed|CUDA out of memory)", re.I)
_NOISE = re.compile(r"^(\s*File \"|\s*\^+\s*$|\s*~+\s*$)")


class BenchOutputError(ValueError):
    """A step bench exited 0 but its table lacks what was asked for."""


@dataclass
class Row:
    what: str
    job: str = "-"
    bench: str = "-"
    ratio: str = "-"
    notes: str = ""

    def cells(self) -> tuple[str, ...]:
        return tuple(_cell(c) for c in (self.what, self.job, self.bench, self.ratio, self.notes))


# ---- the step benches' tables -------------------------------------------------------------------------------


def markdown_rows(text: str) -> list[dict[str, str]]:
    """The rows of the last markdown table in `text` (a header, a |---| line, rows), keyed by the header."""
    lines = text.splitlines()
    tables: list[list[dict[str, str]]] = []
    i = 0
    while i < len(lines) - 1:
        if lines[i].lstrip().startswith("|") and _SEPARATOR.match(lines[i + 1]):
            header, rows, j = _split(lines[i]), [], i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                rows.append(dict(zip(header, _split(lines[j]), strict=False)))
                j += 1
            tables.append(rows)
            i = j
        else:
            i += 1
    return tables[-1] if tables else []


def _split(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def number(cell: str | None) -> float | None:
    """'12,345' -> 12345.0, '45.1%' -> 0.451, '-' / 'n/a' / '' -> None."""
    if cell is None:
        return None
    text = cell.strip().replace(",", "")
    percent = text.endswith("%")
    try:
        value = float(text.rstrip("%x"))
    except ValueError:
        return None
    return value / 100 if percent else value


def ddp_bench(text: str, variant: str) -> dict:
    """bench.ddp_step's row for `variant`: images/s per device, last loss, device."""
    for row in markdown_rows(text):
        if row.get("variant") == variant:
            rate = number(row.get("images/s/dev"))
            if rate is None:
                break
            return {"images_per_s": rate, "loss": row.get("last loss", ""), "device": row.get("device", "")}
    raise BenchOutputError(f"bench.ddp_step printed no images/s row for variant {variant!r}")


def fsdp_bench(text: str) -> dict:
    """bench.fsdp_throughput's (first) row: tokens/s per device, TFLOP/s, MFU, peak GiB."""
    for row in markdown_rows(text):
        rate = number(row.get("tokens/s/dev"))
        if rate is not None:
            return {
                "tokens_per_s": rate,
                "tflops": number(row.get("TFLOP/s/dev")),
                "mfu": number(row.get("MFU")),
                "peak_gib": number(row.get("peak GiB")),
                "shape": row.get("shape", ""),
            }
    raise BenchOutputError("bench.fsdp_throughput printed no tokens/s row")


# ---- the jobs' metrics.jsonl rows ---------------------------------------------------------------------------


def steady(rows: list[dict]) -> list[dict]:
    """The rows after the first (whose window includes warm-up and compilation); the first if it is alone."""
    return rows[1:] or rows


def mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def ddp_job(rows: list[dict]) -> dict:
    """The DDP job's figure: images/s per worker, mean of epochs 2..N; the last epoch's test accuracy."""
    if not rows:
        raise ValueError("the job wrote no metrics rows")
    kept = steady(rows)
    return {
        "images_per_s": mean([r.get("images_per_s_per_worker", r.get("images_per_s")) for r in kept]),
        "first_images_per_s": rows[0].get("images_per_s_per_worker", rows[0].get("images_per_s")),
        "epochs": [r.get("epoch") for r in kept],
        "warm": len(rows) > 1,
        "test_accuracy": rows[-1].get("test_accuracy"),
        "train_loss": rows[-1].get("train_loss"),
    }


def fsdp_job(rows: list[dict]) -> dict:
    """The FSDP job's figure: tokens/s per device and MFU, mean over the logged rows after the first; the
    peak memory and the longest checkpoint pause (rows that report `checkpoint_pause_s`)."""
    if not rows:
        raise ValueError("the job wrote no metrics rows")
    kept = steady(rows)
    pauses = [r["checkpoint_pause_s"] for r in rows if r.get("checkpoint_pause_s") is not None]
    writes = [r["checkpoint_write_s"] for r in rows if r.get("checkpoint_write_s") is not None]
    return {
        "tokens_per_s": mean([r.get("tokens_per_s_per_device") for r in kept]),
        "mfu": mean([r.get("mfu") for r in kept]),
        "peak_gib": max((r["peak_memory_gib"] for r in rows if r.get("peak_memory_gib") is not None), default=None),
        "steps": [r.get("step") for r in kept],
        "warm": len(rows) > 1,
        "loss": rows[-1].get("loss"),
        "checkpoint_pause_s": max(pauses) if pauses else None,
        "checkpoints": len(pauses),
        "checkpoint_write_s": max(writes) if writes else None,
    }


# ---- failures -----------------------------------------------------------------------------------------------


def last_error_line(text: str) -> str:
    """The last line that reads like an error (else the last non-empty line), shortened to one table cell."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not _NOISE.match(line)]
    for i in range(len(lines) - 1, -1, -1):
        if _ERROR.search(lines[i]):
            line = lines[i]
            if line.endswith(":") and i + 1 < len(lines):  # "error: invalid DDPConfig:" + the problem below it
                line = f"{line} {lines[i + 1]}"
            return _shorten(line)
    return _shorten(lines[-1]) if lines else "no output"


def failed(reason: str) -> str:
    return f"failed: {_shorten(reason)}"


def partial(failure: str, family: str, rows: list[dict]) -> str:
    """A failed job's cell, with what its metrics rows measured before it failed (if any)."""
    if not rows:
        return failure
    if family == "ddp":
        figure = ddp_job(rows)
        return f"{failure}; before it: {figure['images_per_s']:,.0f} img/s (epochs {_span(figure['epochs'])})"
    figure = fsdp_job(rows)
    return f"{failure}; before it: {figure['tokens_per_s']:,.0f} tok/s/dev (steps {_span(figure['steps'])})"


def _span(values: list) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _shorten(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|") or "-"


# ---- the rows -----------------------------------------------------------------------------------------------


def ratio(job: float | None, bench: float | None) -> str:
    return f"{job / bench:.2f}x" if job and bench else "-"


def pct(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "n/a"


def ddp_row(what: str, job: dict | str, bench: dict | str) -> Row:
    """`job` / `bench`: the figures, or a failure text."""
    row = Row(what)
    notes = []
    if isinstance(job, dict):
        row.job = f"{job['images_per_s']:,.0f} img/s"
        epochs = job["epochs"]
        span = f"epoch{'s' if len(epochs) > 1 else ''} {_span(epochs)}"
        notes.append(f"job: {span} mean" + ("" if job["warm"] else " (includes warm-up)"))
        notes.append(f"epoch 1 {job['first_images_per_s']:,.0f} img/s")
        if job.get("test_accuracy") is not None:
            notes.append(f"test acc {job['test_accuracy']:.4f}")
    else:
        row.job = job
    if isinstance(bench, dict):
        row.bench = f"{bench['images_per_s']:,.0f} img/s"
    else:
        row.bench = bench
    if isinstance(job, dict) and isinstance(bench, dict):
        row.ratio = ratio(job["images_per_s"], bench["images_per_s"])
    row.notes = "; ".join(notes)
    return row


def fsdp_row(what: str, job: dict | str, bench: dict | str) -> Row:
    row = Row(what)
    notes = []
    if isinstance(job, dict):
        row.job = f"{job['tokens_per_s']:,.0f} tok/s/dev"
        steps = job["steps"]
        notes.append(
            f"job: MFU {pct(job['mfu'])}, peak {_gib(job['peak_gib'])}, mean of the rows at steps "
            f"{', '.join(str(s) for s in steps)}" + ("" if job["warm"] else " (includes compile)")
        )
    else:
        row.job = job
    if isinstance(bench, dict):
        row.bench = f"{bench['tokens_per_s']:,.0f} tok/s/dev"
        notes.append(f"bench: MFU {pct(bench['mfu'])}, peak {_gib(bench['peak_gib'])}")
    else:
        row.bench = bench
    if isinstance(job, dict) and isinstance(bench, dict):
        row.ratio = ratio(job["tokens_per_s"], bench["tokens_per_s"])
    row.notes = "; ".join(notes)
    return row


def checkpoint_row(what: str, job: dict | str) -> Row:
    row = Row(what)
    if not isinstance(job, dict):
        row.job = job
    elif job["checkpoint_pause_s"] is None:
        row.job = "n/a"
        row.notes = "the job's metrics rows have no checkpoint_pause_s"
    else:
        row.job = f"{job['checkpoint_pause_s']:.2f} s"
        row.notes = f"the loop held up while saving: max over {job['checkpoints']} checkpoint(s)"
        if job.get("checkpoint_write_s") is not None:
            row.notes += f"; written in the background in up to {job['checkpoint_write_s']:.1f} s"
    return row


def _gib(value: float | None) -> str:
    return f"{value:.1f} GiB" if value is not None else "n/a"


# ---- the table ----------------------------------------------------------------------------------------------


def table_header() -> list[str]:
    return [_line(COLUMNS), "|" + "|".join("---" for _ in COLUMNS) + "|"]


def table_line(row: Row) -> str:
    return _line(row.cells())


def _line(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def render(title: str, header: list[str], rows: list[Row], footer: list[str] = ()) -> str:
    """The markdown document: a title, the header lines (device, versions, date, command), the table."""
    lines = [f"# {title}", "", *header, "", *table_header(), *(table_line(r) for r in rows)]
    if footer:
        lines += ["", *footer]
    return "\n".join(lines) + "\n"
