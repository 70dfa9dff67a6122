"""Scoring predictions files against gold files with the official metrics (`bertkit score`).

SQuAD: a JSON {question id: answer text} against the official JSON; NER: a CoNLL file of
predicted tags against the gold CoNLL file (same sentences and tokens), or one file in
conlleval's layout; GLUE: one label per line (or GLUE's index/prediction layout) against the
task's TSV. Predictions are matched to gold by question id (SQuAD) or by position (NER, GLUE):
when no SQuAD id matches, the files do not belong together and scoring stops; when only some
do, a warning on stderr gives the counts (the unmatched gold questions score 0).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bertkit.errors import UserError


def _warn(message: str) -> None:
    print(f"bertkit score: warning: {message}", file=sys.stderr, flush=True)


def score_squad(gold: Path, pred: Path, warn=_warn) -> dict:
    from bertkit.data.squad import read_squad
    from bertkit.eval.squad import evaluate

    examples = read_squad(gold)
    try:
        predictions = json.loads(pred.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError("no such file", pred) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"not a JSON predictions file ({e})", pred) from None
    if not isinstance(predictions, dict) or not all(isinstance(v, str) for v in predictions.values()):
        raise UserError('expected a JSON object {"question id": "answer text"}', pred)
    if not predictions:
        raise UserError("no predictions in the file", pred)
    gold_ids = {e.id for e in examples}
    matched = len(gold_ids.intersection(predictions))
    if not matched:
        raise UserError(f"none of its {len(predictions):,} question ids (such as {next(iter(predictions))!r}) is in "
                        f"the gold file {gold}: predictions for another data set?", pred)
    if matched < len(predictions) or matched < len(gold_ids):
        warn(f"{matched:,} of the {len(predictions):,} predictions in {pred} match the {len(gold_ids):,} gold "
             f"questions of {gold}; {len(predictions) - matched:,} are ignored and "
             f"{len(gold_ids) - matched:,} gold questions without a prediction score 0")
    return evaluate(examples, predictions)


def score_ner(gold: Path, pred: Path) -> dict:
    from bertkit.data.ner import read_conll
    from bertkit.eval.conlleval import evaluate

    gold_sentences, pred_sentences = read_conll(gold), read_conll(pred)
    if len(gold_sentences) != len(pred_sentences):
        raise UserError(f"{len(pred_sentences)} sentences but the gold file {gold} has {len(gold_sentences)}", pred)
    for number, (g, p) in enumerate(zip(gold_sentences, pred_sentences), start=1):
        if g.tokens != p.tokens:
            raise UserError(f"sentence {number} has other tokens than in the gold file {gold}", pred)
    return evaluate([s.tags for s in gold_sentences], [s.tags for s in pred_sentences])


def score_conlleval_file(path: Path) -> dict:
    from bertkit.eval.conlleval import evaluate
    from bertkit.io import read_lines

    gold, pred = [[]], [[]]
    width = None
    for number, text in enumerate(read_lines(path), start=1):
        fields = text.split()
        if not fields or fields[0] == "-DOCSTART-":
            if gold[-1]:
                gold.append([])
                pred.append([])
            continue
        width = width or len(fields)
        if len(fields) < 2 or len(fields) != width:
            raise UserError(f"expected {max(width, 2)} columns ending in gold and predicted tag, found {len(fields)}",
                            path, number)
        gold[-1].append(fields[-2])
        pred[-1].append(fields[-1])
    if not gold[-1]:
        gold.pop()
        pred.pop()
    if not gold:
        raise UserError("no tokens in file", path)
    return evaluate(gold, pred)


def score_glue(task: str, gold: Path, pred: Path) -> dict:
    from bertkit.data.glue import glue_task, read_glue, read_predictions
    from bertkit.eval.metrics import task_metrics

    spec = glue_task(task)
    examples = read_glue(spec.name, gold)
    labels = [e.label for e in examples]
    if any(label is None for label in labels):
        raise UserError("gold file has no labels (a test split?)", gold)
    predictions = read_predictions(pred, spec)
    if len(predictions) != len(labels):
        raise UserError(f"{len(predictions)} predictions for {len(labels)} gold examples in {gold}", pred)
    result = task_metrics(spec, predictions, labels)
    result["count"] = len(labels)
    return {"task": spec.name, **result}
