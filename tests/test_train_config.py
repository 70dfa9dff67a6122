"""A pretraining run's options declared once: `TrainConfig` is complete once built, every check of
the options is its own (the CLI prints the same error with flags for fields), every field says what
`--resume` may do with it, and the CLI's choices are the tables TrainConfig checks against."""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys

import pytest

from bertkit.data.masking import MaskingConfig
from bertkit.pretrain.recipes import RECIPE_FIELDS, RECIPES
from bertkit.pretrain.report import status_line
from bertkit.pretrain.setup import (
    CHANGEABLE,
    FIXED,
    INITS,
    INVOCATION,
    OBJECTIVES,
    PRECISIONS,
    RESOLVED,
    RESUME_RULES,
    OptionError,
    TrainConfig,
    TrainOptions,
    resume_rules,
)


# ---- resume rules ----
def test_every_field_declares_a_resume_rule():
    rules = resume_rules(TrainConfig)
    assert list(rules) == [f.name for f in dataclasses.fields(TrainConfig)]
    assert set(rules.values()) <= set(RESUME_RULES)


def test_a_new_field_without_a_resume_rule_is_refused():
    for base in (TrainOptions, TrainConfig):
        grown = dataclasses.make_dataclass("Grown", [("new_option", int, dataclasses.field(default=0))],
                                           bases=(base,), frozen=True)
        with pytest.raises(TypeError, match="new_option declare no resume rule"):
            resume_rules(grown)


def test_resume_rules_are_the_documented_ones():
    """docs/cli.md: a resume refuses another model shape, objective, batch, seed, masking, weight
    decay, ELECTRA generator width or RTD weight, data or tokenizer; lr, steps, minutes, warm-up,
    cadences, device and precision may change."""
    rules = resume_rules(TrainConfig)
    by_rule = {rule: {name for name, r in rules.items() if r == rule} for rule in RESUME_RULES}
    assert by_rule[FIXED] == {"objective", "batch_size", "grad_accum", "seed", "mask_rate", "whole_word_mask",
                              "mask_rule", "weight_decay", "init_from", "recipe", "dropout", "adam_beta2", "init",
                              "generator_width", "rtd_weight", "arch", "generator_layers", "embedding_sharing"}
    assert by_rule[RESOLVED] == {"data", "preset", "config_overrides", "tokenizer"}  # compared by what they name
    assert by_rule[INVOCATION] == {"resume", "overwrite"}
    assert {"lr", "steps", "minutes", "warmup", "save_every", "eval_every", "log_every", "device",
            "precision"} <= by_rule[CHANGEABLE]


# ---- complete once built ----
def test_a_config_is_complete_once_built_and_stays_so():
    for recipe in RECIPES:
        cfg = TrainConfig(data="d", out="o", recipe=recipe, lr=None)
        assert all(getattr(cfg, name) is not None or RECIPES[recipe][name] is None for name in RECIPE_FIELDS)
        assert dataclasses.replace(cfg, steps=5) == TrainConfig(data="d", out="o", recipe=recipe, steps=5)
        with pytest.raises(dataclasses.FrozenInstanceError):
            cfg.lr = 1.0  # type: ignore[misc]


# ---- each check in one place, named as fields or as flags ----
@pytest.mark.parametrize("options, as_fields, as_flags", [
    ({"resume": True, "overwrite": True}, "resume continues a run and overwrite starts it again",
     "--resume continues a run and --overwrite starts it again"),
    ({"init_from": "m", "objective": "ltr"}, "init_from continues a bidirectional model: use objective mlm",
     "--init-from continues a bidirectional model: use --objective mlm"),
    ({"init_from": "m", "config_overrides": {"num_hidden_layers": 2}}, "config_overrides does not apply with init_from",
     "--config-json does not apply with --init-from"),
    ({"config_overrides": {"foo": 1}}, "config_overrides: unknown model config field(s) foo",
     "--config-json: unknown model config field(s) foo"),
    ({"config_overrides": {"num_hidden_layers": 0}}, "config_overrides: bad model config: num_hidden_layers",
     "--config-json: bad model config: num_hidden_layers"),
    ({"minutes": 1, "warmup": 5}, "with minutes, give warmup as a fraction", "with --minutes, give --warmup as a"),
    ({"mask_rule": "50/50"}, "mask_rule: expected three percentages", "--mask-rule: expected three percentages"),
])
def test_options_that_do_not_go_together_are_named_as_fields_or_as_flags(options, as_fields, as_flags):
    with pytest.raises(OptionError) as caught:
        TrainConfig(data="d", out="o", **options)
    assert as_fields in str(caught.value) and as_flags in caught.value.flags()


def test_a_brace_in_a_value_is_text_not_a_template():
    with pytest.raises(OptionError) as caught:
        TrainConfig(data="d", out="o", config_overrides={"hidden_size": {"a": 1}})
    assert "{'a': 1}" in str(caught.value) and "{'a': 1}" in caught.value.flags()


def test_the_mask_rule_parser_refuses_what_does_not_sum_to_100():
    assert MaskingConfig.from_rule("80/10/10").rule == "80/10/10"
    assert MaskingConfig.from_rule("100/0/0").mask_prob == 1.0
    for bad in ("50/50", "90/20/10", "-10/60/50", "a/b/c", "nan/nan/nan", ""):
        with pytest.raises(ValueError, match="three percentages MASK/RANDOM/KEEP summing to 100"):
            MaskingConfig.from_rule(bad)


