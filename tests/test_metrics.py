"""Metrics against hand-computed values: GLUE (MCC, F1, Pearson/Spearman with ties), the SQuAD
v1.1 answer normalisation and max over gold answers, and conlleval's chunk rules and scores."""

from __future__ import annotations

import math
import random

import pytest

from bertkit.data.glue import GLUE
from bertkit.eval import conlleval, metrics, squad

# 8 binary predictions: TP = 3 (0, 4, 6), FP = 2 (1, 7), TN = 2 (2, 3), FN = 1 (5)
PREDS = [1, 1, 0, 0, 1, 0, 1, 1]
LABELS = [1, 0, 0, 0, 1, 1, 1, 0]


def test_accuracy_f1_matthews_by_hand():
    assert metrics.accuracy(PREDS, LABELS) == pytest.approx(5 / 8)
    assert metrics.f1_binary(PREDS, LABELS, positive=1) == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))
    # MCC = (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = 4 / sqrt(240)
    assert metrics.matthews(PREDS, LABELS) == pytest.approx(4 / math.sqrt(240), abs=1e-12)
    assert metrics.matthews(LABELS, LABELS) == pytest.approx(1.0)
    assert metrics.matthews([1 - y for y in LABELS], LABELS) == pytest.approx(-1.0)
    assert metrics.matthews([1] * 8, LABELS) == 0.0  # a constant predictor: 0, not NaN
    assert metrics.f1_binary([0, 0], [0, 0]) == 0.0


def test_matthews_multiclass_matches_confusion_formula():
    # Gorodkin's R_K on a 3-class confusion matrix computed by hand:
    # c = 5 correct of s = 7; p_k = (3, 2, 2) predicted; t_k = (3, 3, 1) true.
    preds = ["a", "a", "a", "b", "b", "c", "c"]
    labels = ["a", "b", "a", "b", "b", "c", "a"]
    numerator = 5 * 7 - (3 * 3 + 2 * 3 + 2 * 1)
    denominator = math.sqrt((49 - (9 + 4 + 4)) * (49 - (9 + 9 + 1)))
    assert metrics.matthews(preds, labels) == pytest.approx(numerator / denominator)


def test_pearson_and_spearman_with_ties():
    x, y = [1, 2, 3, 4, 5], [2, 4, 5, 4, 5]
    assert metrics.pearson(x, y) == pytest.approx(6 / math.sqrt(60))
    # y's tied values share average ranks: 2 -> 1; 4, 4 -> 2.5; 5, 5 -> 4.5
    assert metrics.average_ranks(y).tolist() == [1.0, 2.5, 4.5, 2.5, 4.5]
    assert metrics.spearman(x, y) == pytest.approx(7 / math.sqrt(90))
    assert metrics.spearman([10, 20, 30], [3, 2, 1]) == pytest.approx(-1.0)
    assert metrics.pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_task_metrics_names_and_percentages():
    mrpc = metrics.task_metrics(GLUE["mrpc"], [str(p) for p in PREDS], [str(y) for y in LABELS])
    assert mrpc == pytest.approx({"f1": 100 * 6 / 9, "accuracy": 62.5})
    stsb = metrics.task_metrics(GLUE["stsb"], [1, 2, 3, 4, 5], [2.0, 4.0, 5.0, 4.0, 5.0])
    assert stsb == pytest.approx({"pearson": 100 * 6 / math.sqrt(60), "spearman": 100 * 7 / math.sqrt(90)})
    assert set(metrics.task_metrics(GLUE["cola"], ["1", "0"], ["1", "0"])) == {"mcc"}
    assert GLUE["mrpc"].main_metric == "f1" and GLUE["stsb"].main_metric == "spearman"


def test_squad_normalisation():
    assert squad.normalize_answer("The  Denver\tBroncos!") == "denver broncos"
    assert squad.normalize_answer("an apple, a pear & the... fig") == "apple pear fig"
    # articles are whole words only, and punctuation goes first: "a.n" becomes the article "an"
    assert squad.normalize_answer("Theater Anthem a.n") == "theater anthem"
    assert squad.normalize_answer("“quoted”") == "“quoted”"  # only ASCII punctuation is removed
    assert squad.exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    assert squad.f1("a red car", "the red bus") == pytest.approx(0.5)
    assert squad.f1("red red car", "red car") == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    assert squad.f1("the", "a") == 0.0  # both normalise to nothing: no common tokens


