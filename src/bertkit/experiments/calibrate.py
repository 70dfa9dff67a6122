"""A plan's time from rates measured on the machine at hand.

Each cell names a rate (`Cell.rate_key`: "pretrain/2x128/mlm", "finetune/sst2/2x128") and how many
of its units it costs (`Cell.units`: steps, examples x epochs). An experiment's `calibrate` times
each rate on this machine in a few seconds (a handful of real training steps, a few batches) and
returns (fixed seconds, seconds per unit); the runner keeps them in the work folder's
calibration.json under this machine's CPU key (`machine.cpu_key`: model, kernel flags, limits),
and calibrates again only for rates it has not measured on this CPU, or when asked (`--calibrate`).
Records of finished cells are better still: where a rate has finished cells on this CPU, their
mean seconds per unit replace the calibration's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable

from bertkit.experiments.core import Cell, Context, Experiment
from bertkit.experiments.machine import cpu_key
from bertkit.io import read_json, write_json

CALIBRATION = "calibration.json"


def _saved(ctx: Context) -> dict:
    path = ctx.work / CALIBRATION
    return read_json(path, "a calibration") if path.is_file() else {}


def _rates_of(saved: dict, key: str) -> dict[str, tuple[float, float]]:
    """The saved calibration's rates for CPU key `key`."""
    return {k: tuple(v) for k, v in saved.get(key, {}).get("rates", {}).items()}


def _measured(records: dict[str, dict]) -> dict[str, tuple[float, float]]:
    """rate -> (0, mean seconds per unit) over the finished cells of this CPU."""
    key, sums = cpu_key(), {}
    for r in records.values():
        if r.get("cpu_key") == key and r.get("units"):
            total, units = sums.get(r["rate"], (0.0, 0.0))
            # a cell that resumed its own checkpoint reports its time over every attempt (elapsed_s);
            # the record's time_s is only the last attempt's
            spent = max(r["time_s"], (r.get("result") or {}).get("elapsed_s") or 0.0)
            sums[r["rate"]] = (total + spent, units + r["units"])
    return {rate: (0.0, t / u) for rate, (t, u) in sums.items() if u > 0}


def rates(exp: Experiment, scale: str, cells: list[Cell], ctx: Context, log=print, force: bool = False,
          records: dict | None = None) -> dict[str, tuple[float, float]]:
    """The rates of `cells` on this CPU: saved, else measured now (and saved)."""
    saved = _saved(ctx)
    key = cpu_key()
    mine = _rates_of(saved, key)
    wanted = {c.rate_key for c in cells}
    missing = sorted(wanted if force else wanted - set(mine))
    if missing:
        log(f"calibrating {len(missing)} rate(s) on this machine ({key}) ...")
        started = time.time()
        todo = [c for c in cells if c.rate_key in missing]
        log_file = ctx.log_file("calibration")
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "a", encoding="utf-8") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            measured = exp.calibrate(scale, todo, ctx)
        mine.update({k: (round(f, 3), v) for k, (f, v) in measured.items()})
        saved[key] = {"rates": mine, "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_json(ctx.work / CALIBRATION, saved)
        log(f"calibrated in {time.time() - started:.0f}s")
    return {**mine, **_measured(records or {})}


def known_rates(ctx: Context, records: dict | None = None) -> dict[str, tuple[float, float]]:
    """The rates this CPU already has, measuring nothing: the folder's saved calibration and the
    finished cells' own times."""
    return {**_rates_of(_saved(ctx), cpu_key()), **_measured(records or {})}


def with_estimates(cells: list[Cell], rates_by_key: dict[str, tuple[float, float]]) -> list[Cell]:
    """The cells with `estimate_s` from the rates (0 where a rate is unknown)."""
    out = []
    for c in cells:
        fixed, per_unit = rates_by_key.get(c.rate_key, (0.0, 0.0))
        out.append(dataclasses.replace(c, estimate_s=fixed + per_unit * c.units))
    return out


def wall_estimate(cells: list[Cell], processes: int = 2) -> float:
    """Seconds until the last cell ends when `processes` processes share the folder as `run_cells`
    has them do: each, when free, takes the first cell whose needs have ended, else waits for one.
    Needs outside `cells` are done already."""
    end: dict[str, float] = {}
    ids = {c.id for c in cells}
    free = [0.0] * processes
    left = list(cells)
    while left:
        p = min(range(processes), key=free.__getitem__)
        now = free[p]
        cell = next((c for c in left if all(end.get(n, math.inf if n in ids else 0.0) <= now for n in c.needs)),
                    None)
        if cell is None:  # every cell left waits on one running now
            later = [t for t in end.values() if t > now]
            if not later:
                raise ValueError(f"cell {left[0].id} needs a cell outside the plan")
            free[p] = min(later)
            continue
        left.remove(cell)
        end[cell.id] = free[p] = now + cell.estimate_s
    return max(end.values(), default=0.0)


def time_it(fn: Callable[[], None], repeats: int) -> float:
    """Seconds per call of `fn` over `repeats` calls, after one call to warm up."""
    fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


def timed(fn) -> float:
    """Seconds one call of `fn` takes."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def line(t1: float, t2: float, u1: float, u2: float) -> tuple[float, float]:
    """(fixed seconds, seconds per unit) through two timings at u1 and u2 units."""
    per = max(0.0, (t2 - t1) / (u2 - u1))
    return max(0.0, t1 - per * u1), per
