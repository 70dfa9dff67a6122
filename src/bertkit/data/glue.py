"""Sentence(-pair) task data: the GLUE tasks in their official TSV layouts, and your own tables.

Every GLUE task ships its own layout (CoLA has no header, MRPC's header starts with a byte-order
mark, STS-B keeps ten columns, MNLI's gold label is last). `read_glue(task, path)` knows each one,
so a downloaded GLUE folder reads with no options; test files (no label column) give label None.
GLUE text contains unbalanced quote characters, so TSVs are split on tabs only, never with csv
quoting. `read_table` reads a user's TSV/CSV/JSONL with named columns, `read_label_sets` the
same with a set of labels per row (multi-label).

Predictions file (written by `write_predictions`, read by `bertkit score` through
`read_predictions`): UTF-8 text, one predicted label per line, in the order of the gold file's
examples, no header; regression scores as decimal numbers. The GLUE submission layout
(header `index<TAB>prediction`, then `index<TAB>label` rows) is accepted too.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import read_jsonl, read_lines, write_text


@dataclass
class Example:
    guid: str  # "<file stem>-<line number>", enough to find the row again
    text_a: str
    text_b: str | None
    label: str | float | tuple[str, ...] | None  # None for unlabelled (test) rows; a tuple: multi-label


@dataclass(frozen=True)
class TaskSpec:
    name: str
    kind: str  # "classification" or "regression"
    labels: tuple[str, ...] | None  # label values in id order; None for regression
    metrics: tuple[str, ...]  # names understood by bertkit.eval.metrics.task_metrics
    main_metric: str  # the one the BERT paper reports, used to pick the best checkpoint
    pair: bool  # sentence pair (text_b set) or single sentence

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)


def _cls(name, labels, metrics, main, pair) -> TaskSpec:
    return TaskSpec(name, "classification", labels, metrics, main, pair)


# Macro-F1 beside accuracy for the classification tasks with no F1 of their own (MRPC and QQP
# report the positive class's F1, as GLUE does; CoLA Matthews correlation).
GLUE: dict[str, TaskSpec] = {
    "cola": _cls("cola", ("0", "1"), ("mcc",), "mcc", False),
    "sst2": _cls("sst2", ("0", "1"), ("accuracy", "macro_f1"), "accuracy", False),
    "mrpc": _cls("mrpc", ("0", "1"), ("f1", "accuracy"), "f1", True),
    "stsb": TaskSpec("stsb", "regression", None, ("pearson", "spearman"), "spearman", True),
    "rte": _cls("rte", ("entailment", "not_entailment"), ("accuracy", "macro_f1"), "accuracy", True),
    "qnli": _cls("qnli", ("entailment", "not_entailment"), ("accuracy", "macro_f1"), "accuracy", True),
    "mnli": _cls("mnli", ("contradiction", "entailment", "neutral"), ("accuracy", "macro_f1"), "accuracy", True),
    "qqp": _cls("qqp", ("0", "1"), ("f1", "accuracy"), "f1", True),
    "wnli": _cls("wnli", ("0", "1"), ("accuracy", "macro_f1"), "accuracy", True),
}

# Header-based layouts: (first text column, second text column or None, label column).
# Columns are found by name, so train, dev and test files (which lack the label) all read.
_HEADER_COLUMNS: dict[str, tuple[str, str | None, str]] = {
    "sst2": ("sentence", None, "label"),
    "mrpc": ("#1 String", "#2 String", "Quality"),
    "stsb": ("sentence1", "sentence2", "score"),
    "rte": ("sentence1", "sentence2", "label"),
    "qnli": ("question", "sentence", "label"),
    "mnli": ("sentence1", "sentence2", "gold_label"),
    "qqp": ("question1", "question2", "is_duplicate"),
    "wnli": ("sentence1", "sentence2", "label"),
}


def glue_task(name: str) -> TaskSpec:
    """The spec of a GLUE task by name; accepts the folder spellings (SST-2, STS-B, CoLA)."""
    key = name.lower().replace("-", "")
    if key not in GLUE:
        raise UserError(f"unknown GLUE task {name!r} (one of {', '.join(GLUE)})")
    return GLUE[key]


def custom_spec(name: str, kind: str, labels: list[str] | None = None) -> TaskSpec:
    """A spec for your own table: accuracy and macro F1, or Pearson and Spearman."""
    if kind == "regression":
        return TaskSpec(name, "regression", None, ("pearson", "spearman"), "spearman", False)
    if kind != "classification":
        raise UserError(f"unknown task kind {kind!r} (classification or regression)")
    return TaskSpec(name, "classification", tuple(labels or ()), ("accuracy", "macro_f1"), "accuracy", False)


def _convert_label(spec: TaskSpec, raw: str, path, line: int) -> str | float:
    if spec.kind == "regression":
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise UserError(f"score {raw!r} is not a number", path, line)
        return value
    if spec.labels and raw not in spec.labels:
        raise UserError(f"label {raw!r} is not one of {', '.join(spec.labels)}", path, line)
    return raw


def _rows(path: Path):
    """(line number, fields) for every non-empty line, split on tabs only."""
    for number, text in enumerate(read_lines(path), start=1):
        if number == 1:
            text = text.lstrip("\ufeff")
        if text.strip():
            yield number, text.split("\t")


def read_glue(task: str, path: str | os.PathLike) -> list[Example]:
    """Read one GLUE split file (train/dev/test) in the task's official layout."""
    spec = glue_task(task)
    path = Path(path)
    if spec.name == "cola":
        return _read_cola(spec, path)
    first, second, label_col = _HEADER_COLUMNS[spec.name]
    rows = _rows(path)
    header_row = next(rows, None)
    if header_row is None:
        raise UserError("empty file", path)
    _, header = header_row
    index = {name: i for i, name in enumerate(header)}
    missing = [c for c in (first, second) if c is not None and c not in index]
    if missing:
        raise UserError(f"{spec.name} header has no column {missing[0]!r} (header: {' | '.join(header)})", path, 1)
    label_at = index.get(label_col)
    examples = []
    for number, fields in rows:
        if len(fields) != len(header):
            raise UserError(f"expected {len(header)} tab-separated columns, found {len(fields)}", path, number)
        label = None if label_at is None else _convert_label(spec, fields[label_at], path, number)
        text_b = fields[index[second]] if second is not None else None
        examples.append(Example(f"{path.stem}-{number}", fields[index[first]], text_b, label))
    return examples


