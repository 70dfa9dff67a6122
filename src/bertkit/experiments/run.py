"""One experiment as one library call: plan, calibrate, run the cells not yet done, draw the report.

OUT (the default scale's: docs/results/NAME, committed) holds experiment.json (the experiment,
scale and settings it was started with: another is refused, as it would mix results), `cells/`
(one small record per finished cell) and the report (report.md, report.json, PNGs), redrawn after
every cell from whatever records exist. WORK (runs/experiments/NAME/SCALE, not committed) holds
what cells leave for later cells, their logs, the claims of processes sharing the folder, and the
calibration. Running the same command again continues where it stopped, in this session or a
later one; `--only` runs the cells whose ids match (and what they need).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import UserError
from bertkit.experiments import calibrate
from bertkit.experiments.core import Cell, Context, Experiment
from bertkit.experiments.machine import cpu_key
from bertkit.experiments.runner import clock, read_done, run_cells
from bertkit.io import read_json, write_json, write_text

FOLDER_FILE = "experiment.json"
ROOT = Path(__file__).resolve().parents[3]  # the checkout: docs/results/ and runs/ live here


@dataclass
class Job:
    experiment: str
    scale: str = ""  # "": the experiment's default
    out: str | None = None  # None: docs/results/NAME (default scale) or runs/experiments/NAME-SCALE
    work: str | None = None  # None: runs/experiments/NAME/SCALE
    env: dict = field(default_factory=dict)  # the experiment's settings over its defaults
    only: list[str] | None = None  # cell id patterns (fnmatch); None: every cell
    processes: int = 2  # how many processes the estimate assumes share the folder
    device: str = "auto"


def folders(exp: Experiment, job: Job) -> tuple[str, Path, Path]:
    scale = job.scale or exp.scales[0]
    if scale not in exp.scales:
        raise UserError(f"--scale: experiment {exp.name} has scales {', '.join(exp.scales)}, not {scale!r}")
    default_out = ROOT / "docs" / "results" / exp.name if scale == exp.scales[0] \
        else ROOT / "runs" / "experiments" / f"{exp.name}-{scale}"
    out = Path(job.out) if job.out else default_out
    work = Path(job.work) if job.work else ROOT / "runs" / "experiments" / exp.name / scale
    return scale, out, work


def select(cells: list[Cell], only: list[str] | None) -> list[Cell]:
    """The cells whose ids match a pattern of `only`, with every cell they need; None: all."""
    if not only:
        return cells
    by_id = {c.id: c for c in cells}
    chosen = {c.id for c in cells if any(fnmatch.fnmatch(c.id, p) for p in only)}
    if not chosen:
        raise UserError(f"--only {','.join(only)}: no cell matches; cells look like {cells[-1].id}")
    stack = list(chosen)
    while stack:
        for need in by_id[stack.pop()].needs:
            if need not in chosen:
                chosen.add(need)
                stack.append(need)
    return [c for c in cells if c.id in chosen]


def _portable(value):
    """A setting as another machine's checkout would write it: paths by their file names."""
    if isinstance(value, (list, tuple)):
        return [_portable(v) for v in value]
    return Path(value).name if isinstance(value, str) and "/" in value else value


def _identity(exp: Experiment, scale: str, env: dict) -> dict:
    """What a folder's records depend on beyond their cells' params: the experiment, its scale, the
    corpus (a cell's params name its settings, not the text it read)."""
    return {"experiment": exp.name, "scale": scale, "corpus": _portable(env.get("corpus"))}


def _check_folder(out: Path, identity: dict) -> None:
    if out.exists() and not out.is_dir():
        raise UserError("is a file; --out names the experiment's folder", out)
    path = out / FOLDER_FILE
    if not path.is_file():
        if out.is_dir() and any(p.name != "cells" for p in out.iterdir()) and not (out / "cells").is_dir():
            raise UserError(f"is a folder of other files, not an experiment's (no {FOLDER_FILE}); choose another "
                            f"--out", out)
        return
    saved = read_json(path, "an experiment's settings")
    differ = [f"{k} {saved.get(k)!r} -> {v!r}" for k, v in identity.items() if saved.get(k) != v]
    if differ:
        raise UserError(f"was started with other settings ({'; '.join(differ)}): continuing would mix results; "
                        f"choose another --out", out)


