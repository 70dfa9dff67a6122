"""Fine-tuning and evaluation end to end on a tiny random model, through the CLI.

Every task runs a few steps on small files written in the official layouts; `bertkit evaluate`
must reproduce the dev metrics finetune recorded for the saved model, which transformers must
load strictly and run to the same logits. Zero-shot STS-B uses the real MiniLM checkpoint.
"""

from __future__ import annotations

import errno
import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import shared_path
from finetune_helpers import (
    ENV,
    assert_same_metrics,
    evaluate,
    finetune,
    run_cli,
    sentence,
    write_conll,
    write_mrpc,
    write_squad,
    write_sst2,
    write_stsb,
)


def test_sst2_through_subprocess_then_evaluate_and_transformers(tiny_dir, tmp_path):
    write_sst2(tmp_path / "train.tsv", 26, 0)
    write_sst2(tmp_path / "dev.tsv", 14, 1)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "bertkit.cli", "finetune", "--model", str(tiny_dir), "--task", "sst2",
           "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv"), "--out", str(out),
           "--epochs", "2", "--batch-size", "13", "--seeds", "1,2", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "median" in proc.stdout and "saved seed" in proc.stdout
    results = json.loads((out / "results.json").read_text())
    assert [r["seed"] for r in results["seeds"]] == [1, 2]
    assert all(len(r["epochs"]) == 2 and len(r["train_loss"]) == 4 for r in results["seeds"])
    a, b = (r["dev"]["accuracy"] for r in results["seeds"])
    summary = results["summary"]["accuracy"]
    assert summary["median"] == pytest.approx((a + b) / 2) and summary["std"] == pytest.approx(abs(a - b) / 2 ** 0.5)
    assert (out / "train_loss.png").stat().st_size > 0 and (out / "dev_accuracy.png").stat().st_size > 0
    lines = (out / "predictions.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 15
    assert {ln.split("\t")[1] for ln in lines[1:]} <= {"0", "1"}

    proc = subprocess.run([sys.executable, "-m", "bertkit.cli", "evaluate", "--model", str(out / "model"),
                           "--task", "sst2", "--data", str(tmp_path / "dev.tsv")],
                          capture_output=True, text=True, timeout=60, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert_same_metrics(results, json.loads(proc.stdout))

    import transformers

    from bertkit import BertForSequenceClassification

    hf, info = transformers.BertForSequenceClassification.from_pretrained(out / "model", output_loading_info=True)
    assert not any(info.values()), info
    assert hf.config.id2label == {0: "0", 1: "1"}
    ours = BertForSequenceClassification.from_pretrained(out / "model").eval()
    ids = torch.tensor([[2, 10, 20, 30, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        diff = (hf.eval()(input_ids=ids, attention_mask=mask).logits - ours(ids, mask).logits).abs().max().item()
    assert diff < 1e-5, f"max |logit difference| {diff}"


def test_transformers_recipe_script_trains_transformers_model(tiny_dir, tmp_path):
    """bench/hf_finetune.py: bertkit's recipe around transformers' model. The run must train (it
    fits the set the overfitting test fits), save a directory both libraries load, and
    `bertkit evaluate` must reproduce the dev metrics it recorded."""
    write_sst2(tmp_path / "train.tsv", 16, 3)
    out = tmp_path / "hf"
    script = Path(__file__).resolve().parents[1] / "bench" / "hf_finetune.py"
    proc = subprocess.run([sys.executable, str(script), "--model", str(tiny_dir), "--task", "sst2",
                           "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "train.tsv"),
                           "--out", str(out), "--epochs", "40", "--batch-size", "8", "--lr", "3e-3",
                           "--warmup", "0", "--seeds", "1", "--no-progress"],
                          capture_output=True, text=True, timeout=180, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "the model below is transformers'" in proc.stdout
    # transformers' save_pretrained stamps its version; bertkit's does not: the model was theirs
    assert "transformers_version" in json.loads((out / "model" / "config.json").read_text())
    results = json.loads((out / "results.json").read_text())
    assert results["seeds"][0]["dev"]["accuracy"] == 100.0
    losses = results["seeds"][0]["train_loss"]
    assert losses[-1] < 0.1 < losses[0]
    proc = subprocess.run([sys.executable, "-m", "bertkit.cli", "evaluate", "--model", str(out / "model"),
                           "--task", "sst2", "--data", str(tmp_path / "train.tsv")],
                          capture_output=True, text=True, timeout=60, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert_same_metrics(results, json.loads(proc.stdout))


def test_stsb_regression_and_mrpc(tiny_dir, tmp_path, capsys):
    write_stsb(tmp_path / "train.tsv", 26, 0)
    write_stsb(tmp_path / "dev.tsv", 13, 1)
    results = finetune(tiny_dir, tmp_path / "stsb", "stsb", tmp_path / "train.tsv", tmp_path / "dev.tsv",
                       "--group-by-length")
    assert set(results["seeds"][0]["dev"]) == {"pearson", "spearman"}
    config = json.loads((tmp_path / "stsb" / "model" / "config.json").read_text())
    assert config["problem_type"] == "regression" and len(config["id2label"]) == 1
    rows = (tmp_path / "stsb" / "predictions.tsv").read_text().splitlines()[1:]
    assert len(rows) == 13 and all(float(r.split("\t")[1]) == float(r.split("\t")[1]) for r in rows)
    assert_same_metrics(results, evaluate(capsys, tmp_path / "stsb" / "model", "stsb", tmp_path / "dev.tsv"))

    write_mrpc(tmp_path / "mtrain.tsv", 26, 0)
    write_mrpc(tmp_path / "mdev.tsv", 13, 1)
    results = finetune(tiny_dir, tmp_path / "mrpc", "mrpc", tmp_path / "mtrain.tsv", tmp_path / "mdev.tsv")
    assert results["main_metric"] == "f1" and set(results["seeds"][0]["dev"]) == {"f1", "accuracy"}


def test_classify_jsonl_bf16_labels_saved_and_evaluate_reproduces(tiny_dir, tmp_path, capsys):
    rng = random.Random(0)
    for name, n in (("train", 26), ("dev", 13)):
        rows = [{"review": sentence(rng, i % 2 == 0), "stars": "pos" if i % 2 == 0 else "neg"} for i in range(n)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    results = finetune(tiny_dir, out, "classify", tmp_path / "train.jsonl", tmp_path / "dev.jsonl",
                       "--text-columns", "review", "--label-column", "stars", "--precision", "bf16")
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"}
    assert_same_metrics(results, evaluate(capsys, out / "model", "classify", tmp_path / "dev.jsonl",
                                          "--precision", "bf16"))


def test_epoch_batches_cover_each_example_once_and_group_by_length():
    from bertkit.finetune.loop import epoch_batches

    rng = random.Random(0)
    lengths = [rng.randrange(5, 120) for _ in range(1000)]
    g = torch.Generator().manual_seed(0)
    plain, grouped = epoch_batches(lengths, 13, g, False), epoch_batches(lengths, 13, g, True)
    for batches in (plain, grouped):
        assert sorted(i for b in batches for i in b) == list(range(1000)) and max(map(len, batches)) == 13

    def padded(batches):
        return sum(max(lengths[i] for i in b) * len(b) for b in batches)

    assert padded(grouped) < 0.6 * padded(plain)
    assert grouped != epoch_batches(lengths, 13, g, True)  # a new order every epoch
    # The grouped batches come in a random order, not as sweeps from long to short (or short to
    # long) as transformers' LengthGroupedSampler yields each mega-batch: consecutive batches'
    # mean lengths rise about as often as they fall.
    means = [sum(lengths[i] for i in b) / len(b) for b in grouped]
    rises = sum(later > earlier for earlier, later in itertools.pairwise(means)) / (len(means) - 1)
    assert 0.3 < rises < 0.7, rises


def test_tiny_model_overfits_small_classification_set(tiny_dir, tmp_path):
    write_sst2(tmp_path / "train.tsv", 16, 3)
    results = finetune(tiny_dir, tmp_path / "out", "sst2", tmp_path / "train.tsv", tmp_path / "train.tsv",
                       "--epochs", "40", "--lr", "3e-3", "--warmup", "0")
    assert results["seeds"][0]["dev"]["accuracy"] == 100.0
    losses = results["seeds"][0]["train_loss"]
    assert losses[-1] < 0.1 < losses[0]


def test_ner_fine_tuned_and_feature_based(tiny_dir, tmp_path, capsys):
    write_conll(tmp_path / "train.txt", 26, 0)
    write_conll(tmp_path / "dev.txt", 13, 1)
    for mode, extra in (("ft", ()), ("fb", ("--feature-based", "--layers=-3,-2,-1"))):
        out = tmp_path / mode
        results = finetune(tiny_dir, out, "ner", tmp_path / "train.txt", tmp_path / "dev.txt", "--epochs", "2",
                           *extra)
        assert {"precision", "recall", "f1"} <= set(results["seeds"][0]["dev"])
        lines = [ln.split() for ln in (out / "predictions.conll").read_text().splitlines() if ln]
        assert len(lines) == 13 * 6 and all(len(x) == 3 for x in lines)
        assert lines[0][0] in ("john", "mary") and lines[0][1] == "B-PER"
        assert_same_metrics(results, evaluate(capsys, out / "model", "ner", tmp_path / "dev.txt"))
    import transformers

    _, info = transformers.BertForTokenClassification.from_pretrained(tmp_path / "ft" / "model",
                                                                      output_loading_info=True)
    assert not any(info.values()), info
    assert (tmp_path / "fb" / "model" / "tagger.safetensors").exists()
    _, info = transformers.BertModel.from_pretrained(tmp_path / "fb" / "model", output_loading_info=True)
    assert not any(info.values()), info


def test_squad_split_articles_long_contexts(tiny_dir, tmp_path, capsys):
    write_squad(tmp_path / "squad.json", 4, 0)
    out = tmp_path / "out"
    code = run_cli("finetune", "--model", tiny_dir, "--task", "squad", "--train", tmp_path / "squad.json",
                   "--split-articles", "3", "--out", out, "--epochs", "1", "--batch-size", "8", "--seeds", "1",
                   "--max-seq-len", "48", "--no-progress")
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["n_train"] == 18 and results["n_dev"] == 6
    assert {"exact_match", "f1"} <= set(results["seeds"][0]["dev"])
    predictions = json.loads((out / "predictions.json").read_text())
    assert len(predictions) == 6 and all(isinstance(v, str) for v in predictions.values())
    import transformers

    _, info = transformers.BertForQuestionAnswering.from_pretrained(out / "model", output_loading_info=True)
    assert not any(info.values()), info
    # Evaluating on the held-out articles alone reproduces the dev numbers.
    full = json.loads((tmp_path / "squad.json").read_text())
    held = [a for a in full["data"] if any(q["id"] in predictions for p in a["paragraphs"] for q in p["qas"])]
    (tmp_path / "held.json").write_text(json.dumps({"version": "1.1", "data": held}))
    assert_same_metrics(results, evaluate(capsys, out / "model", "squad", tmp_path / "held.json"))


def test_zero_shot_stsb_minilm_mean_pooling(minilm_dir, tmp_path, capsys):
    dev = shared_path("glue", "STS-B", "dev.tsv")
    lines = dev.read_text(encoding="utf-8").splitlines()
    (tmp_path / "dev.tsv").write_text("\n".join(lines[:201]) + "\n", encoding="utf-8")
    report = evaluate(capsys, minilm_dir, "stsb", tmp_path / "dev.tsv", "--zero-shot", "--pooling", "mean")
    assert report["examples"] == 200
    assert report["spearman"] > 70.0, report


@pytest.mark.parametrize("case", ["malformed_row", "wrong_label", "missing_train", "missing_model"])
def test_bad_inputs_exit_2_with_one_line(tiny_dir, tmp_path, capsys, case):
    write_sst2(tmp_path / "dev.tsv", 4, 0)
    train = tmp_path / "train.tsv"
    write_sst2(train, 4, 1)
    model = tiny_dir
    if case == "malformed_row":
        train.write_text(train.read_text() + "only one column\n")
    elif case == "wrong_label":
        train.write_text(train.read_text() + "a fine film\t7\n")
    elif case == "missing_train":
        train = tmp_path / "nope.tsv"
    else:
        model = tmp_path / "no-model"
    capsys.readouterr()
    code = run_cli("finetune", "--model", model, "--task", "sst2", "--train", train, "--dev", tmp_path / "dev.tsv",
                   "--out", tmp_path / "out", "--epochs", "1", "--seeds", "1", "--no-progress")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    if case in ("malformed_row", "wrong_label"):
        assert f"{train}:6:" in err, err
    else:
        assert "nope.tsv" in err or "no-model" in err, err
    assert not (tmp_path / "out" / "model").exists()


def test_ner_predictions_match_the_gold_tags_once_learned(tiny_dir, tmp_path):
    """Both NER modes learn the toy entities: predictions.conll carries the gold tags and the
    F1 is perfect, so a `predict` that drops or shifts tags fails here."""
    write_conll(tmp_path / "train.txt", 40, 0)
    write_conll(tmp_path / "dev.txt", 13, 1)
    for mode, extra in (("ft", ("--lr", "3e-3")), ("fb", ("--feature-based", "--layers=-3,-2,-1", "--lr", "1e-2"))):
        out = tmp_path / mode
        results = finetune(tiny_dir, out, "ner", tmp_path / "train.txt", tmp_path / "dev.txt", "--epochs", "6",
                           "--warmup", "0", *extra)
        rows = [ln.split() for ln in (out / "predictions.conll").read_text().splitlines() if ln]
        wrong = [r for r in rows if r[1] != r[2]]
        assert not wrong, f"{mode}: {len(wrong)} of {len(rows)} tokens mis-tagged, e.g. {wrong[:3]}"
        assert results["seeds"][0]["dev"]["f1"] == 100.0, (mode, results["seeds"][0]["dev"])


def test_output_replaced_only_with_overwrite_and_a_failed_run_keeps_what_it_made(tiny_dir, tmp_path, capsys,
                                                                                 monkeypatch):
    import bertkit.plots

    write_sst2(tmp_path / "train.tsv", 8, 0)
    write_sst2(tmp_path / "dev.tsv", 4, 1)
    with open(tmp_path / "dev.tsv", "a", encoding="utf-8") as f:
        f.write(" ".join(["the movie was very good ."] * 10) + "\t1\n")  # over 16 tokens
    out = tmp_path / "out"
    args = ("finetune", "--model", tiny_dir, "--task", "sst2", "--train", tmp_path / "train.tsv",
            "--dev", tmp_path / "dev.tsv", "--out", out, "--epochs", "1", "--seeds", "1", "--max-seq-len", "16",
            "--no-progress")
    assert run_cli(*args) == 0
    assert ("note: dev: 1 of 5 inputs were longer than 16 tokens and were cut to them (--long-inputs windows "
            "reads them whole)" in capsys.readouterr().out)
    assert run_cli("evaluate", "--model", out / "model", "--task", "sst2", "--data", tmp_path / "dev.tsv") == 0
    assert "bertkit evaluate: note: 1 of 5 inputs were longer than 16 tokens" in capsys.readouterr().err
    results = (out / "results.json").read_bytes()
    assert run_cli(*args) == 2
    assert "holds a previous fine-tuning result; pass --overwrite" in capsys.readouterr().err
    # A run that fails half-way (here: while plotting, after the model is saved) leaves OUT as it was,
    # keeps what it made beside it, and says in one line how to continue (exit status 1).
    def disk_full(runs, metric, folder):
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(folder) / "train_loss.png"))

    monkeypatch.setattr(bertkit.plots, "plot_finetuning", disk_full)
    assert run_cli(*args, "--overwrite") == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "train_loss.png: no space left on device; kept seed 1 (finished) in " in err[0], err
    assert err[0].endswith(" --no-progress --resume") and " --overwrite" not in err[0]
    assert (out / "results.json").read_bytes() == results and sorted(p.name for p in tmp_path.iterdir()) == [
        ".out.partial", "dev.tsv", "out", "train.tsv"]
    monkeypatch.undo()
    assert run_cli(*args, "--resume") == 0
    assert "continuing" not in capsys.readouterr().out  # the seed was done: only the results were left to write
    assert not (tmp_path / ".out.partial").exists()
    assert run_cli(*args, "--overwrite", "--epochs", "2") == 0
    assert json.loads((out / "results.json").read_text())["hyper"]["epochs"] == 2
