"""Typed command-line values: every flag is checked when it is parsed, before any work starts.

Each lower-case function here is an argparse `type=`: it turns the text into a value or raises
`argparse.ArgumentTypeError`, which the parser reports as one line naming the flag
("bertkit prepare: error: argument --max-seq-len: must be between 8 and 65535, not 4") with
exit status 2. Input paths are checked the same way (`existing_file`, `model_dir`, ...); the
checks of an output, which depend on `--overwrite`, run once parsing is done
(`check_output_file`, `check_output_dir`, from a command's `check(args)`), and raise a
`UserError` naming the path. None of this imports torch, so a mistake is reported at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
from pathlib import Path

from bertkit.errors import UserError
from bertkit.pretrain.options import field_flag


def _number(text: str, kind):
    try:
        value = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {what}, not {text!r}") from None
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
            if math.isinf(high):
                bound = f"greater than {low:g}" if low_open else f"at least {low:g}"
            else:
                bound = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            raise argparse.ArgumentTypeError(f"must be {bound}, not {value:g}")
        return value
    parse.__name__ = "number"
    return parse


def ranged(allowed):
    """An argparse type for a number in a declared `Range` (bertkit.pretrain.setup): the field's own
    bounds, in the words its config check uses."""
    def parse(text: str):
        value = _number(text, int if allowed.integer else float)
        if not allowed.allows(value):
            raise argparse.ArgumentTypeError(f"must be {allowed.describe()}, not {value:g}")
        return value
    parse.__name__ = "integer" if allowed.integer else "number"
    return parse


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)
positive_float = float_in(0.0, math.inf, low_open=True)
nonnegative_float = float_in(0.0, math.inf)
fraction = float_in(0.0, 1.0)


def comma_ints(low: int | None = None, unique: bool = False):
    """Comma-separated integers (--layers -4,-3,-2,-1, --seeds 1,2,3) as a tuple."""
    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 1,2,3, not {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError("names no value")
        if low is not None and min(values) < low:
            raise argparse.ArgumentTypeError(f"every value must be at least {low}, not {min(values)}")
        if unique and len(set(values)) < len(values):
            raise argparse.ArgumentTypeError(f"names a value twice: {text}")
        return values
    parse.__name__ = "integers"
    return parse


_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def device_name(text: str) -> str:
    """auto, cpu, cuda, cuda:N or mps (whether it is present is checked when it is used)."""
    if not _DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda, cuda:N or mps, not {text!r}")
    return text


def existing_file(text: str) -> str:
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a folder, expected a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return text


def existing_dir(text: str) -> str:
    path = Path(text)
    if path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: is a file, expected a folder")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such folder")
    return text


def existing_path(text: str) -> str:
    if not Path(text).exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file or folder")
    return text


def model_dir(text: str) -> str:
    """A model directory whose config.json is a valid BERT config (weights are read later)."""
    from bertkit.hf import load_config

    try:
        load_config(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def encoder_dir(text: str) -> str:
    """A model directory, or a static embedding model's (`bertkit.static`): embed, index, search, serve."""
    from bertkit.st import static_module

    try:
        if Path(text).is_dir() and static_module(text) is not None:
            return text
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return model_dir(text)


def tokenizer_dir(text: str) -> str:
    """A folder holding vocab.txt or tokenizer.json (a tokenizer or a model directory)."""
    existing_dir(text)
    if not any((Path(text) / name).is_file() for name in ("vocab.txt", "tokenizer.json")):
        raise argparse.ArgumentTypeError(f"{text}: no vocab.txt or tokenizer.json "
                                         "(a tokenizer or model folder holds one)")
    return text


def json_object(text: str) -> dict:
    """A JSON object, given inline or as the path of a .json file."""
    source = None
    if not text.lstrip().startswith(("{", "[")):
        source = Path(text)
        if not source.is_file():
            raise argparse.ArgumentTypeError(f"neither a JSON object nor a file: {text!r}")
        try:
            text = source.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise argparse.ArgumentTypeError(f"{source}: not UTF-8 text") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{source or 'the text'} is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{source or 'the text'} is a JSON {type(value).__name__}, "
                                         "expected an object of fields such as {\"num_hidden_layers\": 2}")
    return value


