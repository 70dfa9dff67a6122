"""Running a plan's cells: each cell once, atomically, skipping the ones already done.

A finished cell leaves `work/done/<cell>.json` (its result, written atomically, last of all);
a cell without that file is not done, whatever else it left, and runs again: half-written
folders (the `.NAME.*.tmp` of `bertkit.io`'s atomic writers) are removed first, and a
pretraining continues from its newest checkpoint (`pretrain --resume`), so a killed ablation
loses at most the fine-tuning that was running and the steps since the last checkpoint. A record
counts only for the cell it was made for: its params (every setting, `plan.Cell.params`) must be
the cell's, and the records of the cells it needs must be the ones it was made from (each record
has a `uid`, and names its needs' uids), so changing a scale's task size or learning rate reruns
that cell and everything made from it, and nothing else. A cell started with other params than
the plan's now (`work/started/`) starts again from nothing. Each cell's own output (status lines,
fine-tuning logs) goes to `work/logs/<cell>.log`; the console gets one progress line per cell:
cells done / total and the estimated time left.

Several processes may run the same command on one folder at once (each with its own threads,
e.g. two one-thread processes on two cores): each claims a cell before running it
(`claims.Claims`), takes the first cell whose needs are done and that nobody holds, and waits
while the cells left are held by others.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.ablate.claims import Claims
from bertkit.ablate.plan import Cell, Plan
from bertkit.ablate.taskdata import TASK_FILES, majority_baseline, write_task_subset
from bertkit.errors import UserError
from bertkit.io import atomic_dir, read_json, write_json


class Stopped(Exception):
    """A pretraining cell stopped by SIGTERM / SIGINT (its checkpoint is saved): exit with `status`."""

    def __init__(self, status: int):
        super().__init__(f"stopped (exit status {status})")
        self.status = status


@dataclass
class Context:
    """What cells read: the work folder, the corpus, the task data folder, the device."""

    work: Path
    corpus: list[str]
    data_dir: Path
    device: str = "auto"
    workers: int = 1
    report_to: str = "none"  # each pretraining's and fine-tuning's live curves (bertkit.tracking)
    claims: Claims = field(init=False)

    def __post_init__(self):
        self.claims = Claims(self.work / "claims")

    def path(self, cell_id: str) -> Path:
        return self.work / cell_id

    def _file(self, folder: str, cell_id: str, suffix: str = ".json") -> Path:
        return self.work / folder / (cell_id.replace("/", "__") + suffix)

    def marker(self, cell_id: str) -> Path:
        return self._file("done", cell_id)

    def started(self, cell_id: str) -> Path:
        return self._file("started", cell_id)

    def log_file(self, cell_id: str) -> Path:
        return self._file("logs", cell_id, ".log")


def _as_json(params: tuple) -> dict:
    """A cell's params as its record holds them (tuples as lists)."""
    return json.loads(json.dumps(dict(params)))


def read_done(ctx: Context, plan: Plan) -> dict[str, dict]:
    """cell id -> its record, for the plan's cells done with the settings the plan gives them and
    from the records of the cells they need (a plan lists every cell's needs before it)."""
    out: dict[str, dict] = {}
    for cell in plan.cells:
        marker = ctx.marker(cell.id)
        if not marker.is_file():
            continue
        record = read_json(marker, "a finished cell's record")
        made_from = record.get("needs", {})
        if record.get("params") == _as_json(cell.params) and all(
                n in out and out[n].get("uid") == made_from.get(n) for n in cell.needs):
            out[cell.id] = record
    return out


def _clear_partial(path: Path) -> None:
    """What a killed atomic write left beside `path`."""
    if path.parent.is_dir():
        for leftover in path.parent.glob(f".{path.name}.*"):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


def _vocab(cell: Cell, plan: Plan, ctx: Context) -> dict:
    from bertkit.tokenizer import Tokenizer

    tokenizer = Tokenizer.train(ctx.corpus, vocab_size=cell.param("vocab_size"), show_progress=False)
    with atomic_dir(ctx.path("vocab")) as tmp:
        tokenizer.save_pretrained(tmp)
    return {"vocab_size": len(tokenizer)}


def _data(cell: Cell, plan: Plan, ctx: Context) -> dict:
    from bertkit.data.prepare import PrepareOptions, prepare_corpus

    options = PrepareOptions(max_seq_len=cell.param("max_seq_len"), format=cell.param("format"), val_fraction=0.02,
                             workers=ctx.workers)
    manifest = prepare_corpus(ctx.corpus, ctx.path("vocab"), ctx.path(cell.id), options)
    return {"corpus": manifest["corpus"], "splits": manifest.get("splits", {})}