# ---- the CLI takes its choices from the tables ----
def test_the_flags_choices_are_the_tables_and_help_needs_no_torch():
    from bertkit.cli.pretrain import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    choices = {a.dest: a.choices for a in parser._actions if a.choices}
    assert choices["objective"] == OBJECTIVES and choices["init"] == INITS and choices["precision"] == PRECISIONS
    assert tuple(choices["recipe"]) == tuple(RECIPES)
    code = ("import sys\nfrom bertkit.cli import main\ntry:\n    main(['pretrain', '--help'])\nexcept SystemExit:\n"
            "    pass\nprint('torch' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr


# ---- options declared once: every field is a flag, and a command line gives back the same config ----
def _parse(words: list[str]):
    from bertkit.cli.pretrain import add_arguments, train_config

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return train_config(parser.parse_args(words[2:]))  # less "bertkit pretrain"


def test_every_field_has_its_flag_and_survives_a_command_line_round_trip(tmp_path, tiny_dir):
    """`command_line` writes every option as its flag; the flags parse back to the same TrainConfig.
    Each config sets every field it can away from its default (two configs: --init-from excludes
    --config-json and --objective ltr)."""
    from bertkit.cli.pretrain import add_arguments
    from bertkit.pretrain.setup import command_line

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    dests = {a.dest for a in parser._actions}
    assert {f.name for f in dataclasses.fields(TrainOptions)} <= dests  # every field is a flag
    shared = dict(preset="tiny", minutes=2.5, objective="electra", batch_size=12, lr=2e-3, warmup=0.2,
                  weight_decay=0.05, dropout=0.05, precision="bf16", adam_beta2=0.95, init="bert", grad_accum=3,
                  mask_rate=0.4, whole_word_mask=True, mask_rule="70/20/10", generator_width=0.5, rtd_weight=20.0,
                  compile=True, save_every=7, eval_every=9, log_every=3, eval_samples=11, keep=0, seed=5,
                  max_grad_norm=0.5, device="cpu", tokenizer=str(tiny_dir), report_to="tensorboard")
    for extra in ({"config_overrides": {"num_hidden_layers": 3}}, {"init_from": str(tiny_dir)}):
        cfg = TrainConfig(data=str(tmp_path), out=str(tmp_path / "run"), recipe="budget", **shared, **extra)
        changed = {f.name for f in dataclasses.fields(TrainOptions)
                   if getattr(cfg, f.name) != (f.default if f.default is not dataclasses.MISSING else {})}
        assert _parse(command_line(cfg)) == cfg, sorted(changed)
    assert _parse(command_line(TrainConfig(data=str(tmp_path), out="run", mask_rule="100/0/0"))).mask_rule == "100/0/0"


def test_a_fields_range_is_its_flags_and_its_checks():
    """The one declared range: the CLI refuses what TrainConfig refuses, in the same words."""
    from bertkit.cli.args import ranged

    for f in dataclasses.fields(TrainOptions):
        allowed = f.metadata["range"]
        if allowed is None:
            continue
        bad = (allowed.low - 1) if allowed.low is not None else allowed.high + 1
        with pytest.raises(argparse.ArgumentTypeError, match=f"must be {re.escape(allowed.describe())}"):
            ranged(allowed)(str(bad))
        with pytest.raises(OptionError, match=f"{f.name} must be {re.escape(allowed.describe())}"):
            TrainConfig(data="d", out="o", **{f.name: bad})


# ---- the status line ----
RECORD = {"step": 1650, "loss": 3.25, "lr": 1e-3, "grad_norm": 0.5, "tokens_per_s": 12345.0, "mfu": None,
          "elapsed": 240.0, "eta_s": 360.0}


def test_a_time_budgeted_status_line_shows_time_used_of_the_budget():
    line = status_line(RECORD, None, 600.0)
    assert line.startswith("step    1650 | loss") and "~" not in line
    assert line.endswith("time  0:04:00 of 0:10:00")
    later = status_line({**RECORD, "step": 99999, "elapsed": 599.0, "mfu": 0.125}, None, 600.0)
    assert len(later) == len(line) and "mfu  12.5%" in later  # fixed width


def test_a_step_counted_status_line_shows_the_total_and_the_eta():
    line = status_line(RECORD, 2000, None)
    assert line.startswith("step    1650/2000    | loss") and line.endswith("eta   0:06:00")


# ---- fine-tuning's Hyper: the same, for `bertkit finetune` ----
def test_every_hyper_field_is_a_finetune_flag_and_survives_a_command_line_round_trip(tmp_path, tiny_dir):
    """Every `Hyper` field has its `bertkit finetune` flag, made from the field; `command_line`
    writes a Hyper set away from every default, and the flags parse back to the same Hyper."""
    from bertkit.cli.finetune import add_arguments, hyper_from_args
    from bertkit.finetune.hyper import Hyper, command_line

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert {f.name for f in dataclasses.fields(Hyper)} <= {a.dest for a in parser._actions}
    default = Hyper()
    hp = Hyper(epochs=5, lr=7e-5, batch_size=12, warmup=0.25, weight_decay=0.05, max_grad_norm=0.5, seeds=(4, 9),
               group_by_length=True, classifier_dropout=0.2, eval_every=13, adam_eps=1e-8, early_stopping=2,
               metric_for_best="f1", save_every=6, resume=True)
    assert all(getattr(hp, f.name) != getattr(default, f.name) for f in dataclasses.fields(Hyper))
    base = ["--model", str(tiny_dir), "--task", "sst2", "--train", str(tiny_dir / "config.json"), "--out", "o"]
    assert hyper_from_args(parser.parse_args(base + command_line(hp))) == hp
    assert hyper_from_args(parser.parse_args(base)) == default  # and no flag: the field's default
    with pytest.raises(SystemExit):  # a field's range is its flag's
        parser.parse_args(base + ["--classifier-dropout", "1.0"])
