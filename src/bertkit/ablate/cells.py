"""Running a plan's cells: each cell once, atomically, skipping the ones already done.

A finished cell leaves `work/done/<cell>.json` (its result, written atomically, last of all);
a cell without that file is not done, whatever else it left, and runs again: half-written
folders (the `.NAME.*.tmp` of `bertkit.io`'s atomic writers) are removed first, and a
pretraining continues from its newest checkpoint (`pretrain --resume`), so a killed ablation
loses at most the fine-tuning that was running and the steps since the last checkpoint. Each
cell's own output (status lines, fine-tuning logs) goes to `work/logs/<cell>.log`; the console
gets one progress line per cell: cells done / total and the estimated time left.

Several processes may run the same command on one folder at once (each with its own threads,
e.g. two one-thread processes on two cores): a process claims a cell by creating
`work/claims/<cell>` exclusively before running it, takes the first cell whose needs are done
and that nobody holds, and waits while the cells left are held by others. A claim whose process
has died is stale and is taken over, so a killed process's cell runs again.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from bertkit.ablate.plan import Cell, Plan
from bertkit.ablate.taskdata import TASK_FILES, write_task_subset
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

    def path(self, cell_id: str) -> Path:
        return self.work / cell_id

    def marker(self, cell_id: str) -> Path:
        return self.work / "done" / (cell_id.replace("/", "__") + ".json")

    def log_file(self, cell_id: str) -> Path:
        return self.work / "logs" / (cell_id.replace("/", "__") + ".log")

    def claim_file(self, cell_id: str) -> Path:
        return self.work / "claims" / cell_id.replace("/", "__")

    def claim(self, cell_id: str) -> bool:
        """Hold `cell_id` for this process; False while another live process holds it."""
        path = self.claim_file(cell_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if _holder_alive(path):
                    return False
                path.unlink(missing_ok=True)  # stale: its process died
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return True
        return False

    def held_by_others(self, cell_id: str) -> bool:
        path = self.claim_file(cell_id)
        return path.is_file() and _holder(path) != os.getpid() and _holder_alive(path)

    def release(self, cell_id: str) -> None:
        path = self.claim_file(cell_id)
        if path.is_file() and _holder(path) == os.getpid():
            path.unlink(missing_ok=True)


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _holder_alive(path: Path) -> bool:
    pid = _holder(path)
    if pid is None:  # being written this instant, or unreadable: treat as held
        return path.exists()
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_done(ctx: Context, plan: Plan) -> dict[str, dict]:
    """cell id -> its record, for the plan's finished cells."""
    out = {}
    for cell in plan.cells:
        marker = ctx.marker(cell.id)
        if marker.is_file():
            out[cell.id] = read_json(marker, "a finished cell's record")
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

    options = PrepareOptions(max_seq_len=plan.scale.max_seq_len, format=cell.param("format"), val_fraction=0.02,
                             workers=ctx.workers)
    manifest = prepare_corpus(ctx.corpus, ctx.path("vocab"), ctx.path(cell.id), options)
    return {"corpus": manifest["corpus"], "splits": manifest.get("splits", {})}


def _tasks(cell: Cell, plan: Plan, ctx: Context) -> dict:
    task = cell.param("task")
    with atomic_dir(ctx.path(cell.id)) as tmp:
        counts = write_task_subset(task, ctx.data_dir, tmp, plan.scale.tasks[task])
    return counts


def _pretrain(cell: Cell, plan: Plan, ctx: Context) -> dict:
    import json

    from bertkit.pretrain import TrainConfig, pretrain

    s = plan.scale
    preset, overrides = s.shape(cell.param("size"))
    out = ctx.path(cell.id)
    cfg = TrainConfig(data=str(ctx.path(f"data/{cell.param('format')}")), out=str(out), preset=preset,
                      steps=s.steps, objective=cell.param("objective"), batch_size=s.batch_size, lr=s.lr,
                      warmup=s.warmup, dropout=s.dropout, mask_rule=cell.param("mask_rule"),
                      precision=s.precision, compile=s.compile,
                      save_every=max(1, s.steps // 8), eval_every=s.steps, log_every=max(1, s.steps // 20),
                      eval_samples=s.eval_samples, keep=1, seed=0, resume=True, device=ctx.device,
                      config_overrides=dict(overrides))
    status = pretrain(cfg)
    if status != 0:
        raise Stopped(status)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    val = next((r for r in reversed(records) if r.get("kind") == "val"), {})
    train = next((r for r in reversed(records) if r.get("kind") == "train"), {})
    result = {"steps": train.get("step"), "val": val, "train_loss": train.get("loss")}
    if "mlm_loss" in val:
        result["ppl"] = math.exp(val["mlm_loss"])
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the model is in out/model; resuming is over
    return result


def _finetune(cell: Cell, plan: Plan, ctx: Context) -> dict:
    from bertkit.ablate.plan import feature_layers, num_layers
    from bertkit.ablate.tables import LTR, LTR_BILSTM
    from bertkit.finetune.loop import Hyper
    from bertkit.finetune.run import FinetuneJob, run_job

    s, task, how = plan.scale, cell.param("task"), cell.param("how")
    size = s.tasks[task]
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
    hyper = Hyper(epochs=size.epochs, lr=s.feature_lr if feature else size.lr, batch_size=size.batch_size,
                  seeds=(cell.param("seed"),), group_by_length=True)
    job = FinetuneJob(model=str(ctx.path(f"pretrain/{cell.param('variant')}") / "model"),
                      task="ner" if task == "conll" else task, train=train, dev=dev, out=str(out), hyper=hyper,
                      max_seq_len=size.max_seq_len, feature_based=feature, layers=layers, combine=combine,
                      device=ctx.device, precision=_precision(s, ctx), progress=False)
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

    return resolve_precision(scale.precision, resolve_device(ctx.device))


def _variant_size(plan: Plan, variant: str) -> str:
    return next(r.variant.size for r in plan.rows if r.variant.name == variant)


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
        cell = next((c for c in left if all(n in done for n in c.needs) and ctx.claim(c.id)), None)
        if cell is None:
            if not any(ctx.held_by_others(c.id) for c in left):
                missing = next(n for c in left for n in c.needs if n not in done)
                raise UserError(f"cell {left[0].id} needs {missing}, which did not finish")
            time.sleep(poll_s)  # what is left waits on cells other processes are running
            continue
        if ctx.marker(cell.id).is_file():  # another process finished it between our read and our claim
            ctx.release(cell.id)
            continue
        try:
            done[cell.id] = _run_cell(cell, plan, ctx)
        finally:
            ctx.release(cell.id)
        others = sum(ctx.held_by_others(c.id) for c in left)
        progress.finished(cell, done[cell.id]["time_s"], 1 + others)


def _run_cell(cell: Cell, plan: Plan, ctx: Context) -> dict:
    """Run one claimed cell; its record, written last (the cell is done once the file exists)."""
    _clear_partial(ctx.path(cell.id))
    started = time.time()
    ctx.log_file(cell.id).parent.mkdir(parents=True, exist_ok=True)
    with open(ctx.log_file(cell.id), "a", encoding="utf-8") as f, \
            contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        result = EXECUTORS[cell.kind](cell, plan, ctx)
    record = {"id": cell.id, "kind": cell.kind, "params": dict(cell.params), "result": result,
              "time_s": round(time.time() - started, 2), "estimate_s": round(cell.estimate_s, 1),
              "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_json(ctx.marker(cell.id), record)
    return record
