import math

import pytest

from rayfleet.train.tracking import curves

DDP = [
    {"epoch": e, "train_loss": 2.0 / e, "test_loss": 2.2 / e, "test_accuracy": 0.3 * e, "images_per_s": 100.0 + e}
    for e in (1, 2, 3)
]
FSDP = [{"step": s, "loss": 5.0 - s / 10, "tokens_per_s": 1000.0} for s in (10, 20, 30)]


def axes_of(figure):
    return [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) for ax in figure.axes]


def test_ddp_runs_plot_loss_accuracy_and_throughput_against_the_epoch():
    figure = curves.figure({"a": DDP, "b": DDP[:2]})
    assert axes_of(figure) == [
        ("loss", "epoch", "cross-entropy"),
        ("test accuracy", "epoch", "accuracy"),
        ("throughput", "epoch", "images/s"),
    ]
    loss = figure.axes[0]
    assert [line.get_label() for line in loss.get_lines()] == ["a train", "a test", "b train", "b test"]
    assert list(loss.get_lines()[0].get_ydata()) == [2.0, 1.0, 2.0 / 3]
    assert loss.get_lines()[0].get_color() != loss.get_lines()[2].get_color()  # one colour per run


def test_fsdp_runs_plot_loss_perplexity_and_tokens_against_the_step():
    figure = curves.figure({"f": FSDP})
    assert [t for t, _, _ in axes_of(figure)] == ["loss", "perplexity", "throughput"]
    assert {x for _, x, _ in axes_of(figure)} == {"step"}
    perplexity = figure.axes[1].get_lines()[0]
    assert list(perplexity.get_xdata()) == [10, 20, 30]
    assert list(perplexity.get_ydata()) == pytest.approx([math.exp(4.0), math.exp(3.0), math.exp(2.0)])


def test_the_png_is_written_and_renders_the_three_panels(tmp_path):
    import matplotlib.image

    path = curves.draw({"a": DDP}, tmp_path / "out" / "curves.png")
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (400, 1500)  # 15 x 4 inches at 100 dpi
    # Not blank: the lines and text drew something that is not the white background in each third.
    for third in range(3):
        panel = pixels[:, third * 500 : (third + 1) * 500, :3]
        assert (panel < 0.5).any(axis=2).mean() > 0.005


def test_what_cannot_be_plotted_is_refused_with_the_reason():
    with pytest.raises(curves.NothingToPlot, match="no metrics to plot yet"):
        curves.figure({"a": []})
    with pytest.raises(curves.NothingToPlot, match="per-epoch and per-step runs"):
        curves.figure({"a": DDP, "f": FSDP})