def _read_cola(spec: TaskSpec, path: Path) -> list[Example]:
    # train/dev: no header, (source, label, original mark, sentence); test: header `index sentence`.
    examples = []
    test = False
    for number, fields in _rows(path):
        if number == 1 and fields == ["index", "sentence"]:
            test = True
            continue
        width = 2 if test else 4
        if len(fields) != width:
            raise UserError(f"expected {width} tab-separated columns, found {len(fields)}", path, number)
        if test:
            examples.append(Example(f"{path.stem}-{number}", fields[1], None, None))
        else:
            label = _convert_label(spec, fields[1], path, number)
            examples.append(Example(f"{path.stem}-{number}", fields[3], None, label))
    return examples


def _table_format(path: Path) -> str:
    suffixes = [s for s in path.suffixes if s not in (".gz", ".xz")]
    fmt = suffixes[-1].lstrip(".") if suffixes else ""
    if fmt not in ("tsv", "csv", "jsonl"):
        raise UserError("unknown table format (use .tsv, .csv or .jsonl, optionally .gz/.xz)", path)
    return fmt


def _records(path: Path, fmt: str):
    """(line number, {column: value}) for every record of a TSV/CSV (with header) or JSONL."""
    if fmt == "jsonl":
        yield from read_jsonl(path)
        return
    lines = read_lines(path)
    if fmt == "csv":
        # read_lines strips line ends; restore them so quoted fields may span lines.
        reader = csv.reader(line + "\n" for line in lines)
        numbered = ((reader.line_num, fields) for fields in reader if fields)
    else:
        numbered = _rows(path)
    header = None
    try:
        for number, fields in numbered:
            if header is None:
                header = [h.lstrip("\ufeff").strip() for h in fields]
                continue
            if len(fields) != len(header):
                raise UserError(f"expected {len(header)} columns as in the header, found {len(fields)}", path, number)
            yield number, dict(zip(header, fields))
    except csv.Error as e:
        raise UserError(f"malformed CSV ({e})", path) from None


