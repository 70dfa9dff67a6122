"""Running cells: each once, atomically, skipping the ones already done, shared by several processes.

A finished cell leaves its record, `<records>/<cell>.json` (written atomically, last of all); a
cell without that file is not done, whatever else it left, and runs again: what a killed atomic
write left is removed first, and a pretraining continues from its newest checkpoint. A record
counts only for the cell it was made for: its params must be the cell's, and the records of the
cells it needs must be the ones it was made from (each record has a `uid` and names its needs'
uids), so changing a param reruns that cell and everything made from it, and nothing else.

Records are small and committed; the files a `keeps` cell leaves (a vocabulary, a model) stay in
the work folder, which a later session may not have. A cell whose needed files are missing (or
were made for another record) has them made again first: the needed cell runs once more into
the work folder, its record kept (`work/kept/<cell>.remade.json` holds what the second run
measured, so a reader can see the two agree).

Several processes may run the same command on one folder at once (each with its own threads):
each claims a cell before running it (`claims.Claims`), takes the first cell whose needs are done
and that nobody holds, and waits while the cells left are held by others. Each cell's own output
goes to `work/logs/<cell>.log`; the console gets one progress line per cell.
"""

from __future__ import annotations

import contextlib
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bertkit.errors import UserError
from bertkit.experiments.claims import Claims
from bertkit.experiments.core import Cell, Context
from bertkit.experiments.machine import cpu_key, machine
from bertkit.io import read_json, write_json

Execute = Callable[[Cell, Context], dict]


class Stopped(Exception):
    """A cell stopped by SIGTERM / SIGINT (what it saved continues it): exit with `status`."""

    def __init__(self, status: int):
        super().__init__(f"stopped (exit status {status})")
        self.status = status


def read_done(cells: list[Cell], ctx: Context) -> dict[str, dict]:
    """cell id -> its record, for the cells done with the params they have now and from the records
    of the cells they need (`cells` lists every cell's needs before it)."""
    out: dict[str, dict] = {}
    for cell in cells:
        path = ctx.record_file(cell.id)
        if not path.is_file():
            continue
        record = read_json(path, "a finished cell's record")
        made_from = record.get("needs", {})
        if record.get("params") == cell.params_json() and all(
                n in out and out[n].get("uid") == made_from.get(n) for n in cell.needs):
            out[cell.id] = record
    return out


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """cells done / total and the time left: the estimates of the cells not done, scaled by how
    long this run's cells took against their estimates. The scale starts at 1 and moves to the
    measured ratio as measured time accumulates (PRIOR_S of estimated time weigh as much as the
    measurements), so a first quick cell does not promise a run ten times shorter."""

    PRIOR_S = 600.0

    def __init__(self, cells: list[Cell], done: set[str], log):
        self.cells, self.done, self.log = cells, set(done), log
        self.spent = self.estimated = 0.0
        self.ran = 0
        self.start = time.time()

    def remaining(self) -> float:
        left = [c for c in self.cells if c.id not in self.done]
        estimate = sum(c.estimate_s for c in left)
        if self.estimated > 0 and estimate > 0:
            return estimate * (self.spent + self.PRIOR_S) / (self.estimated + self.PRIOR_S)
        if self.ran:  # no estimates: the mean cell so far
            return self.spent / self.ran * len(left)
        return estimate

    def finished(self, cell: Cell, seconds: float, sharing: int = 1) -> None:
        """`sharing`: the processes working on the folder now, which split the time left."""
        self.done.add(cell.id)
        self.ran += 1
        self.spent += seconds
        self.estimated += cell.estimate_s
        self.log(f"[{len(self.done)}/{len(self.cells)}] {cell.id} done in {seconds:.0f}s; "
                 f"elapsed {clock(time.time() - self.start)}, about {clock(self.remaining() / sharing)} left"
                 + (f" ({sharing} processes)" if sharing > 1 else ""))


def run_cells(cells: list[Cell], execute: Execute, ctx: Context, log=print, poll_s: float = 2.0,
              on_done: Callable[[dict], None] | None = None) -> dict[str, dict]:
    """Run every cell not yet done, claiming each first (other processes may share the folder);
    every finished cell's record once all are done. `on_done(records)` after each cell (the
    report redrawn from what exists)."""
    by_id = {c.id: c for c in cells}
    claims = Claims(ctx.work / "claims")
    done = read_done(cells, ctx)
    progress = Progress(cells, set(done), log)
    log(f"{len(cells)} cells: {len(done)} done before, {len(cells) - len(done)} to run, "
        f"about {clock(progress.remaining())} (estimate)")
    while True:
        done.update(read_done(cells, ctx))  # others' cells too
        progress.done |= set(done)
        left = [c for c in cells if c.id not in done]
        if not left:
            return done
        cell = next((c for c in left if all(n in done for n in c.needs) and claims.claim(c.id)), None)
        if cell is None:
            if not any(claims.held_by_others(c.id) for c in left):
                missing = next(n for c in left for n in c.needs if n not in done)
                raise UserError(f"cell {left[0].id} needs {missing}, which did not finish")
            time.sleep(poll_s)  # what is left waits on cells other processes are running
            continue
        if cell.id in read_done(cells, ctx):  # another process finished it between our read and our claim
            claims.release(cell.id)
            continue
        try:
            for need in cell.needs:
                if need not in cell.records_only:
                    _ensure_kept(by_id[need], done[need], execute, ctx, claims, log)
            done[cell.id] = _run_cell(cell, execute, ctx, done)
        finally:
            claims.release(cell.id)
        others = sum(claims.held_by_others(c.id) for c in left)
        progress.finished(cell, done[cell.id]["time_s"], 1 + others)
        if on_done is not None:
            on_done(done)


