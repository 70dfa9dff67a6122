"""The fine-tuning recipe knobs (issue 17): --max-grad-norm, --adam-eps, --classifier-dropout, --eval-every.

Each knob must do what its help says and nothing else: scoring dev between epochs must not
change the training trajectory (evaluation draws no random numbers), clipping at 0 must mean
"off" (not "zero the gradient"), and a dropout value must reach the head and the saved config.
The defaults' numbers are pinned separately (tests/test_pinned_behaviour.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from finetune_helpers import ENV, finetune, write_sst2

EXTRA = ("--epochs", "2", "--lr", "3e-3", "--warmup", "0")  # 40 examples, batch 8: 5 steps per epoch


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    root = tmp_path_factory.mktemp("sst2")
    write_sst2(root / "train.tsv", 40, 0)
    write_sst2(root / "dev.tsv", 20, 1)
    return root


def _run(tiny_dir, sst2, tmp_path, name: str, *extra: str) -> dict:
    return finetune(tiny_dir, tmp_path / name, "sst2", sst2 / "train.tsv", sst2 / "dev.tsv", *EXTRA, *extra)


def test_eval_every_records_the_curve_and_leaves_training_unchanged(tiny_dir, sst2, tmp_path):
    plain = _run(tiny_dir, sst2, tmp_path, "plain")["seeds"][0]
    curve = _run(tiny_dir, sst2, tmp_path, "curve", "--eval-every", "2")["seeds"][0]
    assert curve["train_loss"] == plain["train_loss"]
    assert curve["epochs"] == plain["epochs"] and curve["dev"] == plain["dev"]
    assert [e["step"] for e in curve["evals"]] == [2, 4, 5, 6, 8, 10]
    assert [e["epoch"] for e in curve["evals"]] == [0.4, 0.8, 1.0, 1.2, 1.6, 2.0]
    # each evaluation's train loss is the mean over the steps since the previous one
    assert curve["evals"][2]["train_loss"] == pytest.approx(curve["train_loss"][4], abs=1e-4)
    assert curve["evals"][3]["train_loss"] == pytest.approx(sum(curve["train_loss"][5:6]), abs=1e-4)
    # the epoch-end evaluations are the per-epoch records
    ends = [e for e in curve["evals"] if e["step"] % 5 == 0]
    for end, epoch in zip(ends, curve["epochs"]):
        assert end["accuracy"] == epoch["accuracy"]
    # without --eval-every, one evaluation per epoch, with its step
    assert [(e["step"], e["epoch"]) for e in plain["evals"]] == [(5, 1.0), (10, 2.0)]
    assert (tmp_path / "curve" / "dev_accuracy.png").stat().st_size > 1000


def test_max_grad_norm_zero_turns_clipping_off(tiny_dir, sst2, tmp_path):
    off = _run(tiny_dir, sst2, tmp_path, "off", "--max-grad-norm", "0")["seeds"][0]["train_loss"]
    huge = _run(tiny_dir, sst2, tmp_path, "huge", "--max-grad-norm", "1e9")["seeds"][0]["train_loss"]
    tight = _run(tiny_dir, sst2, tmp_path, "tight", "--max-grad-norm", "1e-3")
    assert off == pytest.approx(huge, abs=1e-5)  # 0 means no clipping, not a zeroed gradient
    assert tight["seeds"][0]["train_loss"][1:] != pytest.approx(off[1:], abs=1e-4)  # a norm that bites changes steps
    assert tight["hyper"]["max_grad_norm"] == 1e-3


def test_adam_eps_reaches_the_optimizer(tiny_dir, sst2, tmp_path):
    default = _run(tiny_dir, sst2, tmp_path, "eps-default")
    same = _run(tiny_dir, sst2, tmp_path, "eps-1e-6", "--adam-eps", "1e-6")["seeds"][0]["train_loss"]
    # an epsilon far above sqrt(v) shrinks every Adam step: the trajectory must change
    big = _run(tiny_dir, sst2, tmp_path, "eps-big", "--adam-eps", "1e-2")
    assert default["hyper"]["adam_eps"] == 1e-6 and big["hyper"]["adam_eps"] == 1e-2
    assert same == default["seeds"][0]["train_loss"]
    assert big["seeds"][0]["train_loss"][1:] != pytest.approx(same[1:], abs=1e-4)


def test_classifier_dropout_reaches_the_head_and_the_saved_config(tiny_dir, sst2, tmp_path):
    default = _run(tiny_dir, sst2, tmp_path, "default")
    none = _run(tiny_dir, sst2, tmp_path, "none", "--classifier-dropout", "0")
    heavy = _run(tiny_dir, sst2, tmp_path, "heavy", "--classifier-dropout", "0.5")
    assert json.loads((tmp_path / "none" / "model" / "config.json").read_text())["classifier_dropout"] == 0
    assert json.loads((tmp_path / "heavy" / "model" / "config.json").read_text())["classifier_dropout"] == 0.5
    assert "classifier_dropout" not in json.loads((tmp_path / "default" / "model" / "config.json").read_text()) \
        or json.loads((tmp_path / "default" / "model" / "config.json").read_text())["classifier_dropout"] is None
    losses = [r["seeds"][0]["train_loss"] for r in (default, none, heavy)]
    assert losses[0] != losses[1] and losses[1] != losses[2]
    assert heavy["hyper"]["classifier_dropout"] == 0.5 and default["hyper"]["classifier_dropout"] is None


def test_trainer_script_records_the_same_curve_steps(tiny_dir, sst2, tmp_path):
    """bench/hf_trainer_finetune.py --eval-every scores dev at bertkit's steps (every N, and at
    each epoch's end once), in the same results.json layout, and draws the same plot."""
    pytest.importorskip("accelerate")
    ours = _run(tiny_dir, sst2, tmp_path, "ours", "--eval-every", "2", "--classifier-dropout", "0.2")["seeds"][0]
    script = Path(__file__).resolve().parents[1] / "bench" / "hf_trainer_finetune.py"
    out = tmp_path / "trainer"
    proc = subprocess.run([sys.executable, str(script), "--model", str(tiny_dir), "--task", "sst2",
                           "--train", str(sst2 / "train.tsv"), "--dev", str(sst2 / "dev.tsv"), "--out", str(out),
                           "--batch-size", "8", "--seeds", "1", "--device", "cpu", *EXTRA,
                           "--eval-every", "2", "--classifier-dropout", "0.2"],
                          check=False, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    theirs = results["seeds"][0]
    assert [(e["step"], e["epoch"]) for e in theirs["evals"]] == [(e["step"], e["epoch"]) for e in ours["evals"]]
    assert [e["epoch"] for e in theirs["epochs"]] == [1, 2] and theirs["steps"] == ours["steps"] == 10
    assert set(theirs["evals"][0]) == set(ours["evals"][0])
    assert theirs["dev"] == {k: theirs["evals"][-1][k] for k in theirs["dev"]}
    assert results["hyper"]["classifier_dropout"] == 0.2
    assert (out / "dev_accuracy.png").stat().st_size > 1000


def test_trainer_script_passes_adam_eps_to_trainer(tmp_path):
    pytest.importorskip("accelerate")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import hf_trainer_finetune

    base = ["--model", "m", "--task", "rte", "--train", "t", "--dev", "d", "--out", str(tmp_path), "--device", "cpu"]
    default = hf_trainer_finetune.training_args(hf_trainer_finetune.parse_args(base), 1)
    given = hf_trainer_finetune.training_args(hf_trainer_finetune.parse_args([*base, "--adam-eps", "1e-6"]), 1)
    assert default.adam_epsilon == 1e-8 and given.adam_epsilon == 1e-6


@pytest.mark.parametrize("task", ["mrpc", "stsb"])
def test_trainer_script_scores_predictions_against_the_labels_beside_them(task):
    """With group_by_length, Trainer evaluates in a shuffled, length-grouped order, so the score must
    not depend on the order predictions arrive in. It once paired them with the dev file's order,
    which put Trainer's MRPC F1 eight points under bertkit's (75.6 against 84.1, 4 seeds each)."""
    pytest.importorskip("accelerate")
    import numpy as np
    from transformers import EvalPrediction

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import hf_trainer_finetune
    from bertkit.data.glue import glue_task

    spec = glue_task(task)
    rng = np.random.default_rng(0)
    if spec.kind == "regression":
        labels = rng.uniform(0, 5, 60).astype(np.float32)
        logits = (labels + rng.normal(0, 0.5, 60)).astype(np.float32)[:, None]  # (60, 1)
    else:
        labels = rng.integers(0, 2, 60)
        right = np.arange(60) % 5 != 0  # 48 of 60 predicted right
        logits = np.eye(2, dtype=np.float32)[np.where(right, labels, 1 - labels)]  # (60, 2)
    score = hf_trainer_finetune.scorer(spec)
    want = score(EvalPrediction(predictions=logits, label_ids=labels))
    order = rng.permutation(60)
    assert score(EvalPrediction(predictions=logits[order], label_ids=labels[order])) == pytest.approx(want)
    if spec.kind != "regression":
        assert want["accuracy"] == pytest.approx(80.0)
    else:
        assert want["spearman"] > 90
