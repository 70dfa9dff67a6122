"""PNG curves of a run, drawn from its metrics records with matplotlib's Agg backend.

loss.png: training loss (per logging step) and validation loss (per evaluation);
accuracy.png: validation MLM (or next-token) accuracy and NSP accuracy. Both are rewritten
atomically at each evaluation so a person can watch a run by reloading an image.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.io import atomic_path


def _series(records: list[dict], kind: str, key: str) -> tuple[list[int], list[float]]:
    rows = [r for r in records if r.get("kind") == kind and r.get(key) is not None]
    return [r["step"] for r in rows], [r[key] for r in rows]


def _save(fig, dest: Path) -> None:
    with atomic_path(dest) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")


def write_plots(records: list[dict], run_dir: str | Path) -> None:
    """Draw loss.png and accuracy.png in `run_dir` from train/val metric records."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    fig, ax = plt.subplots(figsize=(7, 4))
    for kind, key, label in (("train", "loss", "train loss"), ("val", "loss", "val loss")):
        x, y = _series(records, kind, key)
        if x:
            ax.plot(x, y, label=label, marker="o" if kind == "val" else None, markersize=3)
    ax.set(xlabel="step", ylabel="loss", title="Pretraining loss")
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, run_dir / "loss.png")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("mlm_accuracy", "val MLM accuracy"), ("nsp_accuracy", "val NSP accuracy"),
                       ("next_token_accuracy", "val next-token accuracy")):
        x, y = _series(records, "val", key)
        if x:
            ax.plot(x, y, label=label, marker="o", markersize=3)
    ax.set(xlabel="step", ylabel="accuracy", title="Validation accuracy", ylim=(0, 1))
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend()
    _save(fig, run_dir / "accuracy.png")
    plt.close(fig)
