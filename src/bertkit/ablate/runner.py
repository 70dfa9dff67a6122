"""`bertkit ablate` as one library call: plan, run the cells not yet done, write the report.

OUT holds `ablation.json` (the scale, corpus and task data the folder was started with: a rerun
with others is refused, as they would mix results), `work/` (the cells' folders, logs and
records) and the report (report.md, report.json, one PNG per table). Running the same command
again continues where it stopped; other --seeds, --tasks or --only add or leave out cells.
The two steps before a full run share the folder and its cells: `mode` "tune-lr" (short
pretrainings per objective and lr -> lr-tuning.json, `tune.py`) and "check-tasks" (the
reference's own cells, each task against its majority class -> task-check.json, `check.py`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bertkit.ablate.cells import Context, execute, read_done, run_cells
from bertkit.ablate.check import check_plan, render_check, task_check
from bertkit.ablate.plan import Plan, build_plan
from bertkit.ablate.report import build_report, write_report
from bertkit.ablate.tune import render_tune, tune_plan, tune_result
from bertkit.errors import UserError
from bertkit.io import read_json, write_json

FOLDER_FILE = "ablation.json"
MODES = ("run", "tune-lr", "check-tasks")  # the full run; the lr tuning; the task check


@dataclass
class AblationJob:
    corpus: list[str]
    out: str
    scale: str = "cpu-small"
    seeds: tuple[int, ...] = (1, 2, 3)
    tasks: tuple[str, ...] | None = None  # None: every task
    only: list[str] | None = None  # table or row keys; None: every row
    data_dir: str = "../shared/data"
    device: str = "auto"
    workers: int = 1
    command: str = ""
    mode: str = "run"  # one of MODES
    report_to: str = "none"  # every cell's live curves: bertkit.tracking.REPORT_TO (in its own folder's tensorboard/)


def plan_for(job: AblationJob) -> Plan:
    if job.mode == "tune-lr":
        return tune_plan(job.scale)
    if job.mode == "check-tasks":
        return check_plan(job.scale, job.seeds, job.tasks)
    return build_plan(job.scale, job.seeds, job.tasks, job.only)


def estimated_plan(job: AblationJob, calibrate_now: bool = False, log=print) -> tuple[Plan, str]:
    """The job's plan with each cell's estimate from this CPU's rates where they are known (OUT's
    calibration, its finished cells' own times; with `calibrate_now` the missing ones measured first,
    as `bertkit experiment` does), the scale's constant rates (ablate/scales.py) for the rest; and a
    line saying which."""
    from bertkit.experiments import calibrate, core, pretraining
    from bertkit.experiments.machine import cpu_key

    plan = plan_for(job)
    work = Path(job.out) / "work"
    env = {"corpus": list(job.corpus), "data_dir": job.data_dir, "workers": job.workers}
    ctx = core.Context(work, work / "done", job.scale, env, job.device)
    cells = pretraining.runner_cells(plan)
    done = read_done(cells, ctx)
    if calibrate_now:
        check_folder(job)
        if not (Path(job.out) / FOLDER_FILE).is_file():
            _start_folder(job)
        plan_cells, execute_cell, calibrate_cells = pretraining.parts(lambda scale: plan)
        exp = core.Experiment(name="ablate", title="bertkit ablate", scales=(job.scale,), plan=plan_cells,
                              execute=execute_cell, report=None, calibrate=calibrate_cells)
        rates = calibrate.rates(exp, job.scale, [c for c in cells if c.id not in done], ctx, log, records=done)
    else:
        rates = calibrate.known_rates(ctx, done)
    measured = {c.id: est.estimate_s for c, est in zip(cells, calibrate.with_estimates(cells, rates))
                if c.rate_key in rates}
    estimated = dataclasses.replace(plan, cells=[dataclasses.replace(c, estimate_s=measured.get(c.id, c.estimate_s))
                                                 for c in plan.cells])
    source = f"rates measured on this CPU ({cpu_key()}) for {len(measured)} of {len(cells)} cells"
    if len(measured) < len(cells):
        source += (f"; the scale's constant rates (ablate/scales.py, measured for cpu-small) for the other "
                   f"{len(cells) - len(measured)} (--plan-only --calibrate with --corpus measures them here)")
    return estimated, source


def check_folder(job: AblationJob) -> None:
    """OUT must be new, empty, or an ablation started with the same scale, corpus and task data."""
    out = Path(job.out)
    if out.exists() and not out.is_dir():
        raise UserError("is a file; --out names the ablation's folder", out)
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not (out / FOLDER_FILE).is_file():
        raise UserError(f"is a folder of other files, not an ablation (no {FOLDER_FILE}); choose another --out", out)
    saved = read_json(out / FOLDER_FILE, "an ablation's settings")
    now = _identity(job)
    differ = [f"{k} {saved.get(k)!r} -> {v!r}" for k, v in now.items() if saved.get(k) != v]
    if differ:
        raise UserError(f"was started with other settings ({'; '.join(differ)}): continuing would mix results; "
                        f"choose another --out", out)


def _identity(job: AblationJob) -> dict:
    return {"scale": job.scale, "corpus": [str(Path(p).resolve()) for p in job.corpus],
            "data_dir": str(Path(job.data_dir).resolve())}


def _start_folder(job: AblationJob) -> None:
    """Create OUT holding its ablation.json in one rename, so a second process started at the same
    moment sees either no folder or a complete one; if another process won, check its settings."""
    out = Path(job.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.{os.getpid()}.tmp"
    tmp.mkdir()
    write_json(tmp / FOLDER_FILE, _identity(job))
    try:
        os.rename(tmp, out)  # also replaces an empty OUT
    except OSError:  # OUT exists with files: another process started it first
        shutil.rmtree(tmp, ignore_errors=True)
        check_folder(job)


# The modes that check before a full run: the file each writes, what it computes, how it prints.
CHECKS = {"tune-lr": ("lr-tuning.json", tune_result, render_tune),
          "check-tasks": ("task-check.json", task_check, render_check)}


def report_now(job: AblationJob, plan: Plan, ctx: Context, meta: dict, log=print) -> dict:
    """What the job's mode writes from the cells done so far: the report, lr-tuning.json or task-check.json."""
    records = read_done(plan.cells, ctx)
    out = Path(job.out)
    if job.mode in CHECKS:
        name, compute, render = CHECKS[job.mode]
        result = {**meta, **compute(plan, records)}
        write_json(out / name, result)
        for line in render(result):
            log(line)
        return result
    report = build_report(plan, records, meta)
    write_report(out, report)
    log(f"report: {out / 'report.md'} ({report['cells']['done']} of {report['cells']['total']} cells done)")
    return report


def run_ablation(job: AblationJob, log=print, report_only: bool = False) -> dict:
    """Run the cells of `job` not yet done (none with report_only), then write what its mode writes."""
    if job.mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {job.mode!r}")
    plan = plan_for(job)
    check_folder(job)
    out = Path(job.out)
    if report_only and not (out / FOLDER_FILE).is_file():
        raise UserError(f"--report-only needs an ablation's folder (no {FOLDER_FILE} here)", out)
    ctx = Context.for_ablation(out / "work", job.corpus, job.data_dir, job.device, job.workers, job.report_to)
    started = time.time()
    meta = {"command": job.command, "job": {**asdict(job), "seeds": list(job.seeds)},
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if report_only:
        return report_now(job, plan, ctx, meta, log)
    if not (out / FOLDER_FILE).is_file():
        _start_folder(job)
    try:
        run_cells(plan.cells, execute(plan), ctx, log)
    finally:  # a stopped run still leaves the report of what is done
        meta["wall_s"] = round(time.time() - started, 1)
        result = report_now(job, plan, ctx, meta, log)
    return result
