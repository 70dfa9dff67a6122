"""Every PNG bertkit draws, with matplotlib's Agg backend, each file written atomically.

- pretraining: loss.png (training loss per logging step, validation loss per evaluation) and
  accuracy.png (validation MLM or next-token accuracy, NSP accuracy; ELECTRA's discriminator at
  replaced and at original tokens), redrawn at each
  evaluation so a person can watch a run by reloading an image;
- fine-tuning: train_loss.png (loss per step, one line per seed) and dev_<metric>.png (at each
  evaluation: per epoch, or every --eval-every steps), for bertkit's loop and transformers' Trainer;
- ablations: one PNG per table (`plot_ablation_table`), our medians beside the paper's figures.
- hyper-parameter search: trials.png (`plot_trials`), each trial's dev metric by trial and by lr.

Accuracy and dev-metric axes fit the data (`_fit_y`), not a fixed 0-1: a rise from 2% to 16% fills
the plot instead of hugging its floor, and a lone evaluation is a marked dot in a range around it.
"""

from __future__ import annotations

import math
from pathlib import Path

from bertkit.io import atomic_path


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, dest: str | Path, dpi: int = 100) -> None:
    plt = pyplot()
    with atomic_path(dest) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)


def _series(records: list[dict], kind: str, key: str) -> tuple[list[int], list[float]]:
    rows = [r for r in records if r.get("kind") == kind and r.get(key) is not None]
    return [r["step"] for r in rows], [r[key] for r in rows]


def _line(ax, x, y, **style) -> None:
    """`ax.plot`, with a marker when there is one point (a line of one point draws nothing)."""
    if len(x) == 1:
        style = {**style, "marker": style.get("marker") or "o", "markersize": max(style.get("markersize", 0), 6)}
    ax.plot(x, y, **style)


def _fit(ax, values: list[float]) -> None:
    """Y limits from the data: its range plus 8% each side (5% of the value, at least 0.01, around a
    single value), never below 0 for a metric that is never negative; one step on x gets a unit
    range around it instead of matplotlib's +-4%."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return
    lo, hi = min(values), max(values)
    pad = 0.08 * (hi - lo) if hi > lo else max(0.05 * abs(hi), 0.01)
    ax.set_ylim(max(0.0, lo - pad) if lo >= 0 else lo - pad, hi + pad)
    xs = {x for line in ax.lines for x in line.get_xdata()}
    if len(xs) == 1:
        x = xs.pop()
        ax.set_xlim(x - 1, x + 1)


def write_plots(records: list[dict], run_dir: str | Path) -> None:
    """Draw a pretraining run's loss.png and accuracy.png from its train/val metric records."""
    plt = pyplot()
    run_dir = Path(run_dir)
    fig, ax = plt.subplots(figsize=(7, 4))
    for kind, key, label in (("train", "loss", "train loss"), ("val", "loss", "val loss")):
        x, y = _series(records, kind, key)
        if x:
            _line(ax, x, y, label=label, marker="o" if kind == "val" else None, markersize=3)
    ax.set(xlabel="step", ylabel="loss", title="Pretraining loss")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, run_dir / "loss.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    shown = []
    for key, label in (("mlm_accuracy", "val MLM accuracy"), ("nsp_accuracy", "val NSP accuracy"),
                       ("next_token_accuracy", "val next-token accuracy"),
                       ("replaced_accuracy", "val RTD accuracy, replaced tokens"),
                       ("original_accuracy", "val RTD accuracy, original tokens")):
        x, y = _series(records, "val", key)
        if x:
            _line(ax, x, y, label=label, marker="o", markersize=3)
            shown += y
    ax.set(xlabel="step", ylabel="accuracy", title="Validation accuracy")
    _fit(ax, shown)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend()
    save_figure(fig, run_dir / "accuracy.png")


def plot_finetuning(runs: list[dict], metric: str, out: str | Path, title: str = "Fine-tuning") -> None:
    """train_loss.png and dev_<metric>.png of a fine-tuning run's seeds (SeedRun records): the dev
    metric at every evaluation (`evals`; per epoch in records without them) against the epoch."""
    plt = pyplot()
    out = Path(out)
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        _line(ax, list(range(1, len(r["train_loss"]) + 1)), r["train_loss"], label=f"seed {r['seed']}", linewidth=0.8)
    ax.set(xlabel="step", ylabel="training loss", title=f"{title} loss")
    _fit(ax, [v for r in runs for v in r["train_loss"]])
    _finish(ax)
    save_figure(fig, out / "train_loss.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    shown = []
    for r in runs:
        points = [(e["epoch"], e[metric]) for e in r.get("evals") or r["epochs"] if metric in e]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"seed {r['seed']}")
        shown += [p[1] for p in points]
    ax.set(xlabel="epoch", ylabel=f"dev {metric}", title=f"{title}: dev {metric} at each evaluation")
    _fit(ax, shown)
    _finish(ax)
    save_figure(fig, out / f"dev_{metric}.png")


