"""`bertkit score`: score a predictions file with a task's official metric, print JSON.

  --task squad   --gold dev-v1.1.json --pred predictions.json ({question id: answer text})
  --task ner     --gold gold.conll --pred pred.conll (same tokens, tag in the last column)
  --task ner     --conlleval output.txt (conlleval's input: ... gold-tag predicted-tag per line)
  --task <glue>  --gold dev.tsv --pred predictions.txt (one label per line, as
                 bertkit.data.tasks.write_predictions writes; GLUE's index/prediction layout too)
"""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.errors import UserError


def add_arguments(parser) -> None:
    parser.add_argument("--task", required=True, help="squad, ner, or a GLUE task (cola, sst2, mrpc, stsb, rte, ...)")
    parser.add_argument("--gold", help="gold file: SQuAD JSON, CoNLL file, or the GLUE task's TSV")
    parser.add_argument("--pred", help="predictions: JSON {id: answer}, CoNLL file, or one label per line")
    parser.add_argument("--conlleval", metavar="FILE", help="NER only: one file in conlleval's layout "
                        "(gold and predicted tag in the last two columns, blank line between sentences)")


def run(args) -> int:
    task = args.task.lower()
    if task == "ner" and args.conlleval:
        if args.gold or args.pred:
            raise UserError("give either --conlleval FILE or --gold and --pred, not both")
        result = _score_conlleval_file(Path(args.conlleval))
    else:
        if not args.gold or not args.pred:
            raise UserError(f"--task {args.task} needs --gold FILE and --pred FILE")
        gold, pred = Path(args.gold), Path(args.pred)
        if task == "squad":
            result = _score_squad(gold, pred)
        elif task == "ner":
            result = _score_ner(gold, pred)
        else:
            result = _score_glue(task, gold, pred)
    print(json.dumps(result, indent=2))
    return 0


def _score_squad(gold: Path, pred: Path) -> dict:
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
    return evaluate(examples, predictions)


def _score_ner(gold: Path, pred: Path) -> dict:
    from bertkit.data.ner import read_conll
    from bertkit.eval.conlleval import evaluate

    gold_sentences, pred_sentences = read_conll(gold), read_conll(pred)
    if len(gold_sentences) != len(pred_sentences):
        raise UserError(f"{len(pred_sentences)} sentences but the gold file {gold} has {len(gold_sentences)}", pred)
    for number, (g, p) in enumerate(zip(gold_sentences, pred_sentences), start=1):
        if g.tokens != p.tokens:
            raise UserError(f"sentence {number} has other tokens than in the gold file {gold}", pred)
    return evaluate([s.tags for s in gold_sentences], [s.tags for s in pred_sentences])


def _score_conlleval_file(path: Path) -> dict:
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


def _score_glue(task: str, gold: Path, pred: Path) -> dict:
    from bertkit.data.tasks import glue_task, read_glue, read_predictions
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
