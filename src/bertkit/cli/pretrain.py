"""`bertkit pretrain --data DATA_DIR --out RUN_DIR`: pretrain BERT (MLM + NSP, MLM only, LTR, or
ELECTRA's replaced-token detection).

Under `torchrun --nproc-per-node N` the same command trains data-parallel; --batch-size is the
global batch, split over processes and --grad-accum micro-steps, so results do not depend on N.
With --init-from DIR it continues pretraining an existing model (domain adaptation): the
data must be prepared with DIR's vocab.txt, and the run's model/ is DIR's model after it.
SIGTERM or Ctrl-C saves a checkpoint and exits with status 143 or 130 (128 + the signal).
--recipe paper|budget fills the optimisation flags the user did not give (bertkit.pretrain.recipes).
Every flag is made from its `TrainOptions` field (bertkit.pretrain.setup: help, default, choices or
range, resume rule), and every check of the options together is TrainConfig's: `check` prints its
error with flags for field names.
"""

from __future__ import annotations

import argparse
import dataclasses

from bertkit.cli.args import (
    add_option_flags,
    check_report_to,
    device_name,
    existing_dir,
    json_object,
    model_dir,
    tokenizer_dir,
)
from bertkit.errors import UserError
from bertkit.pretrain.recipes import RECIPE_FIELDS, RECIPES
from bertkit.pretrain.setup import TrainOptions


def recipe_help(name: str) -> str:
    """'(default: paper X, budget Y)' for the help of a flag a recipe fills."""
    values = [f"{r} {'the model config' if v[name] is None else v[name]}" for r, v in RECIPES.items()]
    return f"(default: {', '.join(values)})"


def preset_name(text: str) -> str:
    from bertkit.config import PRESETS

    if text not in PRESETS:
        raise argparse.ArgumentTypeError(f"unknown preset {text!r}; choose from {', '.join(PRESETS)}")
    return text


def mask_rule(text: str) -> str:
    """M/R/K, read by the one parser of a masking rule (it imports torch: argparse reaches it only
    once every flag has parsed, when the run imports torch anyway)."""
    from bertkit.data.masking import MaskingConfig

    try:
        MaskingConfig.from_rule(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


# flags whose values need more than a range or choices to read (paths, names, JSON)
TYPES = {"data": existing_dir, "preset": preset_name, "mask_rule": mask_rule, "device": device_name,
         "tokenizer": tokenizer_dir, "init_from": model_dir, "config_overrides": json_object}
REQUIRED = ("data", "out")
ONE_OF = ("steps", "minutes")  # a run's length: give one


def add_arguments(parser) -> None:
    """One flag per `TrainOptions` field, made from the field (`add_option_flags`): its name (or
    declared flag), help, default, choices or range, metavar and type; the recipe's fields say what
    each recipe gives them. Only --mask-all is extra: another spelling of --mask-rule 100/0/0."""
    add_option_flags(parser, TrainOptions, types=TYPES, required=REQUIRED,
                     group=parser.add_mutually_exclusive_group(), group_names=ONE_OF,
                     extra_help=lambda name: " " + recipe_help(name) if name in RECIPE_FIELDS else "")
    parser.add_argument("--mask-all", action="store_true",
                        help="ablation: chosen tokens always become [MASK] (--mask-rule 100/0/0)")


def check(args) -> None:
    """Every check of the options together is TrainConfig's: its error, in flags."""
    from bertkit.pretrain.setup import OptionError

    try:
        train_config(args)
    except OptionError as e:
        raise UserError(e.flags()) from None
    check_report_to(args)


def train_config(args):
    """The TrainConfig the flags name: every field from its flag."""
    from bertkit.pretrain.setup import TrainConfig

    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainOptions)}
    options["config_overrides"] = options["config_overrides"] or {}
    if args.mask_all:
        options["mask_rule"] = "100/0/0"
    return TrainConfig(**options)


def run(args) -> int:
    from bertkit.pretrain.loop import pretrain

    return pretrain(train_config(args))