def _kept_file(ctx: Context, cell_id: str, suffix: str = ".json") -> Path:
    return ctx.work / "kept" / ctx.file_name(cell_id, suffix)


def _kept_uid(ctx: Context, cell_id: str) -> str | None:
    path = _kept_file(ctx, cell_id)
    return read_json(path, "a kept cell's note").get("uid") if path.is_file() else None


def _ensure_kept(cell: Cell, record: dict, execute: Execute, ctx: Context, claims: Claims, log) -> None:
    """The files a needed `keeps` cell leaves, made again if this work folder lacks them (a record
    committed by another session) or holds another record's; its record stays."""
    if not cell.keeps or _kept_uid(ctx, cell.id) == record.get("uid"):
        return
    while not claims.claim(cell.id):  # another process is remaking it now
        time.sleep(1.0)
    try:
        if _kept_uid(ctx, cell.id) == record.get("uid"):
            return
        log(f"{cell.id}: its files are not in {ctx.work} (its record came from another run); making them again")
        for need in cell.needs:
            needed = read_json(ctx.record_file(need), "a finished cell's record")
            _ensure_kept(_needed_cell(need, needed), needed, execute, ctx, claims, log)
        _clear(cell, ctx)
        started = time.time()
        result = _execute(cell, execute, ctx)
        write_json(_kept_file(ctx, cell.id, ".remade.json"),
                   {"result": result, "record_result": record.get("result"), "time_s": round(time.time() - started, 2),
                    "machine": machine()})
        write_json(_kept_file(ctx, cell.id), {"uid": record.get("uid")})
    finally:
        claims.release(cell.id)


def _needed_cell(cell_id: str, record: dict) -> Cell:
    """A needed cell rebuilt from its record, for remaking its files (records name their params)."""
    params = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in record["params"].items())
    return Cell(cell_id, record["kind"], params, tuple(record.get("needs", {})), keeps=True)


def _clear_partial(path: Path) -> None:
    """What a killed atomic write left beside `path`."""
    if path.parent.is_dir():
        for leftover in path.parent.glob(f".{path.name}.*"):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


def _clear(cell: Cell, ctx: Context) -> None:
    shutil.rmtree(ctx.path(cell.id), ignore_errors=True)
    _clear_partial(ctx.path(cell.id))


def _start_cell(cell: Cell, ctx: Context) -> None:
    """Clear what a run of this cell with other params left (a stale record, a pretraining's
    checkpoints) and what a killed atomic write left; note the params it starts with."""
    params = cell.params_json()
    started = ctx.started(cell.id)
    before = read_json(started, "a cell's settings") if started.is_file() else params
    if ctx.record_file(cell.id).is_file() or before != params:
        ctx.record_file(cell.id).unlink(missing_ok=True)
        shutil.rmtree(ctx.path(cell.id), ignore_errors=True)
    _clear_partial(ctx.path(cell.id))
    write_json(started, params)


def _execute(cell: Cell, execute: Execute, ctx: Context) -> dict:
    """The cell's executor, its output in its log file."""
    log_file = ctx.log_file(cell.id)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "a", encoding="utf-8") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        return execute(cell, ctx)


def _run_cell(cell: Cell, execute: Execute, ctx: Context, done: dict[str, dict]) -> dict:
    """Run one claimed cell; its record, written last (the cell is done once the file exists)."""
    _start_cell(cell, ctx)
    started = time.time()
    result = _execute(cell, execute, ctx)
    record = {"id": cell.id, "kind": cell.kind, "params": cell.params_json(), "result": result,
              "time_s": round(time.time() - started, 2), "estimate_s": round(cell.estimate_s, 1),
              "rate": cell.rate_key, "units": cell.units,
              "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "uid": uuid.uuid4().hex,
              "needs": {n: done[n].get("uid") for n in cell.needs}, "machine": machine(), "cpu_key": cpu_key()}
    if cell.keeps:
        write_json(_kept_file(ctx, cell.id), {"uid": record["uid"]})
    write_json(ctx.record_file(cell.id), record)
    return record
