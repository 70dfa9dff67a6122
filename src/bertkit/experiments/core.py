"""What an experiment is: cells with declared params, how each runs, how the report reads them.

A cell is one resumable unit of an experiment, a pure function of its `params` (every setting it
computes with) and of the cells it `needs`. Its result is a small JSON record (no weights); a
cell whose work leaves files that later cells read (a vocabulary, prepared data, a pretrained
model) says so with `keeps`, and those files live in the run's work folder, outside the results.
An `Experiment` is one table row: its name, its scales (the first is the default), the cells a
scale plans, the function that runs a cell, the calibration that times this machine, and the
report drawn from whatever records exist. `runner.py` does the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Cell:
    id: str  # unique; also its record's name and its work folder ("pretrain/bert", "finetune/bert/sst2/seed1")
    kind: str  # what runs it (the experiment's executor reads it)
    params: tuple  # (name, value) pairs: what the cell computes, every setting included
    needs: tuple[str, ...] = ()  # cells whose records (and kept files) it reads
    estimate_s: float = 0.0  # seconds on this machine, from the calibration (`calibrate.estimate`)
    rate: str = ""  # the calibration's key for its cost ("" : its kind)
    units: float = 1.0  # how many of the rate's units it costs (steps, examples x epochs, passages)
    keeps: bool = False  # leaves files in the work folder that cells needing it read
    records_only: tuple[str, ...] = ()  # needs of which it reads the record alone (not their kept files)

    def param(self, name: str, default=None):
        return dict(self.params).get(name, default)

    @property
    def rate_key(self) -> str:
        return self.rate or self.kind

    def params_json(self) -> dict:
        """The params as a record holds them (tuples as lists)."""
        return json.loads(json.dumps(dict(self.params)))


@dataclass
class Context:
    """What a running cell sees: the work folder (kept files, logs, claims), the records folder,
    the experiment's own settings (`env`), the device and thread count."""

    work: Path
    records: Path
    scale: str = ""
    env: dict = field(default_factory=dict)
    device: str = "auto"

    def path(self, cell_id: str) -> Path:
        """A cell's own folder in the work folder (what a `keeps` cell leaves for the cells after it)."""
        return self.work / cell_id

    def file_name(self, cell_id: str, suffix: str = ".json") -> str:
        return cell_id.replace("/", "__") + suffix

    def record_file(self, cell_id: str) -> Path:
        return self.records / self.file_name(cell_id)

    def started(self, cell_id: str) -> Path:
        return self.work / "started" / self.file_name(cell_id)

    def log_file(self, cell_id: str) -> Path:
        return self.work / "logs" / self.file_name(cell_id, ".log")


# The report an experiment draws from the records that exist: Markdown, and its PNGs (each a
# function drawing its figures into the results folder).
@dataclass
class Report:
    markdown: str
    figures: list[Callable[[Path], None]] = field(default_factory=list)
    data: dict = field(default_factory=dict)  # report.json: the numbers behind the tables


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    scales: tuple[str, ...]  # the first is the default (its results are committed under docs/results/NAME)
    plan: Callable[[str, dict], list[Cell]]  # (scale, env) -> cells, each after the cells it needs
    execute: Callable[[Cell, Context], dict]  # runs one cell; its result (small, JSON)
    report: Callable[[list[Cell], dict[str, dict], Context], Report]
    # (scale, cells, ctx) -> {rate key: (fixed seconds, seconds per unit)} measured on this machine
    calibrate: Callable[[str, list[Cell], Context], dict[str, tuple[float, float]]]
    cost: str = ""  # what the default plan costs on a 2-core machine, for docs and --plan-only
    env_defaults: dict = field(default_factory=dict)  # the experiment's own settings (corpus, data folder)


def shared_data() -> str:
    """The shared data folder: $BERTKIT_SHARED/data, else ../shared/data beside the checkout."""
    import os

    root = Path(__file__).resolve().parents[3]
    return str(Path(os.environ.get("BERTKIT_SHARED", root.parent / "shared")) / "data")
