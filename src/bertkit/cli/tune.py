"""`bertkit tune`: search fine-tuning's hyper-parameters with Optuna (TPE, median pruning).

Takes `bertkit finetune`'s flags (the same builder, the same checks) for the model, task and
data, and searches --lr, --epochs, --batch-size, --warmup and --weight-decay: each over a default
range that `--search NAME=SPEC,...` changes, or fixed when the flag is given. Each trial trains
one seed (--seeds, one) in this process and is scored by its best evaluation's dev metric
(--metric-for-best; evaluations after each epoch, or every --eval-every steps). The study is
kept in OUT/study.db: the same command again continues it up to --trials finished trials.

Writes into OUT: study.db, trials.json (every trial: state, values, the dev metric at each
evaluation), best.json (the best trial and the `bertkit finetune` command that trains its model
again, into OUT/best) and trials.png. No model is saved per trial.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from bertkit.cli import finetune
from bertkit.cli.args import (
    add_option_flags,
    check_output_dir,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
)
from bertkit.errors import UserError

SEARCHED_FLAGS = ("--lr", "--epochs", "--batch-size", "--warmup", "--weight-decay")
TUNE_ONLY = ("trials", "timeout", "search", "prune_startup", "prune_warmup")  # not `bertkit finetune` flags
NOT_SETTINGS = ("out", "overwrite", "threads", "no_progress", "trials", "timeout", "prune_startup", "prune_warmup",
                "save_every")


def _redefine(parser, flag: str, **changes) -> None:
    """Give an option of finetune's builder its meaning in tune (argparse has no public way)."""
    action = parser._option_string_actions[flag]
    for name, value in changes.items():
        setattr(action, name, value)


def add_arguments(parser) -> None:
    from bertkit.finetune.hyper import Hyper
    from bertkit.finetune.search_space import DEFAULT_SEARCH, parse_search

    finetune.add_arguments(parser, resume=False)  # the same command again continues a study
    add_option_flags(parser, Hyper, ("save_every",))
    for flag in SEARCHED_FLAGS:
        name = flag[2:]
        _redefine(parser, flag, default=None, help=f"fix {name} at this value instead of searching it (--search)")
    _redefine(parser, "--out", help="the study's folder: study.db (the same command again continues it), "
                                    "trials.json, best.json, trials.png")
    _redefine(parser, "--overwrite", help="start a new study, replacing the one in --out (default: continue it)")
    _redefine(parser, "--seeds", default="1", metavar="SEED",
              help="every trial's training seed (one); the sampler's seed is derived from it")
    _redefine(parser, "--metric-for-best",
              help="the dev metric a trial is scored by, at its best evaluation (greater is better; lower for a "
                   "name ending in 'loss'; default: the task's main metric)")
    _redefine(parser, "--report-to", help="none: tune's record is OUT/trials.json and trials.png "
                                          "(--report-to tensorboard is bertkit finetune's)")
    a = parser.add_argument
    a("--trials", required=True, type=positive_int, metavar="N",
      help="finished trials (complete or pruned) the study should hold; a rerun adds the missing ones")
    a("--timeout", type=positive_float, default=None, metavar="SECONDS",
      help="start no new trial after this many seconds (the running one finishes; default: no limit)")
    a("--search", type=parse_search, default=None, metavar="NAME=SPEC,...",
      help="ranges to search, over the defaults: LOW:HIGH, LOW:HIGH:log or A|B|C for lr, epochs, batch-size, "
           f"warmup, weight-decay (defaults {DEFAULT_SEARCH}; --feature-based lr=1e-4:1e-2:log)")
    a("--prune-startup", type=nonnegative_int, default=3, metavar="N",
      help="median pruning: no trial is stopped before N trials have completed")
    a("--prune-warmup", type=nonnegative_float, default=0.0, metavar="EPOCHS",
      help="median pruning: nor before this epoch (0: from the first evaluation)")


def check(args) -> None:
    if importlib.util.find_spec("optuna") is None:
        raise UserError("bertkit tune needs Optuna: pip install 'bertkit[tune]' (or pip install optuna)")
    finetune.check_job(args)
    if len(args.seeds) != 1:
        raise UserError("--seeds: a trial trains one seed; give one (the study compares trials on the same seed)")
    if args.report_to != "none":
        raise UserError(f"--report-to {args.report_to} applies to bertkit finetune; tune's record is "
                        "OUT/trials.json and trials.png")
    args.space = _space(args)
    check_output_dir(args.out, "--out", overwrite=True, markers=("study.db",), what="study")


def _space(args):
    from bertkit.finetune.search_space import build_space

    given = {flag[2:].replace("-", "_"): None for flag in SEARCHED_FLAGS}
    given = {name: getattr(args, name) for name in given}
    try:
        return build_space(given, args.search, args.feature_based)
    except ValueError as e:
        raise UserError(str(e)) from None


def run(args) -> int:
    from bertkit.finetune.tune import TuneJob, run_study

    space = args.space
    flags = {k: v for k, v in vars(args).items() if k not in (*TUNE_ONLY, "space")}
    settings = {k: v for k, v in flags.items() if k not in NOT_SETTINGS}
    settings["search"] = [d.spec() for d in space.dims]
    tj = TuneJob(job=finetune.job_from_args(args), space=space, trials=args.trials, timeout=args.timeout,
                 metric=args.metric_for_best, seed=args.seeds[0], prune_startup=args.prune_startup,
                 prune_warmup=args.prune_warmup, overwrite=args.overwrite, settings=settings, finetune_args=flags)
    from bertkit.train.stop import Stopped

    try:
        best = run_study(tj, log=lambda line: print(line, flush=True))
    except Stopped as e:
        print(e, flush=True)
        return e.exit_code
    out = Path(args.out)
    if not best:
        print(f"no trial completed; the study is in {out / 'study.db'}, its trials in {out / 'trials.json'}")
        return 0
    params = ", ".join(f"{k.replace('_', '-')} {v:.4g}" if isinstance(v, float) else f"{k.replace('_', '-')} {v}"
                       for k, v in best["params"].items())
    print(f"best: trial {best['trial']}, dev {best['metric']} {best['value']:.4g} at step {best['best_step']} "
          f"({params})")
    print("train its model again with:")
    print(f"  {best['command']}")
    print(f"study in {out / 'study.db'}; trials in {out / 'trials.json'} and {out / 'trials.png'}; "
          f"best in {out / 'best.json'}")
    return 0
