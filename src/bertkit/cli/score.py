"""`bertkit score`: score a predictions file with a task's official metric, print JSON.

  --task squad   --gold dev-v1.1.json --pred predictions.json ({question id: answer text})
  --task ner     --gold gold.conll --pred pred.conll (same tokens, tag in the last column)
  --task ner     --conlleval output.txt (conlleval's input: ... gold-tag predicted-tag per line)
  --task <glue>  --gold dev.tsv --pred predictions.txt (one label per line, as
                 bertkit.data.glue.write_predictions writes; GLUE's index/prediction layout too)
"""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.cli.args import existing_file
from bertkit.errors import UserError


def add_arguments(parser) -> None:
    parser.add_argument("--task", required=True, help="squad, ner, or a GLUE task (cola, sst2, mrpc, stsb, rte, ...)")
    parser.add_argument("--gold", type=existing_file, help="gold file: SQuAD JSON, CoNLL file, or the GLUE task's TSV")
    parser.add_argument("--pred", type=existing_file,
                        help="predictions: JSON {id: answer}, CoNLL file, or one label per line")
    parser.add_argument("--conlleval", metavar="FILE", type=existing_file,
                        help="NER only: one file in conlleval's layout (gold and predicted tag in the last two "
                             "columns, blank line between sentences)")


def check(args) -> None:
    task = args.task.lower()
    if task == "ner" and args.conlleval:
        if args.gold or args.pred:
            raise UserError("give either --conlleval FILE or --gold and --pred, not both")
    elif args.conlleval:
        raise UserError("--conlleval applies to --task ner only")
    elif not args.gold or not args.pred:
        raise UserError(f"--task {args.task} needs --gold FILE and --pred FILE")


def run(args) -> int:
    from bertkit.eval.score import score_conlleval_file, score_glue, score_ner, score_squad

    task = args.task.lower()
    if args.conlleval:
        result = score_conlleval_file(Path(args.conlleval))
    else:
        gold, pred = Path(args.gold), Path(args.pred)
        if task == "squad":
            result = score_squad(gold, pred)
        elif task == "ner":
            result = score_ner(gold, pred)
        else:
            result = score_glue(task, gold, pred)
    print(json.dumps(result, indent=2))
    return 0