def _finish(ax) -> None:
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend()


def plot_ablation_table(table: dict, dest: str | Path) -> None:
    """One ablation table (report.json's layout): a panel per column, a bar per row with our
    median and the seeds' standard deviation, every seed as a dot, the paper's figure as a red mark."""
    plt = pyplot()
    columns, rows = table["columns"], table["rows"]
    fig, axes = plt.subplots(1, len(columns), figsize=(3.6 * len(columns) + 2.5, 0.45 * len(rows) + 1.6),
                             squeeze=False, sharey=True)
    y = list(range(len(rows)))[::-1]
    for ax, column in zip(axes[0], columns):
        entries = [r["entries"][column] for r in rows]
        ax.barh(y, [e.get("median", 0.0) for e in entries], xerr=[e.get("std", 0.0) for e in entries],
                color="#7a9cc6", capsize=3, label="ours (median, std)")
        for yi, e in zip(y, entries):
            ax.plot(e["values"], [yi] * len(e["values"]), "k.", markersize=4)
        paper = [(yi, e["paper"]) for yi, e in zip(y, entries) if e["paper"] is not None]
        ax.plot([p for _, p in paper], [yi for yi, _ in paper], "r|", markersize=14, markeredgewidth=2,
                label="paper")
        ax.set_title(column, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(y, [r["label"] for r in rows], fontsize=8)
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(table["title"] + ": ours (bars, dots = seeds) and the paper (red)", fontsize=10)
    save_figure(fig, dest)


def plot_trials(trials: list[dict], metric: str, dest: str | Path) -> None:
    """trials.png of `bertkit tune` (trials.json's records): the dev metric of each trial against
    its number, complete trials as dots with the best so far as a line and pruned ones as crosses at
    their last evaluation; and the same values against the learning rate (log scale)."""
    plt = pyplot()
    fig, (by_trial, by_lr) = plt.subplots(1, 2, figsize=(11, 4))
    points = {"complete": [], "pruned": []}
    for t in trials:
        value = t["value"] if t["state"] == "complete" else next(reversed(t["evaluations"].values()), None)
        if t["state"] in points and value is not None:
            points[t["state"]].append((t["number"], t["params"].get("lr"), value))
    styles = {"complete": dict(marker="o", color="#1f77b4", label="complete (best checkpoint)"),
              "pruned": dict(marker="x", color="#d62728", label="pruned (last evaluation)")}
    for state, rows in points.items():
        if rows:
            by_trial.scatter([r[0] for r in rows], [r[2] for r in rows], **styles[state])
            with_lr = [r for r in rows if r[1] is not None]
            by_lr.scatter([r[1] for r in with_lr], [r[2] for r in with_lr], **styles[state])
    done = sorted((r[0], r[2]) for r in points["complete"])
    if done:
        sign = -1.0 if metric.endswith("loss") else 1.0
        best = [max(v * sign for _, v in done[: i + 1]) * sign for i in range(len(done))]
        by_trial.step([n for n, _ in done], best, where="post", color="#1f77b4", alpha=0.5, label="best so far")
    by_trial.set(xlabel="trial", ylabel=f"dev {metric}", title=f"dev {metric} per trial")
    by_lr.set(xlabel="learning rate", ylabel=f"dev {metric}", title="against the learning rate")
    if any(r[1] for rows in points.values() for r in rows):
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        by_lr.set_xscale("log")
        # Labels at 1, 2 and 5 of each decade, so a range inside one decade still has some.
        by_lr.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        by_lr.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:.0e}"))
        by_lr.xaxis.set_minor_formatter(NullFormatter())  # a narrow range labels its minor ticks, overlapping
    for ax in (by_trial, by_lr):
        _fit(ax, [r[2] for rows in points.values() for r in rows])
        ax.grid(alpha=0.3)
        if ax.collections or ax.lines:
            ax.legend(fontsize=8)
    save_figure(fig, dest)


def line_panels(panels: list[tuple[str, dict]], ylabel: str, dest: str | Path, title: str = "",
                log_x: bool = False) -> None:
    """Side-by-side panels sharing a y axis: each (x label, {series name: [(x, y), ...]}), one line per
    series (an experiment's arms against FLOPs and against seconds, say)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), sharey=True, squeeze=False)
    for ax, (xlabel, series) in zip(axes[0], panels, strict=True):
        for name, points in series.items():
            if points:
                xs, ys = zip(*sorted(points), strict=True)
                _line(ax, list(xs), list(ys), label=name, marker=".")
        ax.set_xlabel(xlabel)
        if log_x:
            ax.set_xscale("log")
        _finish(ax)
    axes[0][0].set_ylabel(ylabel)
    if title:
        fig.suptitle(title)
    save_figure(fig, dest)
