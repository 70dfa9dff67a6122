"""SQuAD v1.1 exact match and F1, with the same numbers as the official evaluate-v1.1.py.

Normalisation, in the official order: lower case; delete every ASCII punctuation character
(string.punctuation; other symbols such as curly quotes stay); replace the words a/an/the with a
space; collapse white space. F1 is over the bags of normalised white-space tokens. Each question
scores the maximum over its gold answers; a question with no prediction scores 0 and still
counts in the total. Both scores are percentages of all gold questions.

`decode_answers` turns a model's start/end logits over the windows of `bertkit.data.squad` back
into answer text, as BERT's run_squad.py does.
"""

from __future__ import annotations

import re
import string
from collections import Counter

import numpy as np

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    predicted = normalize_answer(prediction).split()
    expected = normalize_answer(gold).split()
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def _gold_answers(examples_or_gold_json) -> list[tuple[str, list[str]]]:
    """(question id, gold answer texts) from SquadExamples or a parsed SQuAD JSON ({"data": ..})."""
    if isinstance(examples_or_gold_json, dict):
        articles = examples_or_gold_json.get("data", [])
        return [(qa["id"], [a["text"] for a in qa["answers"]])
                for article in articles for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    return [(e.id, [text for text, _ in e.answers]) for e in examples_or_gold_json]


def evaluate(examples_or_gold_json, predictions: dict[str, str]) -> dict[str, float]:
    """{"exact_match", "f1"} in percent over all gold questions, "count" questions, "missing"."""
    gold = _gold_answers(examples_or_gold_json)
    em_total = f1_total = 0.0
    missing = 0
    for qid, answers in gold:
        if qid not in predictions:
            missing += 1
            continue
        prediction = predictions[qid]
        em_total += max((exact_match(prediction, a) for a in answers), default=0.0)
        f1_total += max((f1(prediction, a) for a in answers), default=0.0)
    count = len(gold)
    return {
        "exact_match": 100.0 * em_total / count if count else 0.0,
        "f1": 100.0 * f1_total / count if count else 0.0,
        "count": count,
        "missing": missing,
    }


def decode_answers(examples, features, start_logits, end_logits, n_best: int = 20,
                   max_answer_len: int = 30) -> dict[str, str]:
    """The best answer text per example id across all its windows (highest start + end logit).

    `start_logits[f]` and `end_logits[f]` hold window f's logits (longer rows are cut to the
    window). A span is valid when both ends are context tokens, start <= end, it has at most
    max_answer_len tokens, and its start token has max context in that window.
    """
    best: dict[int, tuple[float, int, int, int]] = {}
    for f in range(len(features)):
        span = best_span(features, f, start_logits[f], end_logits[f], n_best, max_answer_len)
        if span is None:
            continue
        example = int(features.example_index[f])
        if example not in best or span[0] > best[example][0]:
            best[example] = (span[0], f, span[1], span[2])
    predictions = {}
    for index, example in enumerate(examples):
        if index not in best:
            predictions[example.id] = ""
            continue
        _, f, s, e = best[index]
        predictions[example.id] = example.context[features.offsets[f][s][0]:features.offsets[f][e][1]]
    return predictions


def best_span(features, f: int, start_row, end_row, n_best: int, max_answer_len: int):
    """(score, start, end) of window f's best valid span among its n_best starts and ends; or None."""
    n = len(features.offsets[f])
    start_logits = np.asarray(start_row, dtype=np.float64)[:n]
    end_logits = np.asarray(end_row, dtype=np.float64)[:n]
    allowed_start = np.asarray([o is not None for o in features.offsets[f]])
    allowed_end = allowed_start.copy()
    if features.max_context:
        allowed_start &= np.asarray(features.max_context[f], dtype=bool)
    starts = np.argsort(-start_logits, kind="stable")[:n_best]  # (S,) best first
    ends = np.argsort(-end_logits, kind="stable")[:n_best]  # (E,)
    length = ends[None, :] - starts[:, None] + 1  # (S, E) tokens in each candidate span
    valid = allowed_start[starts][:, None] & allowed_end[ends][None, :] & (length >= 1) & (length <= max_answer_len)
    if not valid.any():
        return None
    score = np.where(valid, start_logits[starts][:, None] + end_logits[ends][None, :], -np.inf)
    i, j = np.unravel_index(np.argmax(score), score.shape)  # first maximum: best start, then end
    return float(score[i, j]), int(starts[i]), int(ends[j])
