"""What the pretrain-then-fine-tune experiments share (the shape sweep, Table 5's compute curve,
the descendants table): an ablation plan's cells as runner cells, their executor, and their
calibration.

The cells are the ablation's (`bertkit.ablate.cells`: vocabulary, prepared data, task subsets,
pretraining, fine-tuning), each given the rate it is timed by and its units: a pretraining's
steps ("pretrain/SIZE/OBJECTIVE/FORMAT"), a fine-tuning's training examples x epochs
("finetune/TASK/HOW/SIZE"). Calibration runs the real thing, small: the setup cells for real
(they are the plan's own and are kept), then in `work/calibration/` each pretraining rate at two
lengths (the difference gives seconds per step, the rest is the fixed cost of building, loading and
validating) and each fine-tuning rate on two subset sizes of its task from the small model.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

from bertkit.ablate.plan import Plan
from bertkit.ablate.scales import TaskSize
from bertkit.experiments.calibrate import line as _line
from bertkit.experiments.calibrate import timed as _timed
from bertkit.experiments.core import Cell, Context

SETUP = ("vocab", "data", "tasks")
CAL_STEPS = (20, 60)  # the two pretraining lengths calibration times (validated once, at the end)
CAL_EXAMPLES = (48, 144)  # the two fine-tuning subset sizes (SQuAD: articles 1 and 2)


def rate_of(cell: Cell, plan: Plan) -> tuple[str, float]:
    """A cell's rate key and units."""
    if cell.kind == "pretrain":
        steps = cell.param("steps") or plan.scale.steps
        return f"pretrain/{cell.param('size')}/{cell.param('objective')}/{cell.param('format')}", float(steps)
    if cell.kind == "finetune":
        size = _size_of(plan, cell.param("variant"))
        units = float(cell.param("train") * cell.param("epochs"))
        return f"finetune/{cell.param('task')}/{cell.param('how')}/{size}", units
    return cell.kind, 1.0


def _size_of(plan: Plan, variant: str) -> str:
    return next(c.param("size") for c in plan.cells if c.id == f"pretrain/{variant}")


def runner_cells(plan: Plan) -> list[Cell]:
    """The plan's cells with their rates, units and what they keep."""
    out = []
    for c in plan.cells:
        rate, units = rate_of(c, plan)
        out.append(dataclasses.replace(c, rate=rate, units=units, keeps=c.kind != "finetune", estimate_s=0.0))
    return out


def ablation_context(ctx: Context, work: Path | None = None):
    """The ablation cells' context over the runner's (corpus, task data and workers from `env`)."""
    from bertkit.ablate.cells import Context as AblationContext

    env = ctx.env
    return AblationContext(work=Path(work or ctx.work), records=ctx.records, scale=ctx.scale, env=env,
                           device=ctx.device, corpus=list(env["corpus"]), data_dir=Path(env["data_dir"]),
                           workers=int(env.get("workers", 1)))


def executor(plan_of):
    """The runner's executor: `plan_of(scale, env)` gives the ablation plan whose cells these are."""
    from bertkit.ablate.cells import EXECUTORS

    def execute(cell: Cell, ctx: Context) -> dict:
        return EXECUTORS[cell.kind](cell, plan_of(ctx.scale, ctx.env), ablation_context(ctx))

    return execute


def parts(plan_of):
    """An experiment's plan, execute and calibrate over the ablation plan `plan_of(scale)` gives:
    what every pretrain-then-fine-tune experiment declares the same way."""
    execute = executor(lambda scale, env: plan_of(scale))

    def plan(scale: str, env: dict) -> list[Cell]:
        return runner_cells(plan_of(scale))

    def calibrate_cells(scale: str, cells: list[Cell], ctx: Context) -> dict[str, tuple[float, float]]:
        return calibrate(plan_of(scale), cells, ctx, execute)

    return plan, execute, calibrate_cells


def calibrate(plan: Plan, cells: list[Cell], ctx: Context, execute) -> dict[str, tuple[float, float]]:
    """Each rate of `cells` timed on this machine (see the module docstring)."""
    from bertkit.experiments.runner import run_cells

    setup = [c for c in runner_cells(plan) if c.kind in SETUP]
    # one validation per calibration run, so the two lengths differ by their steps alone
    plan = dataclasses.replace(plan, scale=dataclasses.replace(plan.scale, eval_points=1))
    started = time.time()
    done = run_cells(setup, execute, ctx, log=lambda line: None)  # the plan's own setup cells, kept
    out = {c.kind: (0.0, 0.0) for c in setup}
    out.update({r["kind"]: (r["time_s"], 0.0) for r in done.values() if r.get("time_s") and r["time_s"] < 1e9})
    if time.time() - started > 1:
        out["_setup_s"] = (time.time() - started, 0.0)
    cal = ablation_context(ctx, ctx.work / "calibration")
    for sub in ("vocab", "data"):
        link = cal.path(sub)
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(ctx.path(sub).resolve(), target_is_directory=True)
    wanted = {c.rate_key: c for c in cells}
    pretrains = {c.id: c for c in runner_cells(plan) if c.kind == "pretrain"}
    models: set[str] = set()  # the pretraining cells whose calibration model exists
    for pre in pretrains.values():
        if pre.rate_key in wanted and pre.rate_key not in out:
            times = [_timed(lambda n=n, pre=pre: _short_pretrain(pre, n, plan, cal)) for n in CAL_STEPS]
            out[pre.rate_key] = _line(*times, *CAL_STEPS)
            models.add(pre.id)
    for key, c in wanted.items():
        if c.kind == "finetune" and key not in out:
            pre = pretrains[f"pretrain/{c.param('variant')}"]
            if pre.id not in models:
                _short_pretrain(pre, CAL_STEPS[0], plan, cal)
                models.add(pre.id)
            out[key] = _finetune_rate(c, plan, cal)
    return out


def _short_pretrain(pre: Cell, steps: int, plan: Plan, cal) -> None:
    from bertkit.ablate.cells import EXECUTORS

    cell = _with_params(pre, steps=steps)
    shutil.rmtree(cal.path(cell.id), ignore_errors=True)
    EXECUTORS["pretrain"](cell, plan, cal)


def _with_params(cell: Cell, **changes) -> Cell:
    params = dict(cell.params)
    params.update(changes)
    return dataclasses.replace(cell, params=tuple(params.items()))


def _finetune_rate(cell: Cell, plan: Plan, cal) -> tuple[float, float]:
    """A fine-tuning's rate from the calibration model of its size, on two small subsets of its task."""
    from bertkit.ablate.cells import EXECUTORS
    from bertkit.ablate.taskdata import write_task_subset

    task = cell.param("task")
    counts = (1, 2) if task == "squad" else CAL_EXAMPLES
    times = []
    full: TaskSize = plan.scale.tasks[task]
    for n in counts:
        folder = cal.path(f"tasks/{task}")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        small = dataclasses.replace(full, train=n, dev=1 if task == "squad" else 32)
        write_task_subset(task, cal.data_dir, folder, small)
        probe = _with_params(cell, train=n, epochs=1)
        probe = dataclasses.replace(probe, id=f"finetune/calibration/{task}")
        times.append(_timed(lambda probe=probe: EXECUTORS["finetune"](probe, plan, cal)))
    return _line(*times, *counts)