def _tasks(cell: Cell, plan: Plan, ctx: Context) -> dict:
    task = cell.param("task")
    with atomic_dir(ctx.path(cell.id)) as tmp:
        counts = write_task_subset(task, ctx.data_dir, tmp, plan.scale.tasks[task])
        counts["majority"] = majority_baseline(task, tmp)
    return counts


def _length(cell: Cell, ctx: Context) -> dict:
    """steps=N, or minutes=M: given, or those the pretraining `minutes_of` names took."""
    if cell.param("steps") is not None:
        return {"steps": cell.param("steps")}
    if cell.param("minutes") is not None:
        return {"minutes": cell.param("minutes")}
    reference = read_json(ctx.marker(cell.param("minutes_of")), "a finished cell's record")
    return {"minutes": reference["result"]["elapsed_s"] / 60}


def _pretrain(cell: Cell, plan: Plan, ctx: Context) -> dict:
    from bertkit.pretrain import TrainConfig, pretrain

    s, p = plan.scale, dict(cell.params)
    out = ctx.path(cell.id)
    length = _length(cell, ctx)
    steps = length.get("steps", s.steps)  # a time-budgeted run saves and logs as often as the reference
    cfg = TrainConfig(data=str(ctx.path(f"data/{p['format']}")), out=str(out), **length, **s.train_options(p),
                      save_every=max(1, steps // 8), log_every=max(1, steps // 20),
                      eval_every=steps if "steps" in length else 10**9,  # and once more at the end
                      keep=1, seed=0, resume=True, device=ctx.device, report_to=ctx.report_to)
    status = pretrain(cfg)
    if status != 0:
        raise Stopped(status)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    val = next((r for r in reversed(records) if r.get("kind") == "val"), {})
    train = next((r for r in reversed(records) if r.get("kind") == "train"), {})
    result = {"steps": train.get("step"), "elapsed_s": train.get("elapsed"), "val": val,
              "train_loss": train.get("loss"), **({"minutes": length["minutes"]} if "minutes" in length else {})}
    if "mlm_loss" in val:
        result["ppl"] = math.exp(val["mlm_loss"])
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the model is in out/model; resuming is over
    return result


def _finetune(cell: Cell, plan: Plan, ctx: Context) -> dict:
    from bertkit.ablate.plan import feature_layers, num_layers
    from bertkit.ablate.tables import LTR, LTR_BILSTM
    from bertkit.finetune.loop import Hyper
    from bertkit.finetune.run import FinetuneJob, run_job

    s, task, how, p = plan.scale, cell.param("task"), cell.param("how"), dict(cell.params)
    files = ctx.path(f"tasks/{task}")
    train, dev = (str(files / name) for name in TASK_FILES[task])
    feature = how.startswith("fb-")
    layers, combine = (None, "concat")
    if feature:
        variant_size = _variant_size(plan, cell.param("variant"))
        layers, combine = feature_layers(how, num_layers(s, variant_size))
    out = ctx.path(cell.id)
    if out.exists():  # a previous attempt finished its folder but not its record
        shutil.rmtree(out)
    hyper = Hyper(epochs=p["epochs"], lr=p["lr"], batch_size=p["batch_size"], seeds=(p["seed"],),
                  group_by_length=True)
    job = FinetuneJob(model=str(ctx.path(f"pretrain/{cell.param('variant')}") / "model"),
                      task="ner" if task == "conll" else task, train=train, dev=dev, out=str(out), hyper=hyper,
                      max_seq_len=p["max_seq_len"], feature_based=feature, layers=layers, combine=combine,
                      device=ctx.device, precision=_precision(s, ctx), progress=False, report_to=ctx.report_to)
    new_model = None
    if how in (LTR, LTR_BILSTM):
        from bertkit.finetune.ltr import ltr_model

        new_model = ltr_model(bilstm=how == LTR_BILSTM)
    results = run_job(job, log=lambda line: print(line, flush=True), new_model=new_model)
    shutil.rmtree(out / "model", ignore_errors=True)  # results.json and predictions stay; weights are large
    dev_metrics = results["seeds"][0]["dev"]
    return {"dev": {k: v for k, v in dev_metrics.items() if isinstance(v, (int, float))},
            "n_train": results["n_train"], "n_dev": results["n_dev"], "steps": results["seeds"][0]["steps"]}


def _precision(scale, ctx: Context) -> str:
    """The scale's precision for fine-tuning, "auto" resolved as pretraining resolves it."""
    from bertkit.devices import resolve_device, resolve_precision

    return resolve_precision(scale.finetune_precision, resolve_device(ctx.device))


def _variant_size(plan: Plan, variant: str) -> str:
    return next(c.param("size") for c in plan.cells if c.id == f"pretrain/{variant}")


EXECUTORS = {"vocab": _vocab, "data": _data, "tasks": _tasks, "pretrain": _pretrain, "finetune": _finetune}


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """cells done / total and the time left: the plan's estimates of the cells not done,
    scaled by how long this run's cells took against their estimates. The scale starts at 1 and
    moves to the measured ratio as measured time accumulates (PRIOR_S of estimated time weigh as
    much as the measurements), so a first quick cell does not promise a run ten times shorter."""

    PRIOR_S = 600.0

    def __init__(self, plan: Plan, done: set[str], log):
        self.plan, self.done, self.log = plan, set(done), log
        self.spent = self.estimated = 0.0
        self.ran = 0
        self.start = time.time()

    def remaining(self) -> float:
        left = [c for c in self.plan.cells if c.id not in self.done]
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
        self.log(f"[{len(self.done)}/{len(self.plan.cells)}] {cell.id} done in {seconds:.0f}s; "
                 f"elapsed {_clock(time.time() - self.start)}, about {_clock(self.remaining() / sharing)} left"
                 + (f" ({sharing} processes)" if sharing > 1 else ""))


def run_cells(plan: Plan, ctx: Context, log=print, poll_s: float = 2.0) -> dict[str, dict]:
    """Run every cell of `plan` not yet done, claiming each first (other processes may share the
    folder); every finished cell's record once all are done."""
    done = read_done(ctx, plan)
    progress = Progress(plan, set(done), log)
    log(f"{len(plan.cells)} cells: {len(done)} done before, {len(plan.cells) - len(done)} to run, "
        f"about {_clock(progress.remaining())} (estimate)")
    while True:
        done.update(read_done(ctx, plan))  # others' cells too
        progress.done |= set(done)
        left = [c for c in plan.cells if c.id not in done]
        if not left:
            return done
        claims = ctx.claims
        cell = next((c for c in left if all(n in done for n in c.needs) and claims.claim(c.id)), None)
        if cell is None:
            if not any(claims.held_by_others(c.id) for c in left):
                missing = next(n for c in left for n in c.needs if n not in done)
                raise UserError(f"cell {left[0].id} needs {missing}, which did not finish")
            time.sleep(poll_s)  # what is left waits on cells other processes are running
            continue
        if cell.id in read_done(ctx, plan):  # another process finished it between our read and our claim
            claims.release(cell.id)
            continue
        try:
            done[cell.id] = _run_cell(cell, plan, ctx, done)
        finally:
            claims.release(cell.id)
        others = sum(claims.held_by_others(c.id) for c in left)
        progress.finished(cell, done[cell.id]["time_s"], 1 + others)


def _start_cell(cell: Cell, ctx: Context) -> None:
    """Clear what a run of this cell with other params left (a stale record, a pretraining's
    checkpoints) and what a killed atomic write left; note the params it starts with."""
    params = _as_json(cell.params)
    before = read_json(ctx.started(cell.id), "a cell's settings") if ctx.started(cell.id).is_file() else params
    if ctx.marker(cell.id).is_file() or before != params:
        ctx.marker(cell.id).unlink(missing_ok=True)
        shutil.rmtree(ctx.path(cell.id), ignore_errors=True)
    _clear_partial(ctx.path(cell.id))
    write_json(ctx.started(cell.id), params)


def _run_cell(cell: Cell, plan: Plan, ctx: Context, done: dict[str, dict]) -> dict:
    """Run one claimed cell; its record, written last (the cell is done once the file exists)."""
    _start_cell(cell, ctx)
    started = time.time()
    ctx.log_file(cell.id).parent.mkdir(parents=True, exist_ok=True)
    with open(ctx.log_file(cell.id), "a", encoding="utf-8") as f, \
            contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        result = EXECUTORS[cell.kind](cell, plan, ctx)
    record = {"id": cell.id, "kind": cell.kind, "params": _as_json(cell.params), "result": result,
              "time_s": round(time.time() - started, 2), "estimate_s": round(cell.estimate_s, 1),
              "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "uid": uuid.uuid4().hex,
              "needs": {n: done[n].get("uid") for n in cell.needs}}
    write_json(ctx.marker(cell.id), record)
    return record
