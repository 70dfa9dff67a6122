"""Typed command-line values: every flag is checked when it is parsed, before any work starts.

Each function is an argparse `type=`: it turns the text into a value or raises
`argparse.ArgumentTypeError`, which the parser reports as one line naming the flag
("bertkit prepare: error: argument --max-seq-len: must be between 8 and 65535, not 4") with
exit status 2.
"""

from __future__ import annotations

import argparse
import math


def _number(text: str, kind):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, not {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, not {text!r}")
    return value


def int_at_least(low: int):
    def parse(text: str) -> int:
        value = _number(text, int)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def int_between(low: int, high: int):
    def parse(text: str) -> int:
        value = _number(text, int)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, not {value}")
        return value
    parse.__name__ = f"integer in [{low}, {high}]"
    return parse


def float_in(low: float, high: float, low_open: bool = False, high_open: bool = False):
    """A number in an interval; `*_open` excludes that end."""
    def parse(text: str) -> float:
        value = _number(text, float)
        if value < low or value > high or (low_open and value == low) or (high_open and value == high):
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            raise argparse.ArgumentTypeError(f"must be in {interval}, not {value:g}")
        return value
    parse.__name__ = "number"
    return parse


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)
positive_float = float_in(0.0, math.inf, low_open=True)
nonnegative_float = float_in(0.0, math.inf)
fraction = float_in(0.0, 1.0)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block) and every default shown in --help."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")
