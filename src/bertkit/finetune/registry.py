"""Task names -> task objects, for training and for evaluating a saved model.

`make_task` builds the task `bertkit finetune --task NAME` trains; `task_for_model` rebuilds the
task a fine-tuned model directory was trained for, from the settings saved beside it
(`finetune.json`), so `bertkit evaluate` encodes and scores exactly as training did.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from bertkit.errors import UserError

if TYPE_CHECKING:  # for the hints only: importing the tasks (and torch) waits until a task is made
    from bertkit.finetune.task import Runtime, Task

RUN_FILE = "finetune.json"  # in OUT/model: the task's settings and the run's arguments
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "rte", "qnli", "mnli", "qqp", "wnli")
PAIR_TASKS = ("embedding", "rerank")  # trained on (anchor, positive[, negatives][, score]) rows
TASKS = (*GLUE_TASKS, "classify", "regress", "squad", "ner", *PAIR_TASKS)


def make_task(name: str, tokenizer, max_seq_len: int | None = None, text_columns: list[str] | None = None,
              label_column: str | None = None, labels: list[str] | None = None, feature_based: bool = False,
              model_dir: Path | None = None, rt: Runtime | None = None,
              layers: tuple[int, ...] | None = None, combine: str = "concat", options: dict | None = None) -> Task:
    """The task object for a task name (see TASKS). `labels` fixes the label set (a saved model's);
    otherwise GLUE's official set, or the training set's (`fit_labels`) for your own data.
    `options` are the pair tasks' settings (pooling, loss, temperature, ...; see their classes)."""
    if name in PAIR_TASKS:
        from bertkit.finetune.embedding import EmbeddingTask
        from bertkit.finetune.rerank import RerankTask

        kind = EmbeddingTask if name == "embedding" else RerankTask
        return kind(tokenizer, max_seq_len or 128, **{k: v for k, v in (options or {}).items() if v is not None})
    if name == "squad":
        from bertkit.finetune.squad import QATask

        return QATask(tokenizer, max_seq_len or 384)
    seq_len = max_seq_len or 128
    if name == "ner":
        if not feature_based:
            from bertkit.finetune.ner import TokenTask

            return TokenTask(labels, tokenizer, seq_len)
        from bertkit.finetune.feature_ner import FeatureTaggerTask

        return FeatureTaggerTask(labels, tokenizer, seq_len, model_dir, rt, layers or (-4, -3, -2, -1),
                                 combine)
    return _sequence_task(name, tokenizer, seq_len, text_columns, label_column, labels)


def _sequence_task(name, tokenizer, seq_len, text_columns, label_column, labels) -> Task:
    from bertkit.data.glue import custom_spec, glue_task, read_glue, read_table
    from bertkit.finetune.sequence import SequenceTask

    if name in GLUE_TASKS:
        return SequenceTask(glue_task(name), lambda path: read_glue(name, path), tokenizer, seq_len)
    if name not in ("classify", "regress"):
        raise UserError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
    if not text_columns or not label_column:
        raise UserError(f"task {name} needs --text-columns a[,b] and --label-column c")
    if len(text_columns) > 2:
        raise UserError(f"--text-columns takes one or two names, got {len(text_columns)}")
    kind = "classification" if name == "classify" else "regression"
    spec = dataclasses.replace(custom_spec(name, kind, labels if kind == "classification" else None),
                               pair=len(text_columns) == 2)
    options = {"text_columns": list(text_columns), "label_column": label_column}
    return SequenceTask(spec, lambda path: read_table(path, text_columns, label_column, kind), tokenizer,
                        seq_len, options)


def saved_settings(model_dir: Path) -> dict:
    """What `finetune` saved beside a model about its task ({} for a model it did not write)."""
    from bertkit.io import read_json

    path = Path(model_dir) / RUN_FILE
    return read_json(path, "a fine-tuned model's settings") if path.exists() else {}


def task_for_model(name: str, model_dir: Path, rt: Runtime, max_seq_len: int | None = None,
                   text_columns: list[str] | None = None, label_column: str | None = None) -> Task:
    """The task a fine-tuned model was trained for, with its labels, columns and sequence length;
    arguments given here override the saved ones."""
    from bertkit.finetune.feature_ner import TAGGER_CONFIG, read_tagger_config
    from bertkit.hf import load_config
    from bertkit.tokenizer import Tokenizer

    model_dir = Path(model_dir)
    saved = saved_settings(model_dir)
    if saved.get("task") and saved["task"] != name:
        raise UserError(f"model was fine-tuned for {saved['task']}, not {name}", model_dir)
    config = load_config(model_dir)
    tokenizer = Tokenizer.from_pretrained(model_dir)
    feature_based = (model_dir / TAGGER_CONFIG).exists()
    labels = layers = None
    combine = "concat"
    if feature_based:
        tagger = read_tagger_config(model_dir)
        labels, layers, combine = tagger["labels"], tuple(tagger["layers"]), tagger.get("combine", "concat")
    elif config.id2label and name not in ("squad", "regress", "stsb", *PAIR_TASKS):
        labels = [config.id2label[i] for i in sorted(config.id2label)]
    return make_task(name, tokenizer, max_seq_len or saved.get("max_seq_len"),
                     text_columns or saved.get("text_columns"), label_column or saved.get("label_column"),
                     labels=labels, feature_based=feature_based, model_dir=model_dir, rt=rt, layers=layers,
                     combine=combine, options=_pair_options(saved) if name in PAIR_TASKS else None)


def _pair_options(saved: dict) -> dict:
    """A pair task's saved settings, as `make_task` options (the run's arguments left out)."""
    keep = ("pooling", "loss", "temperature", "symmetric", "grad_cache", "matryoshka_dims", "normalize", "pos_weight")
    return {k: saved[k] for k in keep if k in saved}
