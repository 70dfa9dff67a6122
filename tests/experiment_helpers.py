"""A toy experiment for the runner's tests: cells that append to a journal, so a test can see
which cells ran, in which process, and how often.

Cells: `base` (keeps a file later cells read), then `step/i` for i < N, each needing `base`. A cell
sleeps `sleep` seconds (from the env) and, when the env names it in `fail`, raises. Run as a
script (`python experiment_helpers.py RESULTS WORK [KEY=VALUE ...]`) it runs the experiment, as
a second process sharing the folder would.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from bertkit.experiments.core import Cell, Context, Experiment, Report

CALIBRATIONS = []  # one entry per calibration this process ran


def plan(scale: str, env: dict) -> list[Cell]:
    n = int(env.get("n") or 4)
    cells = [Cell("base", "base", (("size", int(env.get("size") or 1)),), keeps=True)]
    cells += [Cell(f"step/{i}", "step", (("i", i), ("lr", float(env.get(f"lr{i}") or 0.1))), ("base",), units=i + 1)
              for i in range(n)]
    return cells


def execute(cell: Cell, ctx: Context) -> dict:
    env = ctx.env
    with open(env["journal"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {cell.id}\n")
    if cell.id in env.get("fail", "").split(","):
        raise KeyboardInterrupt(f"killed at {cell.id}")
    time.sleep(float(env.get("sleep") or 0))
    if cell.kind == "base":
        ctx.path("base").mkdir(parents=True, exist_ok=True)
        (ctx.path("base") / "value.txt").write_text(str(cell.param("size") * 10))
        return {"value": cell.param("size") * 10}
    base = int((ctx.path("base") / "value.txt").read_text())
    return {"score": base + cell.param("i") * cell.param("lr")}


def calibrate(scale: str, cells: list[Cell], ctx: Context) -> dict:
    CALIBRATIONS.append(sorted({c.rate_key for c in cells}))
    started = time.perf_counter()
    time.sleep(0.01)
    per_unit = time.perf_counter() - started
    return {c.rate_key: (1.0, per_unit) for c in cells}


def report(cells: list[Cell], records: dict, ctx: Context) -> Report:
    rows = [f"| {c.id} | {records[c.id]['result'] if c.id in records else '…'} |" for c in cells]
    return Report("| cell | result |\n|---|---|\n" + "\n".join(rows), [], {"done": sorted(records)})


SETTINGS = ("journal", "n", "size", "sleep", "fail", "corpus", *(f"lr{i}" for i in range(8)))
EXPERIMENT = Experiment("toy", "A toy experiment", ("default", "tiny"), plan, execute, report, calibrate,
                        cost="seconds", env_defaults=dict.fromkeys(SETTINGS, ""))


def journal(path: Path) -> list[tuple[str, str]]:
    """(pid, cell id) per execution, in order."""
    text = Path(path).read_text(encoding="utf-8") if Path(path).exists() else ""
    return [tuple(line.split(" ", 1)) for line in text.splitlines() if line]


if __name__ == "__main__":
    from bertkit.experiments.run import Job, run_experiment

    results, work, *pairs = sys.argv[1:]
    env = dict(p.split("=", 1) for p in pairs)
    sys.exit(run_experiment(EXPERIMENT, Job("toy", out=results, work=work, env=env), log=lambda line: None))