def add_option_flags(parser, cls: type, names: tuple[str, ...] | None = None, *, types: dict | None = None,
                     required: tuple[str, ...] = (), group=None, group_names: tuple[str, ...] = (),
                     extra_help=None) -> None:
    """A flag for each field of the dataclass `cls` (or the `names` among them), made from the
    field alone: its flag, default (or metadata's "flag_default"), help, choices or range (read by
    `ranged`), metavar, and a switch for a False default; `types` gives the fields whose values need
    more than a range to read (paths, lists, JSON). The fields in `group_names` go to `group` (a
    mutually exclusive group); `extra_help(name)` adds to a field's help. Each option is declared
    once, in its field, with its resume rule beside it."""
    types = types or {}
    for f in dataclasses.fields(cls):
        if names is not None and f.name not in names:
            continue
        meta = f.metadata
        add = group.add_argument if f.name in group_names else parser.add_argument
        kwargs = {"help": meta["help"] + (extra_help(f.name) if extra_help else ""), "dest": f.name}
        if f.default is False:
            add(field_flag(f), action="store_true", **kwargs)
            continue
        if meta.get("choices") is not None:
            kwargs["choices"] = meta["choices"]
        elif f.name in types:
            kwargs["type"] = types[f.name]
        elif meta.get("range") is not None:
            kwargs["type"] = ranged(meta["range"])
        if meta.get("metavar"):
            kwargs["metavar"] = meta["metavar"]
        default = meta.get("flag_default", None if f.default is dataclasses.MISSING else f.default)
        add(field_flag(f), required=f.name in required, default=default, **kwargs)


# ---- long inputs (bertkit.long_inputs) ----
def add_long_inputs(parser, default: str = "truncate", aggregate: bool = False, chunks: bool = False) -> None:
    """`--long-inputs truncate|windows` and `--window-stride N` (with `--aggregate mean|max` for
    classification, `--best-chunk` for retrieval): the one policy for inputs longer than the limit."""
    a = parser.add_argument
    a("--long-inputs", choices=("truncate", "windows"), default=None,
      help=f"an input longer than the token limit: cut to it (truncate) or read whole in overlapping windows "
           f"(windows); either way a note on stderr and the result say how many (default: {default})")
    a("--window-stride", type=positive_int, default=None, metavar="N",
      help="--long-inputs windows: tokens between the starts of consecutive windows, at most a window "
           "(default: half a window)")
    if aggregate:
        a("--aggregate", choices=("mean", "max"), default=None,
          help="--long-inputs windows, classification and regression: a document's logits are its windows' "
               "mean or maximum (default: mean, or as the model was fine-tuned)")
    if chunks:
        a("--best-chunk", action="store_true",
          help="one vector per window (chunk) of each document, with its id; a document scores as its best chunk "
               "(implies --long-inputs windows; without it, a document's chunks are pooled into one vector)")


def check_long_inputs(args, saved_may_window: bool = False) -> None:
    """The window flags need windows: `--long-inputs windows`, or (evaluate) a model fine-tuned
    with them (`saved_may_window` while --long-inputs is not given)."""
    if getattr(args, "best_chunk", False):
        if args.long_inputs == "truncate":
            raise UserError("--best-chunk reads documents in windows: not with --long-inputs truncate")
        args.long_inputs = "windows"
    if args.long_inputs == "windows" or (saved_may_window and args.long_inputs is None):
        return
    for flag in ("window_stride", "aggregate"):
        if getattr(args, flag, None) is not None:
            raise UserError(f"--{flag.replace('_', '-')} applies to --long-inputs windows")


def long_policy(args, default=None):
    """The `long_inputs.Policy` the flags ask for, over `default` (a model's saved one)."""
    from bertkit.long_inputs import Policy

    default = default or Policy()
    return Policy(args.long_inputs or default.name, args.window_stride or default.stride,
                  getattr(args, "aggregate", None) or default.aggregate)


# ---- outputs ----
class _Precision(argparse.Action):
    """`--precision` as given: also marks `precision_chosen`, so the fp32 default (not a choice)
    can say where bf16 would run (`bertkit.devices.bf16_note`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.precision_chosen = True


def add_precision(parser, why: str = "") -> None:
    """`--precision fp32|auto|bf16` of the commands whose outputs are compared or stored (embed,
    index, search, evaluate, serve): fp32 unless asked, so a command gives the same numbers, and
    transformers', on every machine (`devices.resolve_precision`)."""
    parser.add_argument("--precision", choices=("fp32", "auto", "bf16"), default="fp32", action=_Precision,
                        help="bf16: the forward pass under bf16 autocast (weights stay fp32), about 2x faster on a "
                             "CPU with AVX512-BF16 or AMX, not the same numbers (docs/cli.md#precision); auto: bf16 "
                             "where the CPU computes it natively or on a bf16 CUDA GPU, else fp32" + why)
    parser.set_defaults(precision_chosen=False)


