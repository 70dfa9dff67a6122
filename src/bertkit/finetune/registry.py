"""Task names -> task classes: the one table, for training and for evaluating a saved model.

`TASKS` maps each `--task` name to a `TaskKind`: its class (which builds itself from its settings,
`Task.from_settings`) and the flags of `bertkit finetune` that belong to it alone. A new task is
one file in `finetune/` with its class and one entry here; `bertkit finetune`, `bertkit evaluate`,
`bertkit distill` and `task_for_model` all read this table.

`make_task` builds the task `bertkit finetune --task NAME` trains; `task_for_model` rebuilds the
task a fine-tuned model directory was trained for, from the settings saved beside it
(`finetune.json`), so `bertkit evaluate` encodes and scores exactly as training did. An entry
names its class as "module:Class", imported when a task is made: the task modules import torch,
and the table alone (the CLI's choices and flag checks) must not.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bertkit.errors import UserError

if TYPE_CHECKING:  # for the hints only: importing the tasks (and torch) waits until a task is made
    from bertkit.finetune.task import Runtime, Task

RUN_FILE = "finetune.json"  # in OUT/model: the task's settings and the run's arguments


@dataclass(frozen=True)
class TaskKind:
    """What a `--task` name stands for."""

    cls: str | type  # the task class, or "module:Class" to import it only when a task is made
    options: tuple[str, ...] = ()  # its own `bertkit finetune` flags (args.NAME -> settings[NAME]); others refuse them
    losses: tuple[str, ...] = ()  # the --loss values it takes
    feature_based: str | type | None = None  # the class --feature-based trains instead (a model on frozen features)


GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "rte", "qnli", "mnli", "qqp", "wnli")
# classify / regress (and multilabel) also read --text-columns, --label-column; all read long inputs in windows
_LONG = ("long_inputs", "window_stride", "aggregate")
_SEQUENCE = TaskKind("bertkit.finetune.sequence:SequenceTask", (*_LONG, "class_weights"))
TASKS: dict[str, TaskKind] = {
    **dict.fromkeys(GLUE_TASKS, _SEQUENCE),
    "classify": _SEQUENCE,
    "regress": _SEQUENCE,
    "multilabel": TaskKind("bertkit.finetune.multilabel:MultiLabelTask",
                           (*_LONG, "label_separator", "threshold", "pos_weight")),
    "squad": TaskKind("bertkit.finetune.squad:QATask"),
    "ner": TaskKind("bertkit.finetune.ner:TokenTask", ("long_inputs", "window_stride", "class_weights"),
                    feature_based="bertkit.finetune.feature_ner:FeatureTaggerTask"),
    "embedding": TaskKind("bertkit.finetune.embedding:EmbeddingTask",
                          ("pooling", "normalize", "loss", "temperature", "symmetric", "grad_cache", "matryoshka_dims",
                           "matryoshka_weights", "query_prompt", "passage_prompt"),
                          losses=("contrastive", "cosent")),
    "rerank": TaskKind("bertkit.finetune.rerank:RerankTask", ("loss", "pos_weight"), losses=("bce", "listwise")),
}


def task_class(name: str, feature_based: bool = False) -> type:
    """The class of task `name` (its feature-based one when asked and it has one)."""
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
    kind = TASKS[name]
    target = kind.feature_based if feature_based and kind.feature_based is not None else kind.cls
    if isinstance(target, str):
        module, _, attribute = target.partition(":")
        return getattr(importlib.import_module(module), attribute)
    return target


def make_task(settings: dict, tokenizer, model_dir: Path, rt: Runtime) -> Task:
    """The task `settings["task"]` names, built by its class from `settings` (`Task.from_settings`)."""
    cls = task_class(settings["task"], bool(settings.get("feature_based")))
    return cls.from_settings(tokenizer, settings, Path(model_dir), rt)


def saved_settings(model_dir: Path) -> dict:
    """What `finetune` saved beside a model about its task ({} for a model it did not write)."""
    from bertkit.io import read_json

    path = Path(model_dir) / RUN_FILE
    return read_json(path, "a fine-tuned model's settings") if path.exists() else {}


def task_for_model(name: str, model_dir: Path, rt: Runtime, max_seq_len: int | None = None,
                   text_columns: list[str] | None = None, label_column: str | None = None,
                   long_inputs: dict | None = None, threshold: float | None = None) -> Task:
    """The task a fine-tuned model was trained for, with its labels, columns, sequence length,
    long-input policy ("long_inputs", "window_stride", "aggregate") and, for multilabel, decision
    threshold; arguments given here (not None) override the saved ones, and the directory's own
    labels (the class's `model_settings`) override both."""
    from bertkit.hf import load_config
    from bertkit.tokenizer import Tokenizer

    model_dir = Path(model_dir)
    saved = saved_settings(model_dir)
    if saved.get("task") and saved["task"] != name:
        raise UserError(f"model was fine-tuned for {saved['task']}, not {name}", model_dir)
    config = load_config(model_dir)
    tokenizer = Tokenizer.from_pretrained(model_dir)
    given = {"max_seq_len": max_seq_len, "text_columns": text_columns, "label_column": label_column,
             **(long_inputs or {})}
    settings = {**saved, "task": name, **{k: v for k, v in given.items() if v}}
    if threshold is not None:
        settings.update(threshold=threshold, threshold_tuned=False)
    cls = task_class(name, bool(settings.get("feature_based")))
    return cls.from_settings(tokenizer, {**settings, **cls.model_settings(model_dir, config)}, model_dir, rt)
