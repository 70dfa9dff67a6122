"""A new fine-tuning task is one class and one entry in `finetune.registry.TASKS`.

The class below is defined here, registered in the table (and nowhere else), and reached by
`bertkit finetune` (its --task choices, training, the saved model), `bertkit evaluate` (the
same numbers as the run's dev scores) and `task_for_model`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from bertkit.errors import UserError
from bertkit.finetune.registry import TASKS, TaskKind, task_for_model
from bertkit.finetune.task import HeadTask, Prepared, Runtime, infer
from bertkit.heads import BertForSequenceClassification
from finetune_helpers import assert_same_metrics, evaluate, finetune, run_cli, sentence


class ToneTask(HeadTask):
    """Is a sentence praise or blame? One `text<TAB>label` line per example, labels fixed."""

    head = BertForSequenceClassification
    name = "tone"
    main_metric = "accuracy"
    prediction_suffix = ".tsv"

    def __init__(self, tokenizer, max_seq_len: int):
        self.tokenizer, self.max_seq_len = tokenizer, max_seq_len
        self.labels = ["blame", "praise"]

    @classmethod
    def from_settings(cls, tokenizer, settings: dict, model_dir=None, rt=None) -> ToneTask:
        return cls(tokenizer, settings.get("max_seq_len") or 24)

    def read(self, path) -> list[tuple[str, str]]:
        return [tuple(line.split("\t")) for line in Path(path).read_text(encoding="utf-8").splitlines()]

    def fit_labels(self, train_examples: list) -> None:
        """The labels are fixed."""

    def prepare(self, examples: list, train: bool = False) -> Prepared:
        encs = self.tokenizer.encode_batch([text for text, _ in examples], max_length=self.max_seq_len)
        features = [{"input_ids": e.ids, "token_type_ids": e.type_ids, "labels": self.labels.index(label)}
                    for e, (_, label) in zip(encs, examples)]
        return Prepared(examples, features, [len(e.ids) for e in encs])

    def predict(self, model, data: Prepared, rt: Runtime) -> list[str]:
        out: list = [None] * len(data.features)
        for indices, o in infer(model, self.collate, data, rt):
            for i, label in zip(indices, o.logits.argmax(-1).tolist()):
                out[i] = self.labels[label]
        return out

    def score(self, data: Prepared, predictions: list[str]) -> dict:
        right = sum(p == label for p, (_, label) in zip(predictions, data.examples))
        return {"accuracy": 100.0 * right / len(predictions)}

    def write_predictions(self, path: Path, data: Prepared, predictions: list[str]) -> None:
        path.write_text("".join(p + "\n" for p in predictions), encoding="utf-8")

    def settings(self) -> dict:
        return {"task": self.name, "max_seq_len": self.max_seq_len}


def _write_tone(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    rows = [(sentence(rng, positive), "praise" if positive else "blame") for positive in (True, False) * (n // 2)]
    path.write_text("".join(f"{text}\t{label}\n" for text, label in rows), encoding="utf-8")


def test_a_task_registered_in_the_one_table_is_reachable_from_finetune_evaluate_and_task_for_model(
        tiny_dir, tmp_path, capsys, monkeypatch):
    _write_tone(tmp_path / "train.tsv", 24, seed=1)
    _write_tone(tmp_path / "dev.tsv", 8, seed=2)
    out = tmp_path / "out"
    train = ("finetune", "--model", tiny_dir, "--task", "tone", "--train", tmp_path / "train.tsv",
             "--dev", tmp_path / "dev.tsv", "--out", out, "--epochs", "1", "--seeds", "1", "--no-progress")
    assert run_cli(*train) == 2  # not a task until the table says so
    assert "argument --task" in capsys.readouterr().err

    monkeypatch.setitem(TASKS, "tone", TaskKind(ToneTask))
    results = finetune(tiny_dir, out, "tone", tmp_path / "train.tsv", tmp_path / "dev.tsv")
    assert results["task"] == "tone" and results["main_metric"] == "accuracy"
    assert json.loads((out / "model" / "finetune.json").read_text())["task"] == "tone"
    assert (out / "predictions.tsv").read_text().count("\n") == 8

    evaluated = evaluate(capsys, out / "model", "tone", tmp_path / "dev.tsv")
    assert evaluated["task"] == "tone" and evaluated["examples"] == 8
    assert_same_metrics(results, evaluated)

    rt = Runtime(torch.device("cpu"))
    task = task_for_model("tone", out / "model", rt, max_seq_len=16)
    assert isinstance(task, ToneTask) and task.max_seq_len == 16  # the override over the saved 24
    assert task_for_model("tone", out / "model", rt).max_seq_len == 24
    with pytest.raises(UserError, match="fine-tuned for tone, not sst2"):
        task_for_model("sst2", out / "model", rt)
