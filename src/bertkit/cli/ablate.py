"""`bertkit ablate --corpus PATH... --out DIR`: the paper's ablations (Tables 5-8) as one command.

From one corpus and one vocabulary it pretrains every variant (MLM + NSP, no NSP, LTR, model
sizes, masking rules) with the same data and steps, fine-tunes or probes each on MRPC, SST-2,
SQuAD and CoNLL-2003 with every seed, and writes OUT/report.md, report.json and a PNG per table,
beside the paper's figures; `--scale cpu-curve` runs Table 5 along a compute axis instead (each
objective at three budgets of equal FLOPs, on SST-2, SQuAD, CoNLL-2003 and STS-B, with a PNG per
task of its score against pretraining FLOPs). Every cell is resumable: the same command again skips
what is done.
`--plan-only` lists the cells and the estimated time without running anything. Before a full
run, in the same folder: `--tune-lr` (each objective's lr on short pretrainings) and
`--check-tasks` (the reference's fine-tunings against each task's majority class).
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from bertkit.ablate.tables import TASKS
from bertkit.cli.args import (
    add_report_to,
    check_report_to,
    comma_ints,
    device_name,
    existing_dir,
    existing_path,
    positive_int,
)
from bertkit.errors import UserError


def _default_data_dir() -> str:
    return str(Path(os.environ.get("BERTKIT_SHARED", "../shared")) / "data")


def _names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("names nothing")
    return names


def _scale(text: str) -> str:
    from bertkit.ablate.scales import SCALES

    if text not in SCALES:
        raise argparse.ArgumentTypeError(f"unknown scale {text!r}; choose from {', '.join(SCALES)}")
    return text


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("--corpus", nargs="+", type=existing_path, metavar="PATH",
      help="pretraining text: files or folders (.txt, .gz, .xz); the vocabulary is learned from it too")
    a("--out", required=True, help="the ablation's folder: report.md, report.json, PNGs, work/ (rerun to continue)")
    a("--scale", type=_scale, default="cpu-small",
      help="tiny (tests), cpu-small (2 cores, ~3 h), cpu-curve (Table 5 at three compute budgets, 2 cores, ~6 h) "
           "or gpu (one H200)")
    a("--seeds", type=comma_ints(low=0, unique=True), default="1,2,3", help="fine-tuning seeds, comma-separated")
    a("--tasks", type=_names, default=None,
      help=f"comma-separated subset of {','.join(TASKS)} (default: every task of the chosen tables)")
    a("--only", type=_names, default=None,
      help="comma-separated tables (t5,t5-time,t6,t7,t8; t5-curve at a scale with a compute curve) or rows "
           "(t5-ltr, t8-100-0-0, t5-curve-ltr-x3, ...) to run (default: the scale's tables: the paper's, or "
           "cpu-curve's t5-curve)")
    a("--data-dir", type=existing_dir, default=None,
      help="the shared task data (glue/, squad/, ner/ as in ../shared/data; default $BERTKIT_SHARED/data, "
           "else ../shared/data)")
    a("--device", type=device_name, default="auto", help="auto, cpu, cuda or cuda:N")
    a("--workers", type=positive_int, default=1, help="tokenizing processes when preparing the corpus")
    a("--tune-lr", action="store_true",
      help="before a full run: short pretrainings per objective at the scale's candidate lrs, each scored by its "
           "own validation metric -> OUT/lr-tuning.json")
    a("--check-tasks", action="store_true",
      help="before a full run: the reference's pretraining and fine-tunings (the full run's first cells), each task "
           "against its majority class -> OUT/task-check.json")
    a("--plan-only", action="store_true", help="print the cells and the time estimate; run nothing")
    a("--calibrate", action="store_true",
      help="with --plan-only: first measure this CPU's rates for the cells not yet done (the setup cells for real, "
           "short pretrainings and fine-tunings in OUT/work/calibration; a few minutes; needs --corpus)")
    a("--report-only", action="store_true", help="write the report from the cells done so far; run nothing")
    add_report_to(parser, "each pretraining's OUT/work/pretrain/NAME/tensorboard and each fine-tuning's "
                          "OUT/work/finetune/.../tensorboard (tensorboard --logdir OUT/work)")


def check(args) -> None:
    from bertkit.ablate.runner import check_folder
    from bertkit.ablate.taskdata import source_files

    if args.plan_only and args.report_only:
        raise UserError("--plan-only and --report-only: choose one")
    if args.tune_lr and args.check_tasks:
        raise UserError("--tune-lr and --check-tasks: choose one (tune first, then check)")
    if (args.tune_lr or args.check_tasks) and args.only:
        raise UserError(f"--only does not apply to {'--tune-lr' if args.tune_lr else '--check-tasks'}")
    if args.tune_lr and args.tasks:
        raise UserError("--tasks does not apply to --tune-lr (it pretrains only)")
    if args.calibrate and not args.plan_only:
        raise UserError("--calibrate goes with --plan-only (a run calibrates from its own finished cells)")
    if args.calibrate and not args.corpus:
        raise UserError("--calibrate needs --corpus (it runs the setup cells and short pretrainings)")
    if not args.corpus and not (args.plan_only or args.report_only):
        raise UserError("--corpus is required (the pretraining text)")
    check_report_to(args)
    from bertkit.ablate.runner import plan_for

    plan = plan_for(job_from_args(args))
    if not args.plan_only:
        for task in {c.param("task") for c in plan.cells if c.kind == "tasks"}:
            source_files(task, Path(args.data_dir or _default_data_dir()))
        if args.corpus:
            check_folder(job_from_args(args))


def job_from_args(args):
    from bertkit.ablate.runner import AblationJob

    command = ["bertkit", "ablate", "--corpus", *(args.corpus or []), "--out", args.out, "--scale", args.scale,
               "--seeds", ",".join(map(str, args.seeds))]
    for flag, value in (("--tasks", args.tasks), ("--only", args.only)):
        if value:
            command += [flag, ",".join(value)]
    mode = "tune-lr" if args.tune_lr else "check-tasks" if args.check_tasks else "run"
    command += [] if mode == "run" else [f"--{mode}"]
    command += [] if args.report_to == "none" else ["--report-to", args.report_to]
    return AblationJob(corpus=list(args.corpus or []), out=args.out, scale=args.scale, seeds=tuple(args.seeds),
                       tasks=tuple(args.tasks) if args.tasks else None, only=args.only,
                       data_dir=args.data_dir or _default_data_dir(), device=args.device, workers=args.workers,
                       command=shlex.join(command), mode=mode, report_to=args.report_to)


def run(args) -> int:
    from bertkit.ablate.cells import Stopped
    from bertkit.ablate.plan import describe
    from bertkit.ablate.runner import estimated_plan, run_ablation

    job = job_from_args(args)
    if args.plan_only:
        plan, source = estimated_plan(job, calibrate_now=args.calibrate, log=lambda line: print(line, flush=True))
        print(describe(plan))
        print(source)
        return 0
    if not args.report_only:
        print(f"bertkit ablate: scale {job.scale}, pretraining and fine-tuning in {_precision(job)}", flush=True)
    try:
        report = run_ablation(job, log=lambda line: print(line, flush=True), report_only=args.report_only)
    except Stopped as e:
        print(f"bertkit ablate: stopped; the same command continues (exit status {e.status})", flush=True)
        return e.status
    if job.mode == "run":
        print("signs: " + (", ".join(f"{n} {v}" for v, n in report["verdicts"].items()) or "none yet"))
    return 0


def _precision(job) -> str:
    """The scale's precision ("auto" resolved on the job's device), which every cell runs in."""
    from bertkit.ablate.plan import get_scale
    from bertkit.devices import resolve_device, resolve_precision

    return resolve_precision(get_scale(job.scale).finetune_precision, resolve_device(job.device))