def check_precision(precision: str, int8: bool, backend: str = "torch") -> None:
    """bf16 is torch's autocast: refused beside int8 or the ONNX backend (`auto` is fp32 there)."""
    if precision == "bf16" and (int8 or backend != "torch"):
        other = "--int8" if int8 else "--backend onnx"
        raise UserError(f"--precision bf16 runs torch models in bf16: not with {other}")


def add_report_to(parser, where: str) -> None:
    """`--report-to tensorboard|none`: live curves of a training run (bertkit.tracking)."""
    from bertkit.tracking import REPORT_TO

    parser.add_argument("--report-to", choices=REPORT_TO, default="none",
                        help=f"tensorboard: losses, lr, throughput and dev metrics as they happen, in {where} "
                             f"(`tensorboard --logdir` it; needs pip install 'bertkit[tensorboard]'); none: no curves")


def check_report_to(args) -> None:
    """--report-to tensorboard without the tensorboard package: one line, before any work."""
    from bertkit.tracking import check_report_to as check

    check(args.report_to)


def add_overwrite(parser, what: str) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace an existing {what} at the output path (refused otherwise)")


def _check_parent(path: Path) -> None:
    """The nearest existing folder above `path` must be a folder we may write into."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"cannot create it: {parent} is a file", path)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot create it: no permission to write in {parent}", path)


def check_output_file(path: str | os.PathLike, flag: str = "--out", overwrite: bool = False) -> None:
    """An output file may be new, or an existing file with --overwrite; never a folder."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"is a folder; {flag} names the file to write", path)
    if path.exists() and not overwrite:
        raise UserError(f"exists; pass --overwrite to replace it, or choose another {flag}", path)
    _check_parent(path)


def check_resumable_dir(args, markers: tuple[str, ...], what: str, describe=None) -> None:
    """`--out` of a command that keeps its unfinished output beside it (`io.partial_dir`): --resume
    continues it (and is refused when OUT holds a finished result instead), --overwrite discards
    it, and without either it is refused, saying what it holds (`describe(out)`, by default a
    fine-tuning run's `finetune.resume.describe`)."""
    if describe is None:
        from bertkit.finetune.resume import describe

    unfinished = describe(args.out)
    if args.resume and args.overwrite:
        raise UserError("--resume continues a run and --overwrite starts it again: give one")
    if args.resume and unfinished is not None:
        return
    if args.resume and Path(args.out).is_dir() and any((Path(args.out) / m).exists() for m in markers):
        raise UserError(f"holds a finished {what}: nothing to resume (--overwrite runs it again)", args.out)
    if unfinished is not None and not args.overwrite:
        raise UserError(f"{unfinished}; pass --resume to continue it, or --overwrite to start again", args.out)
    check_output_dir(args.out, "--out", args.overwrite, markers, what)


def check_output_dir(path: str | os.PathLike, flag: str = "--out", overwrite: bool = False,
                     markers: tuple[str, ...] = (), what: str = "result") -> None:
    """An output folder may be new or empty; one that holds a previous `what` (any of `markers`)
    needs --overwrite; one that holds other files is refused even then, so --overwrite never
    deletes a folder it did not write."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"is a file; {flag} names a folder to write", path)
    if path.is_dir() and any(path.iterdir()):
        if not any((path / m).exists() for m in markers):
            raise UserError(f"is a folder of other files, not a previous {what}; choose another {flag}", path)
        if not overwrite:
            raise UserError(f"holds a previous {what}; pass --overwrite to replace it, or choose another {flag}",
                            path)
    _check_parent(path)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every default shown, except where there is none to show (None, an off switch, required)."""

    def _get_help_string(self, action):
        if action.default in (None, False) or action.required or "%(default)" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


_NEGATIVE_NUMBERS = re.compile(r"^-\d+(,-?\d+)*$|^-\d*\.\d+$")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block) and every default shown in --help."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        # "--layers -4,-3,-2,-1": a list of negative numbers is a value, not an unknown flag.
        self._negative_number_matcher = _NEGATIVE_NUMBERS

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")
