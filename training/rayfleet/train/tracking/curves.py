"""A run's curves as a PNG, without a server: loss, accuracy or perplexity, and throughput, against the
epoch (DDP) or the step (FSDP, DeepSpeed). Several runs of one kind share a figure, one colour per run.
The driver writes `curves.png` into the run directory at the end of each run; `make plot` draws any runs."""

from __future__ import annotations

import math
from pathlib import Path

FILE = "curves.png"

# x key -> panels: (title, y label, [(row key, line style, label suffix)], transform)
PANELS = {
    "epoch": [
        ("loss", "cross-entropy", [("train_loss", "-", "train"), ("test_loss", "--", "test")], None),
        ("test accuracy", "accuracy", [("test_accuracy", "-", "")], None),
        ("throughput", "images/s", [("images_per_s", "-", "")], None),
    ],
    "step": [
        ("loss", "cross-entropy", [("loss", "-", "")], None),
        ("perplexity", "exp(loss)", [("loss", "-", "")], math.exp),
        ("throughput", "tokens/s", [("tokens_per_s", "-", "")], None),
    ],
}


class NothingToPlot(ValueError):
    pass


def kind_of(rows: list[dict]) -> str:
    return "epoch" if rows and "epoch" in rows[0] else "step"


def draw(runs: dict[str, list[dict]], path: Path) -> Path:
    """runs: name -> metrics.jsonl rows. Writes the PNG to `path` and returns it."""
    import matplotlib.pyplot as plt

    fig = figure(runs)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def figure(runs: dict[str, list[dict]]):
    """The matplotlib Figure: one panel per PANELS entry, one colour per run."""
    runs = {name: rows for name, rows in runs.items() if rows}
    if not runs:
        raise NothingToPlot("no metrics to plot yet (metrics.jsonl is empty or missing)")
    kinds = {name: kind_of(rows) for name, rows in runs.items()}
    if len(set(kinds.values())) > 1:
        raise NothingToPlot(f"cannot put per-epoch and per-step runs on one figure: {kinds}")
    import matplotlib

    matplotlib.use("Agg")  # no display; also in a container
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    x_key = next(iter(kinds.values()))
    panels = PANELS[x_key]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (title, ylabel, lines, transform) in zip(axes[0], panels, strict=True):
        for colour, (name, rows) in enumerate(runs.items()):
            for key, style, suffix in lines:
                points = [(r[x_key], r[key]) for r in rows if r.get(key) is not None]
                if not points:
                    continue
                xs, ys = zip(*points, strict=True)
                ys = [transform(y) for y in ys] if transform else ys
                label = " ".join(part for part in (name, suffix) if part)
                ax.plot(xs, ys, style, color=f"C{colour}", marker="o", markersize=3, label=label)
        ax.set_title(title)
        ax.set_xlabel(x_key)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