def read_table(path: str | os.PathLike, text_columns: list[str], label_column: str | None,
               kind: str) -> list[Example]:
    """Read your own data: one or two text columns and an optional label column.

    TSV and CSV need a header naming the columns; JSONL has one object per line. `kind` is
    "classification" (labels kept as strings) or "regression" (labels parsed as numbers).
    """
    path = Path(path)
    if not 1 <= len(text_columns) <= 2:
        raise UserError(f"need one or two text columns, got {len(text_columns)}")
    spec = custom_spec(path.stem, kind)
    wanted = list(text_columns) + ([label_column] if label_column else [])
    examples = []
    for number, record in _records(path, _table_format(path)):
        for column in wanted:
            if column not in record:
                raise UserError(f"no column {column!r} (has: {', '.join(map(str, record))})", path, number)
        texts = [record[c] for c in text_columns]
        if not all(isinstance(t, str) for t in texts):
            raise UserError(f"text columns must hold strings: {texts!r}", path, number)
        label = None
        if label_column:
            value = record[label_column]
            if isinstance(value, (list, dict)):
                raise UserError(f"label {json.dumps(value)} is not one {kind} label"
                                + (" (several labels per row: --task multilabel)" if isinstance(value, list) else ""),
                                path, number)
            label = _convert_label(spec, str(value) if not isinstance(value, str) else value, path, number)
        text_b = texts[1] if len(texts) == 2 else None
        examples.append(Example(f"{path.stem}-{number}", texts[0], text_b, label))
    if not examples:
        raise UserError("no examples in file", path)
    return examples


def read_label_sets(path: str | os.PathLike, text_columns: list[str], label_column: str | None,
                    separator: str = ",") -> list[Example]:
    """Read a multi-label table: each row's labels (a set, possibly empty) as a sorted tuple.

    In TSV/CSV the label column holds the names joined by `separator` ("" for none); in JSONL a
    list of names (or one string, split the same way). Numbers are refused: a multi-hot vector
    or label ids say nothing about the names, so a row must list them.
    """
    path = Path(path)
    examples = read_table(path, text_columns, None, "classification")
    if not label_column:
        return examples
    for example, (number, record) in zip(examples, _records(path, _table_format(path))):
        if label_column not in record:
            raise UserError(f"no column {label_column!r} (has: {', '.join(map(str, record))})", path, number)
        example.label = _label_set(record[label_column], separator, path, number)
    return examples


def _label_set(value, separator: str, path: Path, line: int) -> tuple[str, ...]:
    if isinstance(value, str):
        names = [] if not value.strip() else [v.strip() for v in value.split(separator)]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        names = [v.strip() for v in value]
    else:
        raise UserError(f"labels {json.dumps(value)} are not a list of label names (e.g. [\"PER\", \"LOC\"]); "
                        "multi-hot vectors and numbers are not read", path, line)
    if any(not n for n in names):
        raise UserError(f"empty label name in {json.dumps(value)} (separator {separator!r})", path, line)
    return tuple(sorted(set(names)))


def label_list(examples: list[Example]) -> list[str]:
    """Sorted distinct labels of a labelled classification set (ids follow this order)."""
    return sorted({str(e.label) for e in examples if e.label is not None})


def write_predictions(path: str | os.PathLike, predictions) -> None:
    """One label (or score) per line, no header, atomically: the layout `bertkit score` reads."""
    lines = [repr(float(p)) if isinstance(p, float) else str(p) for p in predictions]
    write_text(path, "".join(line + "\n" for line in lines))


def read_predictions(path: str | os.PathLike, spec: TaskSpec) -> list[str | float]:
    """Read a predictions file: bare labels, or GLUE's `index<TAB>prediction` layout."""
    path = Path(path)
    predictions: list[str | float] = []
    submission = False
    for number, text in enumerate(read_lines(path), start=1):
        text = text.lstrip("\ufeff") if number == 1 else text
        if number == 1 and text.strip().split("\t") == ["index", "prediction"]:
            submission = True
            continue
        if not text.strip():
            continue
        value = text.strip()
        if submission:
            fields = value.split("\t")
            if len(fields) != 2:
                raise UserError("expected `index<TAB>prediction`", path, number)
            value = fields[1]
        predictions.append(_convert_label(spec, value, path, number))
    return predictions