class Session:
    """An experiment's folders, context and planned cells for one job."""

    def __init__(self, exp: Experiment, job: Job):
        self.exp, self.job = exp, job
        self.scale, self.out, self.work = folders(exp, job)
        unknown = sorted(set(job.env) - set(exp.env_defaults))
        if unknown:
            raise UserError(f"--set {unknown[0]}: experiment {exp.name} has the settings "
                            f"{', '.join(exp.env_defaults) or '(none)'}")
        self.env = {**exp.env_defaults, **job.env}
        self.ctx = Context(self.work, self.out / "cells", self.scale, self.env, job.device)
        self.cells = select(exp.plan(self.scale, self.env), job.only)
        self.identity = _identity(exp, self.scale, self.env)

    def records(self) -> dict[str, dict]:
        return read_done(self.cells, self.ctx)

    def estimated(self, log=print, force: bool = False) -> list[Cell]:
        done = self.records()
        todo = [c for c in self.cells if c.id not in done]
        rates = calibrate.rates(self.exp, self.scale, todo, self.ctx, log, force, done) if todo else {}
        return calibrate.with_estimates(self.cells, rates)

    def describe(self, cells: list[Cell]) -> str:
        done = self.records()
        left = [c for c in cells if c.id not in done]
        kinds: dict[str, list[Cell]] = {}
        for c in left:
            kinds.setdefault(c.kind, []).append(c)
        p = self.job.processes
        wall = calibrate.wall_estimate(left, p)
        longest = max(left, key=lambda c: c.estimate_s, default=None)
        lines = [f"{self.exp.name} ({self.exp.title}), scale {self.scale}: {len(cells)} cells, {len(done)} done; "
                 f"{len(left)} to run, about {clock(sum(c.estimate_s for c in left))} of cell time, "
                 f"{clock(wall)} of wall time with {p} processes sharing the folder (rates measured on {cpu_key()})"]
        if longest is not None:
            lines.append(f"  longest cell: {longest.id} ~{clock(longest.estimate_s)}")
        lines += [f"  {k}: {len(v)} cells, {clock(sum(c.estimate_s for c in v))}" for k, v in kinds.items()]
        lines += [f"    {c.id}  ~{c.estimate_s:.0f}s" + ("  (done)" if c.id in done else "") for c in cells]
        return "\n".join(lines)

    def start_folder(self) -> None:
        """OUT with its experiment.json, made in one rename so two processes started at once agree."""
        _check_folder(self.out, self.identity)
        if (self.out / FOLDER_FILE).is_file():
            return
        self.out.parent.mkdir(parents=True, exist_ok=True)
        if self.out.is_dir():  # cells committed without the file (or an empty folder): add it
            write_json(self.out / FOLDER_FILE, self.identity)
            return
        tmp = self.out.parent / f".{self.out.name}.{os.getpid()}.tmp"
        tmp.mkdir()
        write_json(tmp / FOLDER_FILE, self.identity)
        try:
            os.rename(tmp, self.out)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
            _check_folder(self.out, self.identity)

    def write_report(self, records: dict | None = None, log=None) -> None:
        records = self.records() if records is None else records
        report = self.exp.report(self.cells, records, self.ctx)
        missing = len(self.cells) - len(records)
        head = (f"# {self.exp.title}\n\n{len(records)} of {len(self.cells)} cells done"
                + (f"; {missing} not run yet (shown as `…`)" if missing else "") + ".\n\n")
        machines = sorted({r.get("cpu_key", "?") for r in records.values()})
        foot = ("\n\nMeasured on: " + "; ".join(machines) + "\n") if machines else "\n"
        write_text(self.out / "report.md", head + report.markdown.rstrip() + foot)
        write_json(self.out / "report.json", {"experiment": self.exp.name, "scale": self.scale,
                                              "cells": {"done": len(records), "total": len(self.cells)},
                                              "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                              **report.data})
        for draw in report.figures:
            draw(self.out)
        if log is not None:
            log(f"report: {self.out / 'report.md'} ({len(records)} of {len(self.cells)} cells done)")


def run_experiment(exp: Experiment, job: Job, log=print, plan_only: bool = False, report_only: bool = False,
                   force_calibration: bool = False) -> int:
    session = Session(exp, job)
    if report_only:
        if not session.out.is_dir():
            raise UserError("has no cells yet: run the experiment first", session.out)
        session.write_report(log=log)
        return 0
    if plan_only:
        log(session.describe(session.estimated(log, force_calibration)))
        return 0
    session.start_folder()
    cells = session.estimated(log, force_calibration)
    try:
        run_cells(cells, exp.execute, session.ctx, log, on_done=lambda records: session.write_report(records))
    finally:  # a stopped run still leaves the report of what is done
        session.write_report(log=log)
    return 0
