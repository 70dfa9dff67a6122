"""Plot axes fit the data: a rise from 2% to 16% fills the accuracy plot, a lone evaluation is a
marked dot in a unit range of epochs, not a speck on matplotlib's +-4% axis."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit import plots


@pytest.fixture
def figures(monkeypatch):
    """Every figure `plots` saves, by file name, instead of writing PNGs."""
    saved = {}
    monkeypatch.setattr(plots, "save_figure", lambda fig, dest, dpi=100: saved.__setitem__(Path(dest).name, fig))
    yield saved
    plt = plots.pyplot()
    for fig in saved.values():
        plt.close(fig)


def test_pretraining_accuracy_axis_follows_the_values(figures, tmp_path):
    records = [{"kind": "val", "step": s, "loss": 5.0, "mlm_accuracy": a}
               for s, a in ((100, 0.02), (200, 0.09), (300, 0.16))]
    plots.write_plots(records, tmp_path)
    low, high = figures["accuracy.png"].axes[0].get_ylim()
    assert 0.0 <= low < 0.02 and 0.16 < high < 0.2, (low, high)


def test_one_evaluation_is_a_visible_marked_point(figures, tmp_path):
    run = {"seed": 1, "train_loss": [0.7], "evals": [{"epoch": 1, "accuracy": 0.82}]}
    plots.plot_finetuning([run], "accuracy", tmp_path)
    for name in ("dev_accuracy.png", "train_loss.png"):
        ax = figures[name].axes[0]
        (line,) = ax.lines
        assert line.get_marker() == "o" and line.get_markersize() >= 6, name
        assert ax.get_xlim() == (0.0, 2.0), name
    low, high = figures["dev_accuracy.png"].axes[0].get_ylim()
    assert low < 0.82 < high and high - low == pytest.approx(2 * 0.05 * 0.82), (low, high)
