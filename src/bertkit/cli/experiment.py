"""`bertkit experiment NAME`: one of bertkit's experiments, run resumably and reported as it goes.

Each experiment (`bertkit experiment list`) is a list of cells; a finished cell's small record
is written under OUT/cells/ (by default docs/results/NAME, to be committed), the report
(report.md, report.json, PNGs) is redrawn after every cell from whatever records exist, and the
same command again skips what is done, in this session or a later one. Several processes may run
the same command at once on one folder (two one-thread processes on two cores); `--plan-only`
prints the cells and the time they need on this machine, from a short calibration.
"""

from __future__ import annotations

import argparse
import shlex

from bertkit.cli.args import device_name, positive_int


def _pairs(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key, value


def add_arguments(parser) -> None:
    from bertkit.experiments import EXPERIMENTS

    a = parser.add_argument
    a("name", choices=[*EXPERIMENTS, "list"], help="the experiment to run, or `list` to list them")
    a("--scale", default="", help="the experiment's scale (default: its first; `tiny` runs in seconds)")
    a("--out", help="results folder: experiment.json, cells/, report.md, report.json, PNGs "
                    "(default: docs/results/NAME at the default scale, runs/experiments/NAME-SCALE otherwise)")
    a("--work", help="work folder: what cells leave for later cells, logs, claims, the calibration "
                     "(default: runs/experiments/NAME/SCALE)")
    a("--only", type=lambda t: [p for p in t.split(",") if p], help="run only the cells whose ids match these "
                                                                   "comma-separated patterns (and what they need)")
    a("--set", type=_pairs, action="append", default=[], metavar="KEY=VALUE",
      help="an experiment setting over its default (for example corpus=a.txt,b.txt)")
    a("--plan-only", action="store_true", help="print the cells and their time on this machine; run nothing")
    a("--report-only", action="store_true", help="redraw the report from the records that exist; run nothing")
    a("--calibrate", action="store_true", help="measure this machine's rates again before estimating")
    a("--processes", type=positive_int, default=2, help="processes the estimate assumes share the folder")
    a("--device", type=device_name, default="auto", help="auto, cpu, cuda or mps")


def _env(pairs) -> dict:
    env = {}
    for key, value in pairs:
        env[key] = value.split(",") if key == "corpus" else value
    return env


def run(args) -> int:
    from bertkit.experiments import EXPERIMENTS, get_experiment
    from bertkit.experiments.run import Job, run_experiment
    from bertkit.experiments.runner import Stopped
    from bertkit.train.stop import Stopped as SeedStopped

    if args.name == "list":
        for name in EXPERIMENTS:
            exp = get_experiment(name)
            print(f"{name}: {exp.title} (scales {', '.join(exp.scales)}; {exp.cost})")
        return 0
    exp = get_experiment(args.name)
    job = Job(args.name, args.scale, args.out, args.work, _env(args.set), args.only, args.processes, args.device)
    log = lambda line: print(line, flush=True)  # noqa: E731
    try:
        return run_experiment(exp, job, log, plan_only=args.plan_only, report_only=args.report_only,
                              force_calibration=args.calibrate)
    except (Stopped, SeedStopped) as e:  # a pretraining's or a fine-tuning's checkpoint is saved
        status = e.status if isinstance(e, Stopped) else e.exit_code
        print(f"bertkit experiment: stopped; `{shlex.join(['bertkit', 'experiment', args.name])} ...` again "
              f"continues (exit status {status})", flush=True)
        return status
