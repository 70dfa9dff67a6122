"""SQuAD v1.1 exact match and F1, with the same numbers as the official evaluate-v1.1.py.

Normalisation, in the official order: lower case; delete every ASCII punctuation character
(string.punctuation; other symbols such as curly quotes stay); replace the words a/an/the with a
space; collapse white space. F1 is over the bags of normalised white-space tokens. Each question
scores the maximum over its gold answers; a question with no prediction scores 0 and still
counts in the total. Both scores are percentages of all gold questions.
"""

from __future__ import annotations

import re
import string
from collections import Counter

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