def test_squad_evaluate_takes_max_over_gold_and_counts_missing():
    gold = {"data": [{"title": "t", "paragraphs": [{"context": "c", "qas": [
        {"id": "q1", "answers": [{"text": "Denver Broncos", "answer_start": 0},
                                 {"text": "the Broncos", "answer_start": 0}]},
        {"id": "q2", "answers": [{"text": "red car", "answer_start": 0}]},
        {"id": "q3", "answers": [{"text": "x", "answer_start": 0}]},
    ]}]}]}
    result = squad.evaluate(gold, {"q1": "Broncos", "q2": "a red bus"})
    # q1: EM 1 via "the Broncos"; q2: F1 0.5; q3 missing scores 0 but counts.
    assert result["count"] == 3 and result["missing"] == 1
    assert result["exact_match"] == pytest.approx(100 / 3)
    assert result["f1"] == pytest.approx(100 * 1.5 / 3)


@pytest.mark.parametrize("tags,expected", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
    (["O", "I-PER", "I-PER"], [("PER", 1, 2)]),  # I- after O starts a chunk, which runs to the end
    (["B-PER", "I-ORG", "I-ORG"], [("PER", 0, 0), ("ORG", 1, 2)]),  # type change inside a chunk
    (["I-PER", "I-PER", "B-PER", "O"], [("PER", 0, 1), ("PER", 2, 2)]),  # IOB1
    (["B-LOC", "B-LOC"], [("LOC", 0, 0), ("LOC", 1, 1)]),
    (["B-creative-work", "I-creative-work"], [("creative-work", 0, 1)]),  # hyphen inside a type
])
def test_conlleval_chunks(tags, expected):
    assert conlleval.chunks(tags) == expected


def test_conlleval_scores_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["I-ORG", "O"]]
    r = conlleval.evaluate(gold, pred)
    # gold chunks PER, LOC, ORG; predicted PER, ORG, ORG (I-ORG after a boundary starts one)
    assert (r["phrases"], r["found"], r["correct"], r["tokens"]) == (3, 3, 2, 6)
    assert r["precision"] == pytest.approx(200 / 3) and r["recall"] == pytest.approx(200 / 3)
    assert r["accuracy"] == pytest.approx(400 / 6)  # B-LOC/B-ORG and B-ORG/I-ORG differ
    assert r["per_type"]["ORG"] == pytest.approx({"precision": 50.0, "recall": 100.0, "f1": 200 / 3,
                                                  "support": 1, "predicted": 2})
    assert r["per_type"]["LOC"]["f1"] == 0.0 and r["per_type"]["PER"]["f1"] == 100.0


def test_conlleval_sentence_end_closes_chunks():
    # Two I-PER across a sentence break are two chunks: a chunk ends at the end of its sentence.
    gold = [["O", "B-PER"], ["I-PER", "O"]]
    r = conlleval.evaluate(gold, [["O", "B-PER"], ["B-PER", "O"]])
    assert (r["phrases"], r["found"], r["correct"]) == (2, 2, 2)
    r = conlleval.evaluate([["B-PER", "I-PER"]], [["B-PER", "I-PER"]])
    assert (r["phrases"], r["correct"], r["f1"]) == (1, 1, 100.0)
    r = conlleval.evaluate([["B-PER", "I-PER"]], [["B-PER", "O"]])  # end differs: not correct
    assert (r["found"], r["correct"]) == (1, 0)


def test_conlleval_equals_exact_chunk_matching_on_random_iob():
    """conlleval's streaming state machine scores the same as comparing (type, start, end) sets."""
    rng = random.Random(13)
    tagset = ["O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"]
    for _ in range(200):
        gold = [[rng.choice(tagset) for _ in range(rng.randint(1, 7))] for _ in range(rng.randint(1, 4))]
        pred = [[t if rng.random() < 0.6 else rng.choice(tagset) for t in s] for s in gold]
        g = {(i, c) for i, s in enumerate(gold) for c in conlleval.chunks(s)}
        p = {(i, c) for i, s in enumerate(pred) for c in conlleval.chunks(s)}
        r = conlleval.evaluate(gold, pred)
        assert (r["phrases"], r["found"], r["correct"]) == (len(g), len(p), len(g & p))
