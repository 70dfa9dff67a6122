"""The search space of `bertkit tune`: which fine-tuning hyper-parameters a trial draws, and from where.

Five of `bertkit finetune`'s flags are searched: --lr, --epochs, --batch-size, --warmup and
--weight-decay. `--search` overrides any of their ranges, as comma-separated NAME=SPEC entries:

    LOW:HIGH        uniform (whole numbers for epochs and batch-size)
    LOW:HIGH:log    uniform in the logarithm
    A|B|C           one of these values

A flag given on the command line (`--epochs 3`) fixes that value instead: it is not searched.
The defaults follow the paper's grid (Appendix A.3: lr 2e-5..5e-5, batch 16 or 32, 2-4 epochs),
widened a little so the search can find the edges. This module is pure: optuna is imported
by `finetune.tune`, which hands each trial to `Space.suggest`.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Dimension:
    """One searched hyper-parameter: a range (`low`..`high`, `log` scale) or a set of `choices`."""

    name: str  # the `Hyper` field (lr, epochs, batch_size, warmup, weight_decay)
    integer: bool
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple | None = None

    def spec(self) -> str:
        """The NAME=SPEC text `--search` reads back."""
        if self.choices is not None:
            body = "|".join(_text(c) for c in self.choices)
        else:
            body = f"{_text(self.low)}:{_text(self.high)}" + (":log" if self.log else "")
        return f"{flag_name(self.name)}={body}"

    def suggest(self, trial):
        """This dimension's value for an optuna trial."""
        if self.choices is not None:
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.integer:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)


# name -> (whether whole numbers, whether 0 is allowed): the same bounds as the flags themselves
SEARCHED = {
    "lr": (False, False),
    "epochs": (True, False),
    "batch_size": (True, False),
    "warmup": (False, True),
    "weight_decay": (False, True),
}
DEFAULT_SEARCH = "lr=1e-5:1e-4:log,epochs=2:5,batch-size=16|32,warmup=0:0.2,weight-decay=0:0.1"
FEATURE_BASED_LR = "lr=1e-4:1e-2:log"  # the --feature-based tagger's BiLSTM trains at ~1e-3


def flag_name(name: str) -> str:
    return name.replace("_", "-")


def _text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_search(text: str) -> dict[str, Dimension]:
    """--search's value -> {Hyper field: Dimension}; an argparse error naming the entry at fault."""
    out: dict[str, Dimension] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, body = entry.partition("=")
        field = name.strip().replace("-", "_")
        if not sep or field not in SEARCHED:
            known = ", ".join(map(flag_name, SEARCHED))
            raise argparse.ArgumentTypeError(f"{entry!r}: expected NAME=SPEC with NAME one of {known}")
        if field in out:
            raise argparse.ArgumentTypeError(f"{flag_name(field)} is named twice")
        out[field] = _dimension(field, body.strip(), entry)
    if not out:
        raise argparse.ArgumentTypeError("expected NAME=SPEC entries, e.g. lr=1e-5:1e-4:log")
    return out


def _dimension(field: str, body: str, entry: str) -> Dimension:
    integer, zero = SEARCHED[field]

    def value(text: str):
        try:
            v = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{entry!r}: expected {'whole ' if integer else ''}numbers, "
                                             f"not {text!r}") from None
        if not math.isfinite(v) or v < 0 or (v == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{entry!r}: {flag_name(field)} must be "
                                             f"{'at least 0' if zero else 'above 0'}, not {text}")
        return v

    if ":" not in body:
        choices = tuple(dict.fromkeys(value(c.strip()) for c in body.split("|")))
        return Dimension(field, integer, choices=choices)
    parts = body.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "log"):
        raise argparse.ArgumentTypeError(f"{entry!r}: expected LOW:HIGH, LOW:HIGH:log or A|B|C")
    low, high = value(parts[0]), value(parts[1])
    log = len(parts) == 3
    if not low < high:
        raise argparse.ArgumentTypeError(f"{entry!r}: LOW must be below HIGH")
    if log and low <= 0:
        raise argparse.ArgumentTypeError(f"{entry!r}: a log range needs LOW above 0")
    return Dimension(field, integer, float(low) if not integer else low, float(high) if not integer else high, log)


@dataclass(frozen=True)
class Space:
    """The searched dimensions and the fixed values (flags given on the command line)."""

    dims: tuple[Dimension, ...]
    fixed: dict

    def suggest(self, trial) -> dict:
        """{Hyper field: value} for one trial: every searched dimension drawn, every fixed one as given."""
        return {**self.fixed, **{d.name: d.suggest(trial) for d in self.dims}}

    def describe(self) -> str:
        """One line: what is searched and what is fixed."""
        searched = ", ".join(d.spec() for d in self.dims) or "nothing"
        fixed = ", ".join(f"{flag_name(k)}={_text(v)}" for k, v in self.fixed.items())
        return f"searching {searched}" + (f"; fixed {fixed}" if fixed else "")


def build_space(given: dict, search: dict[str, Dimension] | None, feature_based: bool = False) -> Space:
    """The space from the searched flags given on the command line (`given`: field -> value or None)
    and --search's dimensions over the defaults; a flag and a --search entry for the same name
    is a ValueError naming both."""
    dims = parse_search(DEFAULT_SEARCH)
    if feature_based:
        dims.update(parse_search(FEATURE_BASED_LR))
    for field in search or {}:
        if given.get(field) is not None:
            raise ValueError(f"--{flag_name(field)} fixes {flag_name(field)}; --search names it too (give one)")
    dims.update(search or {})
    fixed = {k: v for k, v in given.items() if v is not None}
    return Space(tuple(d for name, d in dims.items() if name not in fixed), fixed)
