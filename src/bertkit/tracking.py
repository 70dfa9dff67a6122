"""Live training curves: `--report-to tensorboard|none` of pretrain, finetune, distill and ablate.

A `Tracker` takes a run's scalars as the run computes them, `scalars(step, {tag: value})`, and is
`close()`d at the end. "none" (the default) is the base class, which does nothing; "tensorboard"
writes event files with TensorBoard's own writer (`torch.utils.tensorboard.SummaryWriter`, which
needs the `tensorboard` package: `pip install 'bertkit[tensorboard]'`), flushed at every call, so
`tensorboard --logdir OUT` draws the curves while the run goes on. No account, no network. The
loops call a tracker at the points where they already log (pretraining's metrics.jsonl records,
fine-tuning's logging steps and dev evaluations); only the process that writes a run's other
files (rank 0 under torchrun) opens a real one. This module imports neither torch nor
tensorboard until a TensorBoard tracker is opened: the CLI takes its choices from here.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from bertkit.errors import UserError

REPORT_TO = ("none", "tensorboard")
FOLDER = "tensorboard"  # under a run's output folder: OUT/tensorboard (fine-tuning: one run per seed below it)


class Tracker:
    """--report-to none (and every rank but 0): takes scalars and keeps none."""

    def scalars(self, step: int, values: dict) -> None:
        """Record each number of `values` (tag -> value) at `step`; other values are left out."""

    def close(self) -> None:
        """Write what is pending and release the files."""


class TensorBoardTracker(Tracker):
    """Event files in `logdir`, one scalar series per tag."""

    def __init__(self, logdir: str | Path, purge_step: int | None = None):
        """`purge_step`: a resumed run's first new step; TensorBoard hides what an earlier process
        wrote from that step on, so the curve reads as one run."""
        check_report_to("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.logdir = Path(logdir)
        self.writer = SummaryWriter(log_dir=str(self.logdir), purge_step=purge_step)

    def scalars(self, step: int, values: dict) -> None:
        for tag, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # at logging cadence: cheap, and the curve is on disk as the step happens

    def close(self) -> None:
        self.writer.close()


def check_report_to(name: str) -> None:
    """A one-line UserError naming --report-to when `name` is unknown or its package is missing."""
    if name not in REPORT_TO:
        raise UserError(f"--report-to must be one of {', '.join(REPORT_TO)}, not {name!r}")
    if name == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        raise UserError("--report-to tensorboard needs the tensorboard package: pip install 'bertkit[tensorboard]'")


def open_tracker(report_to: str, logdir: str | Path, enabled: bool = True, purge_step: int | None = None) -> Tracker:
    """The tracker `report_to` names, writing under `logdir`; a no-op one when `enabled` is False
    (a rank other than 0)."""
    check_report_to(report_to)
    if report_to == "none" or not enabled:
        return Tracker()
    return TensorBoardTracker(logdir, purge_step)


def tagged(prefix: str, record: dict, skip: tuple[str, ...] = ("step", "kind")) -> dict:
    """A record's numbers as `prefix/name` tags (its step and kind are the axis and the prefix)."""
    return {f"{prefix}/{k}": v for k, v in record.items() if k not in skip}
