"""Fine-tuning as users of transformers expect it (issue 35): multi-label classification, class
weights, early stopping on the best checkpoint, on the tiny random model.

Multi-label must learn a set of labels that word presence decides, tune its threshold on dev,
save a directory transformers loads as `problem_type="multi_label_classification"` with the same
logits and loss, and be served label set and all; malformed label rows stop with one line naming
file and line; a weighted loss must equal the one computed by hand; early stopping must stop
after exactly PATIENCE evaluations without improvement and save the best evaluation's weights.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from finetune_helpers import BAD, GOOD, assert_same_metrics, evaluate, finetune, run_cli, write_conll, write_stsb

PEOPLE, CITIES = ["john", "mary"], ["paris", "berlin"]


def _row(rng: random.Random) -> tuple[str, list[str]]:
    """A sentence and its labels: "good" / "bad" when it has such a word, "person", "city" likewise."""
    labels, words = [], ["the", rng.choice(["movie", "film", "story", "show"])]
    for label, pool in (("person", PEOPLE), ("city", CITIES), ("good", GOOD), ("bad", BAD)):
        if rng.random() < 0.5:
            labels.append(label)
            words.insert(rng.randrange(len(words) + 1), rng.choice(pool))
    return " ".join(words + ["."]), labels


def _write_multilabel(folder: Path, n_train: int = 96, n_dev: int = 40) -> tuple[Path, Path]:
    rng = random.Random(0)
    train, dev = folder / "train.tsv", folder / "dev.jsonl"
    rows = [_row(rng) for _ in range(n_train)]
    train.write_text("text\ttags\n" + "".join(f"{t}\t{'|'.join(y)}\n" for t, y in rows), encoding="utf-8")
    rows = [_row(rng) for _ in range(n_dev)]
    dev.write_text("".join(json.dumps({"text": t, "tags": y}) + "\n" for t, y in rows), encoding="utf-8")
    return train, dev


@pytest.fixture(scope="module")
def multilabel_run(tiny_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("multilabel")
    train, dev = _write_multilabel(folder)
    results = finetune(tiny_dir, folder / "out", "multilabel", train, dev, "--text-columns", "text",
                       "--label-column", "tags", "--label-separator", "|", "--epochs", "40", "--lr", "1e-2",
                       "--batch-size", "16", "--warmup", "0")
    return folder, results


def test_multilabel_learns_tunes_its_threshold_and_evaluate_reproduces(multilabel_run, capsys):
    folder, results = multilabel_run
    dev = results["seeds"][0]["dev"]
    gold = [json.loads(line)["tags"] for line in (folder / "dev.jsonl").read_text().splitlines()]
    positives = sum(map(len, gold))
    every_label = 100 * 2 * positives / (positives + 4 * len(gold))  # micro-F1 of predicting every label
    assert results["main_metric"] == "micro_f1" and dev["micro_f1"] > every_label + 15, (dev, every_label)
    assert set(dev["per_label_f1"]) == {"bad", "city", "good", "person"}
    assert dev["macro_f1"] == pytest.approx(sum(dev["per_label_f1"].values()) / 4)
    assert 0 < dev["subset_accuracy"] <= 100 and 0 < dev["threshold"] < 1
    saved = json.loads((folder / "out" / "model" / "finetune.json").read_text())
    assert saved["threshold"] == dev["threshold"] and saved["threshold_tuned"] is True
    assert saved["label_separator"] == "|" and results["task_settings"]["threshold"] == dev["threshold"]
    # evaluate decides with the saved threshold (not one tuned again on its data) and writes label sets
    out = folder / "predictions.tsv"
    assert_same_metrics(results, evaluate(capsys, folder / "out" / "model", "multilabel", folder / "dev.jsonl",
                                          "--out", out))
    lines = out.read_text().splitlines()
    assert lines[0] == "index\tprediction\tbad\tcity\tgood\tperson" and len(lines) == 41
    for line in lines[1:]:
        cells = line.split("\t")
        scores = dict(zip(["bad", "city", "good", "person"], map(float, cells[2:])))
        want = {k for k, p in scores.items() if p >= dev["threshold"] - 5e-5}  # the file rounds to 4 places
        assert set(filter(None, cells[1].split("|"))) <= want


def test_multilabel_model_loads_in_transformers_with_the_same_logits_and_loss(multilabel_run):
    import transformers

    from bertkit import BertForSequenceClassification

    model_dir = multilabel_run[0] / "out" / "model"
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    assert hf.config.problem_type == "multi_label_classification"
    assert hf.config.id2label == {0: "bad", 1: "city", 2: "good", 3: "person"}
    assert hf.config.label2id == {"bad": 0, "city": 1, "good": 2, "person": 3}
    ours = BertForSequenceClassification.from_pretrained(model_dir).eval()
    ids = torch.tensor([[2, 10, 20, 30, 3, 0, 0], [2, 11, 3, 0, 0, 0, 0]])
    mask, labels = (ids != 0).long(), torch.tensor([[1.0, 0, 0, 1], [0, 1, 1, 0]])
    with torch.no_grad():
        theirs, mine = hf(input_ids=ids, attention_mask=mask, labels=labels), ours(ids, mask, labels=labels)
    diff = (theirs.logits - mine.logits).abs().max().item()
    assert diff < 1e-5, f"max |logit difference| {diff}"
    assert mine.loss.item() == pytest.approx(theirs.loss.item(), abs=1e-6)


def test_multilabel_served_as_the_labels_above_the_threshold(multilabel_run):
    from bertkit.serve.models import describe
    from bertkit.serve.requests import Limits
    from bertkit.serve.routes import predict

    spec = describe("tags", multilabel_run[0] / "out" / "model")
    threshold = multilabel_run[1]["seeds"][0]["dev"]["threshold"]
    assert spec.threshold == threshold and spec.info()["threshold"] == threshold
    work = predict(spec, {"inputs": [["the film ."], ["john in paris ."]]}, Limits())
    logits = np.array([[-3.0, 2.0, 0.5, -0.1], [-4.0, -4.0, -4.0, -4.0]])
    answers = work.finish(list(logits))
    probs = 1 / (1 + np.exp(-logits[0]))
    want = [spec.labels[i] for i in np.argsort(-probs) if probs[i] >= threshold]
    assert [a["label"] for a in answers[0]] == want and answers[1] == []
    assert answers[0][0]["score"] == pytest.approx(probs.max())


@pytest.mark.parametrize("case", ["multi_hot", "number", "empty_name", "list_for_classify", "bad_score"])
def test_malformed_label_rows_exit_2_naming_file_and_line(tiny_dir, tmp_path, capsys, case):
    train, dev = _write_multilabel(tmp_path, 8, 4)
    task, extra = "multilabel", ["--text-columns", "text", "--label-column", "tags", "--label-separator", "|"]
    bad = train
    if case == "multi_hot":
        bad = dev
        dev.write_text(dev.read_text() + json.dumps({"text": "the film .", "tags": [0, 1, 1, 0]}) + "\n")
    elif case == "number":
        bad = dev
        dev.write_text(dev.read_text() + json.dumps({"text": "the film .", "tags": 1.0}) + "\n")
    elif case == "empty_name":
        train.write_text(train.read_text() + "the film .\tgood||city\n")
    elif case == "list_for_classify":
        task, extra, bad = "classify", ["--text-columns", "text", "--label-column", "tags"], dev
        train.write_text("text\ttags\nthe film .\ta\nthe show .\tb\n")
        dev.write_text(json.dumps({"text": "the film .", "tags": "a"}) + "\n"
                       + json.dumps({"text": "the film .", "tags": ["a", "b"]}) + "\n")
    else:
        task, extra = "regress", ["--text-columns", "text", "--label-column", "tags"]
        train.write_text("text\ttags\nthe film .\t0.5\nthe show .\tnan\n")
    line = len(bad.read_text().splitlines())
    capsys.readouterr()
    code = run_cli("finetune", "--model", tiny_dir, "--task", task, "--train", train, "--dev", dev,
                   "--out", tmp_path / "out", "--epochs", "1", "--seeds", "1", "--no-progress", *extra)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{bad}:{line}:" in err, err
    assert not (tmp_path / "out").exists()


def test_best_threshold_maximises_micro_f1_over_every_cut():
    from bertkit.eval.metrics import best_threshold, multilabel_metrics

    rng = np.random.default_rng(0)
    gold = rng.random((50, 5)) < 0.3
    probs = np.clip(gold * 0.3 + rng.random((50, 5)) * 0.7, 0, 1)
    t = best_threshold(probs, gold)
    best = multilabel_metrics(probs >= t, gold, list("abcde"))["micro_f1"]
    every = max(multilabel_metrics(probs >= c, gold, list("abcde"))["micro_f1"] for c in np.unique(probs))
    assert best == pytest.approx(every) and 0 < t < 1


def _by_hand(logits: torch.Tensor, labels: torch.Tensor, weights: list[float]) -> float:
    """sum_i w[y_i] * -log softmax(logits_i)[y_i] / sum_i w[y_i] over rows whose label is not -100."""
    total = norm = 0.0
    for row, y in zip(logits.reshape(-1, logits.shape[-1]).tolist(), labels.reshape(-1).tolist()):
        if y == -100:
            continue
        log_z = math.log(sum(math.exp(v) for v in row))
        total += weights[y] * (log_z - row[y])
        norm += weights[y]
    return total / norm


def test_class_weights_give_the_weighted_loss_computed_by_hand(tiny_dir, tmp_path):
    from bertkit.data.glue import Example
    from bertkit.finetune.registry import make_task
    from bertkit.finetune.task import Runtime
    from bertkit.tokenizer import Tokenizer

    tok, rt = Tokenizer.from_pretrained(tiny_dir), Runtime(torch.device("cpu"))
    examples = [Example(f"t-{i}", f"the film was {w} .", None, y)
                for i, (w, y) in enumerate([("good", "pos"), ("bad", "neg"), ("dull", "neg"), ("weak", "neg"),
                                            ("nice", "pos"), ("poor", "neg"), ("boring", "neg")])]
    settings = {"task": "classify", "text_columns": ["t"], "label_column": "y", "class_weights": "balanced"}
    task = make_task(settings, tok, tiny_dir, rt)
    task.fit_labels(examples)
    assert task.class_weights == pytest.approx([7 / (2 * 5), 7 / (2 * 2)])  # neg 5, pos 2
    torch.manual_seed(0)
    model = task.new_model(tiny_dir).eval()
    batch = task.collate(task.prepare(examples, train=True).features)
    loss = task.loss(model, batch)
    with torch.no_grad():
        logits = model(**batch.inputs).logits
    assert loss.item() == pytest.approx(_by_hand(logits, batch.targets["labels"], task.class_weights), abs=1e-6)
    assert loss.item() != pytest.approx(model(**batch.inputs, **batch.targets).loss.item(), abs=1e-4)

    write_conll(tmp_path / "train.txt", 3, 0)
    (tmp_path / "w.json").write_text(json.dumps({"O": 0.5, "B-PER": 2, "B-LOC": 3, "I-LOC": 4}))
    ner = make_task({"task": "ner", "class_weights": str(tmp_path / "w.json")}, tok, tiny_dir, rt)
    sentences = ner.read(tmp_path / "train.txt")
    ner.fit_labels(sentences)
    model = ner.new_model(tiny_dir).eval()
    batch = ner.collate(ner.prepare(sentences, train=True).features)
    with torch.no_grad():
        logits = model(**batch.inputs).logits
    assert ner.settings()["class_weights"] == {"B-LOC": 3.0, "B-PER": 2.0, "I-LOC": 4.0, "O": 0.5}
    assert ner.loss(model, batch).item() == pytest.approx(_by_hand(logits, batch.targets["labels"],
                                                                   ner.class_weights), abs=1e-6)


def test_class_weights_recorded_and_a_bad_file_refused(tiny_dir, tmp_path, capsys):
    write_conll(tmp_path / "train.txt", 13, 0)
    write_conll(tmp_path / "dev.txt", 6, 1)
    results = finetune(tiny_dir, tmp_path / "ok", "ner", tmp_path / "train.txt", tmp_path / "dev.txt",
                       "--class-weights", "balanced")
    weights = results["task_settings"]["class_weights"]
    assert weights["O"] == pytest.approx(13 * 6 / (4 * 13 * 3)) and weights["B-PER"] == pytest.approx(6 / 4)
    (tmp_path / "w.json").write_text(json.dumps({"O": 1, "B-PER": 2}))
    capsys.readouterr()
    code = run_cli("finetune", "--model", tiny_dir, "--task", "ner", "--train", tmp_path / "train.txt",
                   "--dev", tmp_path / "dev.txt", "--out", tmp_path / "bad", "--class-weights", tmp_path / "w.json",
                   "--seeds", "1", "--no-progress")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "w.json" in err and "missing" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "bad").exists()


def test_macro_f1_beside_accuracy_for_single_label_classification(tiny_dir, tmp_path):
    from finetune_helpers import write_sst2

    write_sst2(tmp_path / "train.tsv", 16, 0)
    write_sst2(tmp_path / "dev.tsv", 8, 1)
    dev = finetune(tiny_dir, tmp_path / "out", "sst2", tmp_path / "train.tsv", tmp_path / "dev.tsv")["seeds"][0]["dev"]
    assert {"accuracy", "macro_f1"} <= set(dev)


def test_early_stopping_stops_after_patience_and_saves_the_best_evaluation(tiny_dir, tmp_path, capsys):
    write_stsb(tmp_path / "train.tsv", 32, 0)  # random scores: dev Pearson wanders, so it stops improving
    write_stsb(tmp_path / "dev.tsv", 16, 1)
    results = finetune(tiny_dir, tmp_path / "out", "stsb", tmp_path / "train.tsv", tmp_path / "dev.tsv",
                       "--epochs", "20", "--lr", "1e-3", "--eval-every", "2", "--early-stopping", "3",
                       "--metric-for-best", "pearson", "--seeds", "1,2")
    for run in results["seeds"]:
        evals, best = run["evals"], run["best_step"]
        values = [e["pearson"] for e in evals]
        k = [e["step"] for e in evals].index(best)
        assert run["best_metric"] == values[k] == max(values) and values.index(max(values)) == k
        assert run["stopped_at"] == evals[-1]["step"] == run["steps"] < 20 * 4
        assert len(evals) - 1 - k == 3  # exactly PATIENCE evaluations after the best, none improving
        assert run["dev"]["pearson"] == run["best_metric"]
    saved = next(r for r in results["seeds"] if r["seed"] == results["saved_seed"])
    assert results["best_metric"] == saved["best_metric"] == max(r["best_metric"] for r in results["seeds"])
    assert results["best_step"] == saved["best_step"] and results["metric_for_best"] == "pearson"
    # the saved weights are the best evaluation's: evaluating them gives its metric, not the last one's
    evaluated = evaluate(capsys, tmp_path / "out" / "model", "stsb", tmp_path / "dev.tsv")
    assert evaluated["pearson"] == pytest.approx(results["best_metric"], abs=1e-6)
    assert evaluated["pearson"] != pytest.approx(saved["evals"][-1]["pearson"], abs=1e-6)
    assert_same_metrics(results, evaluated)


def test_metric_for_best_must_be_one_the_task_reports(tiny_dir, tmp_path, capsys):
    write_stsb(tmp_path / "train.tsv", 8, 0)
    write_stsb(tmp_path / "dev.tsv", 4, 1)
    capsys.readouterr()
    code = run_cli("finetune", "--model", tiny_dir, "--task", "stsb", "--train", tmp_path / "train.tsv",
                   "--dev", tmp_path / "dev.tsv", "--out", tmp_path / "out", "--metric-for-best", "accuracy",
                   "--seeds", "1", "--epochs", "1", "--no-progress")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--metric-for-best accuracy" in err and "spearman" in err, err
    assert not (tmp_path / "out").exists()


def test_multilabel_onnx_export_keeps_the_threshold_and_the_scores(multilabel_run, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from bertkit.serve.models import describe

    folder, results = multilabel_run
    assert run_cli("export", "--model", folder / "out" / "model", "--format", "onnx", "--out", tmp_path / "onnx") == 0
    spec = describe("tags", tmp_path / "onnx", backend="onnx")
    assert spec.kind == "classifier" and spec.threshold == results["seeds"][0]["dev"]["threshold"]
    evaluated = evaluate(capsys, tmp_path / "onnx", "multilabel", folder / "dev.jsonl", "--backend", "onnx")
    dev = results["seeds"][0]["dev"]
    assert evaluated["threshold"] == dev["threshold"] and evaluated["micro_f1"] == pytest.approx(dev["micro_f1"])


def test_multilabel_pos_weight_per_label_gives_the_loss_by_hand(tiny_dir, tmp_path):
    from bertkit.data.glue import Example
    from bertkit.errors import UserError
    from bertkit.finetune.registry import make_task
    from bertkit.finetune.task import Runtime
    from bertkit.tokenizer import Tokenizer

    tok, rt = Tokenizer.from_pretrained(tiny_dir), Runtime(torch.device("cpu"))
    sets = [["city"], ["person", "city"], [], ["city"], ["good"], ["city", "good"]]  # city 4 of 6, good 2, person 1
    examples = [Example(f"t-{i}", f"the film {i} .", None, y) for i, y in enumerate(sets)]
    base = {"task": "multilabel", "text_columns": ["t"], "label_column": "y"}

    def task_with(pos_weight):
        task = make_task({**base, "pos_weight": pos_weight}, tok, tiny_dir, rt)
        task.fit_labels(examples)
        return task

    balanced = task_with("balanced")
    assert balanced.labels == ["city", "good", "person"]
    assert balanced.pos_weights == pytest.approx([2 / 4, 4 / 2, 5 / 1])  # each label's negatives per positive
    assert balanced.settings()["pos_weight"] == pytest.approx({"city": 0.5, "good": 2.0, "person": 5.0})
    assert task_with(3.0).pos_weights == [3.0, 3.0, 3.0] and task_with(None).pos_weights is None
    (tmp_path / "w.json").write_text(json.dumps({"city": 1, "good": 2.5, "person": 7}))
    assert task_with(str(tmp_path / "w.json")).pos_weights == [1.0, 2.5, 7.0]
    (tmp_path / "bad.json").write_text(json.dumps({"city": 1, "good": 2}))
    with pytest.raises(UserError, match=r"positive weights must name each label .* missing person") as caught:
        task_with(str(tmp_path / "bad.json"))
    assert "bad.json" in str(caught.value)

    torch.manual_seed(0)
    model = balanced.new_model(tiny_dir).eval()
    batch = balanced.collate(balanced.prepare(examples, train=True).features)
    with torch.no_grad():
        logits, loss = model(**batch.inputs).logits, balanced.loss(model, batch)
    total = 0.0  # mean over (row, label) of -(w_l * y * log s(x) + (1 - y) * log(1 - s(x)))
    for row, hot in zip(logits.tolist(), batch.targets["labels"].tolist()):
        for x, y, w in zip(row, hot, balanced.pos_weights):
            s = 1 / (1 + math.exp(-x))
            total -= w * y * math.log(s) + (1 - y) * math.log(1 - s)
    assert loss.item() == pytest.approx(total / (len(sets) * 3), abs=1e-6)
    assert loss.item() != pytest.approx(task_with(None).loss(model, batch).item(), abs=1e-4)


def test_evaluate_threshold_overrides_the_saved_one(multilabel_run, capsys):
    from bertkit.eval.metrics import multilabel_metrics

    folder, results = multilabel_run
    model, dev = folder / "out" / "model", folder / "dev.jsonl"
    out = folder / "at-0.9.tsv"
    evaluated = evaluate(capsys, model, "multilabel", dev, "--threshold", "0.9", "--out", out)
    assert evaluated["threshold"] == 0.9 != results["seeds"][0]["dev"]["threshold"]
    rows = [line.split("\t") for line in out.read_text().splitlines()[1:]]
    labels = ["bad", "city", "good", "person"]
    assert all(set(filter(None, r[1].split("|"))) == {n for n, p in zip(labels, map(float, r[2:])) if p >= 0.9}
               for r in rows if all(abs(float(p) - 0.9) > 1e-4 for p in r[2:]))
    probs = np.array([[float(p) for p in r[2:]] for r in rows])
    gold = np.array([[n in json.loads(line)["tags"] for n in labels] for line in dev.read_text().splitlines()])
    want = multilabel_metrics(probs >= 0.9, gold, labels)
    assert evaluated["micro_f1"] == pytest.approx(want["micro_f1"], abs=1e-6)


def test_pos_weight_balanced_from_the_command_line_is_recorded_per_label(tiny_dir, tmp_path):
    train, dev = _write_multilabel(tmp_path, n_train=24, n_dev=8)
    results = finetune(tiny_dir, tmp_path / "out", "multilabel", train, dev, "--text-columns", "text",
                       "--label-column", "tags", "--label-separator", "|", "--pos-weight", "balanced")
    sets = [line.split("\t")[1].split("|") for line in train.read_text().splitlines()[1:]]
    want = {n: (24 - k) / k for n in ("bad", "city", "good", "person") for k in [sum(n in s for s in sets)]}
    assert results["task_settings"]["pos_weight"] == pytest.approx(want)
    saved = json.loads((tmp_path / "out" / "model" / "finetune.json").read_text())
    assert saved["pos_weight"] == pytest.approx(want)
