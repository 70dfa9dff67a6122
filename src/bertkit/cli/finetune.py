"""`bertkit finetune`: fine-tune a model on a GLUE task, your own table, SQuAD or NER.

Writes into OUT: model/ (HF format with vocabulary, loadable by the matching transformers
`BertFor...` class; the seed with the best dev main metric, after its last epoch),
results.json (each seed's dev metrics per epoch, median and standard deviation, time, options),
predictions.tsv|.json|.conll (that model's dev predictions: GLUE submission layout, SQuAD
{id: answer}, CoNLL `token gold predicted`), train_loss.png and dev_<metric>.png.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.cli import int_list
from bertkit.errors import UserError


def add_arguments(parser) -> None:
    from bertkit.finetune.registry import TASKS

    parser.add_argument("--model", required=True, help="pretrained model directory (HF format + vocab.txt)")
    parser.add_argument("--task", required=True, choices=TASKS, help="GLUE task, classify/regress, squad or ner")
    parser.add_argument("--train", required=True, help="training file (official layout for GLUE/SQuAD/CoNLL)")
    parser.add_argument("--dev", help="dev file to evaluate after each epoch (optional for squad --split-articles)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=None,
                        help="peak learning rate (default 2e-5; 1e-3 for the --feature-based tagger)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-len", type=int, default=None, help="tokens per input (default 128; squad 384)")
    parser.add_argument("--warmup", type=float, default=0.1, help="warm-up: fraction of steps (<1) or steps")
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds; one run per seed")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    parser.add_argument("--max-train-examples", type=int, default=None,
                        help="train on a random subset of this many examples (fixed seed 0)")
    parser.add_argument("--eval-batch-size", type=int, default=64)
    parser.add_argument("--text-columns", help="classify/regress: one or two text column names, comma-separated")
    parser.add_argument("--label-column", help="classify/regress: the label column name")
    parser.add_argument("--split-articles", type=int, default=None, metavar="K",
                        help="squad: train on K articles of --train, evaluate on the others (unless --dev)")
    parser.add_argument("--feature-based", action="store_true",
                        help="ner: freeze BERT, train a BiLSTM on its last four layers (paper §5.3)")
    parser.add_argument("--layers", default="-4,-3,-2,-1",
                        help="--feature-based: hidden states to concatenate (0 embeddings, -1 last layer)")
    parser.add_argument("--group-by-length", action="store_true",
                        help="batch inputs of similar length together (less padding; faster on CPU)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")


def _check_args(args) -> None:
    for flag, value in (("--epochs", args.epochs), ("--batch-size", args.batch_size),
                        ("--eval-batch-size", args.eval_batch_size)):
        if value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    if args.max_seq_len is not None and not 8 <= args.max_seq_len <= 512:
        raise UserError(f"--max-seq-len must be between 8 and 512, got {args.max_seq_len}")
    if args.feature_based and args.task != "ner":
        raise UserError("--feature-based applies to --task ner only")
    if args.layers != "-4,-3,-2,-1" and not args.feature_based:
        raise UserError("--layers applies to --feature-based only")
    if args.split_articles is not None and args.task != "squad":
        raise UserError("--split-articles applies to --task squad only")
    if args.dev is None and args.split_articles is None:
        raise UserError("--dev is required (or, for squad, --split-articles K)")
    for flag, value in (("--train", args.train), ("--dev", args.dev)):
        if value is not None and not Path(value).is_file():
            raise UserError(f"{flag}: no such file", value)


def job_from_args(args):
    """The FinetuneJob the command line asks for (after `_check_args`)."""
    from bertkit.finetune.loop import Hyper
    from bertkit.finetune.run import FinetuneJob

    lr = args.lr if args.lr is not None else (1e-3 if args.feature_based else 2e-5)
    hp = Hyper(args.epochs, lr, args.batch_size, args.warmup, args.weight_decay,
               seeds=int_list(args.seeds, "--seeds"), group_by_length=args.group_by_length)
    columns = [c.strip() for c in args.text_columns.split(",")] if args.text_columns else None
    return FinetuneJob(
        model=args.model, task=args.task, train=args.train, out=args.out, dev=args.dev, hyper=hp,
        max_seq_len=args.max_seq_len, text_columns=columns, label_column=args.label_column,
        feature_based=args.feature_based, layers=int_list(args.layers, "--layers") if args.feature_based else None,
        split_articles=args.split_articles, max_train_examples=args.max_train_examples, device=args.device,
        precision=args.precision, eval_batch_size=args.eval_batch_size, progress=not args.no_progress)


def run(args, new_model=None) -> int:
    from bertkit.finetune.run import run_job

    _check_args(args)
    results = run_job(job_from_args(args), log=lambda line: print(line, flush=True), new_model=new_model,
                      args=dict(vars(args)))
    _print_summary(results, Path(args.out))
    return 0


def _print_summary(results: dict, out: Path) -> None:
    main = results["main_metric"]
    print(f"done in {results['time_s']:.0f}s. dev {main} per seed: "
          + ", ".join(f"{r['seed']}: {r['dev'].get(main, float('nan')):.2f}" for r in results["seeds"]))
    for key, s in results["summary"].items():
        print(f"  {key:<10} median {s['median']:7.2f}  std {s['std']:6.2f}  min {s['min']:7.2f}  max {s['max']:7.2f}")
    print(f"saved seed {results['saved_seed']}'s model to {out / 'model'}; results in {out / 'results.json'}")
