"""The ablation's cells and what runs each: the vocabulary, one prepared data format, the task
subsets, one pretraining, one fine-tuning (or feature-based tagger) with one seed.

The running itself (records, claims, skipping what is done, remaking a needed cell's files) is the
one experiment runner's, `bertkit.experiments.runner`; `execute(plan)` is what it calls for a cell
of an ablation plan. A pretraining continues from its newest checkpoint (`pretrain --resume`), so a
killed run loses at most the fine-tuning that was running and the steps since the last checkpoint.
The ablation keeps its records in `work/done/`; the experiments that reuse these cells (Table 5's
compute curve, the shape sweep) keep theirs under docs/results/NAME/cells/.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.ablate.plan import Cell, Plan
from bertkit.ablate.taskdata import TASK_FILES, majority_baseline, write_task_subset
from bertkit.experiments import core
from bertkit.experiments.runner import Stopped, read_done, run_cells
from bertkit.io import atomic_dir, read_json

__all__ = ["EXECUTORS", "Context", "Stopped", "execute", "read_done", "run_cells"]


@dataclass
class Context(core.Context):
    """What the ablation's cells read besides the runner's folders: the corpus, the task data
    folder, tokenizing workers, where live curves go."""

    corpus: list[str] = field(default_factory=list)
    data_dir: Path = Path(".")
    workers: int = 1
    report_to: str = "none"  # each pretraining's and fine-tuning's live curves (bertkit.tracking)

    @classmethod
    def for_ablation(cls, work: Path, corpus, data_dir, device="auto", workers=1, report_to="none") -> Context:
        """An ablation's context: its records in work/done/."""
        return cls(work=Path(work), records=Path(work) / "done", device=device, corpus=list(corpus),
                   data_dir=Path(data_dir), workers=workers, report_to=report_to)

    def marker(self, cell_id: str) -> Path:
        return self.record_file(cell_id)


def execute(plan: Plan):
    """The runner's executor for this plan's cells."""
    return lambda cell, ctx: EXECUTORS[cell.kind](cell, plan, ctx)


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
                      eval_every=max(1, steps // s.eval_points) if "steps" in length else 10**9,  # and at the end
                      keep=1, seed=0, resume=True, device=ctx.device, report_to=ctx.report_to)
    status = pretrain(cfg)
    if status != 0:
        raise Stopped(status)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    val = next((r for r in reversed(records) if r.get("kind") == "val"), {})
    train = next((r for r in reversed(records) if r.get("kind") == "train"), {})
    curve = [{k: v for k, v in r.items() if k == "step" or k.endswith("_accuracy")}
             for r in records if r.get("kind") == "val"]
    result = {"steps": train.get("step"), "elapsed_s": train.get("elapsed"), "val": val, "val_curve": curve,
              "train_loss": train.get("loss"), "precision": _precision(s, ctx),
              **({"minutes": length["minutes"]} if "minutes" in length else {})}
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
