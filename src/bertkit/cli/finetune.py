"""`bertkit finetune`: fine-tune a model on a GLUE task, your own table, SQuAD, NER, or text pairs.

--task embedding trains a bi-encoder (saved as a sentence-transformers model) and --task rerank
a cross-encoder (a one-label classifier `CrossEncoder` loads) on (anchor, positive[, negatives]
[, score]) rows from TSV or JSONL (`bertkit.data.pairs`).

--task multilabel trains a classifier of label sets (sigmoid per label, a decision threshold
tuned on dev or given), saved as transformers' `problem_type="multi_label_classification"`.

Writes into OUT: model/ (HF format with vocabulary, loadable by the matching transformers
`BertFor...` class; the seed with the best dev main metric, after its last epoch, or with
--metric-for-best / --early-stopping each seed's best evaluation and the best of those),
results.json (each seed's dev metrics per epoch and at every evaluation: step, epoch, train loss
since the previous one; median and standard deviation, time, options),
predictions.tsv|.json|.conll (that model's dev predictions: GLUE submission layout, SQuAD
{id: answer}, CoNLL `token gold predicted`), train_loss.png and dev_<metric>.png. OUT is built
in `.OUT.partial` beside it and appears when the run ends (a previous result in OUT is replaced
only with --overwrite, and only then); a stopped, killed or failed run keeps its finished seeds
and the running seed's newest checkpoint there (--save-every), and --resume continues it.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from bertkit.cli.args import (
    add_long_inputs,
    add_option_flags,
    add_overwrite,
    add_report_to,
    check_long_inputs,
    check_report_to,
    check_resumable_dir,
    comma_ints,
    device_name,
    existing_file,
    float_in,
    int_between,
    model_dir,
    positive_float,
    positive_int,
)
from bertkit.errors import UserError

DEFAULT_LAYERS = (-4, -3, -2, -1)
BALANCED = "balanced"
RESULT_MARKERS = ("results.json", "model")  # what a previous fine-tuning left in OUT
fraction_below_1 = float_in(0.0, 1.0, high_open=True)


def class_weights_arg(text: str) -> str:
    """--class-weights: "balanced" or an existing JSON file (its content is checked against the labels)."""
    return text if text == BALANCED else existing_file(text)


def pos_weight_arg(text: str) -> float | str:
    """--pos-weight: a positive number, "balanced" or an existing JSON file {label: weight}."""
    if text == BALANCED:
        return text
    try:
        float(text)
    except ValueError:
        return existing_file(text)
    return positive_float(text)


def add_arguments(parser, resume: bool = True) -> None:
    """`resume`: also --save-every and --resume (`bertkit tune` continues its study without them)."""
    from bertkit.finetune.registry import TASKS

    a = parser.add_argument
    a("--model", required=True, type=model_dir, help="pretrained model directory (HF format + vocab.txt)")
    a("--task", required=True, choices=TASKS,
      help="GLUE task, classify/regress, multilabel (a set of labels per row), squad, ner, embedding "
           "(a bi-encoder) or rerank (a cross-encoder)")
    a("--train", required=True, type=existing_file, help="training file (official layout for GLUE/SQuAD/CoNLL)")
    a("--dev", type=existing_file, help="dev file to evaluate after each epoch (optional for squad --split-articles)")
    a("--out", required=True, help="output folder: model/, results.json, predictions, plots")
    add_overwrite(parser, "fine-tuning result")
    from bertkit.finetune.hyper import FLAGS, RUN_FLAGS, Hyper

    # every hyper-parameter's flag from its `Hyper` field; --save-every and --resume with `resume`
    add_option_flags(parser, Hyper, tuple(n for n in FLAGS if resume or n not in RUN_FLAGS),
                     types={"seeds": comma_ints(low=0, unique=True)})
    a("--max-seq-len", type=int_between(8, 512), default=None,
      help="tokens per input, or per window with --long-inputs windows (default 128; squad 384)")
    a("--precision", choices=("fp32", "bf16"), default="fp32", help="bf16: autocast (weights stay fp32)")
    a("--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps")
    a("--max-train-examples", type=positive_int, default=None,
      help="train on a random subset of this many examples (fixed seed 0)")
    a("--eval-batch-size", type=positive_int, default=64, help="inputs per forward pass when evaluating")
    a("--text-columns", help="classify/regress/multilabel: one or two text column names, comma-separated")
    a("--label-column", help="classify/regress/multilabel: the label column name")
    a("--split-articles", type=positive_int, default=None, metavar="K",
      help="squad: train on K articles of --train, evaluate on the others (unless --dev)")
    a("--feature-based", action="store_true",
      help="ner: freeze BERT, train a BiLSTM on its last four layers (paper §5.3)")
    a("--layers", type=comma_ints(), default=",".join(map(str, DEFAULT_LAYERS)),
      help="--feature-based: hidden states to concatenate (0 embeddings, -1 last layer)")
    a("--no-progress", action="store_true", help="no progress bar (log lines only)")
    add_report_to(parser, "OUT/tensorboard/seedN")
    add_long_inputs(parser, aggregate=True)
    _add_pair_arguments(parser)
    _add_label_and_best_arguments(parser)


def _add_label_and_best_arguments(parser) -> None:
    """Class weights, multi-label decisions, and keeping each seed's best evaluation."""
    a = parser.add_argument
    a("--class-weights", type=class_weights_arg, default=None, metavar="balanced|FILE",
      help="classification and ner: weighted cross-entropy, balanced (n_samples / (n_classes * count)) or a "
           "JSON file {label: weight} naming every label (default: unweighted)")
    a("--label-separator", default=None, metavar="SEP",
      help="multilabel: what joins a row's labels in a TSV/CSV column (default ','; JSONL: a list)")
    a("--threshold", type=float_in(0.0, 1.0, low_open=True, high_open=True), default=None,
      help="multilabel: a label is predicted when its sigmoid is at least this (default: tuned on dev to "
           "maximise micro-F1)")


def _weights(text: str) -> tuple[float, ...]:
    """Comma-separated positive numbers (--matryoshka-weights 1,1,0.5) as a tuple."""
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers such as 1,0.5, not {text!r}") from None
    if not values or not all(0 < v < float("inf") for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, not {text!r}")
    return values


_weights.__name__ = "numbers"

def _add_pair_arguments(parser) -> None:
    """The flags of --task embedding (a bi-encoder) and --task rerank (a cross-encoder); which task
    takes which is its `TaskKind.options` (and `losses`) in finetune.registry."""
    from bertkit.finetune.registry import TASKS

    a = parser.add_argument
    a("--pooling", choices=("cls", "mean", "max"), default=None,
      help="embedding: the sentence vector, [CLS] or the mean / max over the real tokens (default mean)")
    a("--normalize", action="store_true",
      help="embedding: the saved model gives unit vectors (a sentence-transformers Normalize module)")
    a("--loss", choices=tuple(dict.fromkeys(loss for kind in TASKS.values() for loss in kind.losses)), default=None,
      help="embedding: contrastive (in-batch negatives) or cosent (default: cosent when every training row "
           "has a score, else contrastive); rerank: bce or listwise softmax (default bce)")
    a("--temperature", type=positive_float, default=None,
      help="embedding: cosines are divided by this before the softmax (default 0.05, i.e. scale 20)")
    a("--symmetric", action="store_true",
      help="embedding, contrastive: also each positive picks its anchor among the batch's anchors")
    a("--grad-cache", type=positive_int, default=None, metavar="N",
      help="embedding: cached gradients (GradCache), embedding N texts at a time, so --batch-size is not "
           "limited by memory (default: the whole batch at once)")
    a("--matryoshka-dims", type=comma_ints(low=1, unique=True), default=None,
      help="embedding: MatryoshkaLoss, the loss on the first D dimensions (cut and renormalised) for each D, "
           "summed; list the full width too to train it, e.g. 384,256,128,64 (default: full width only)")
    a("--matryoshka-weights", type=_weights, default=None,
      help="embedding: one weight per --matryoshka-dims value, in the same order (default: 1 each)")
    a("--query-prompt", default=None, metavar="TEXT",
      help="embedding: put before every anchor (e.g. 'query: '), saved as the model's \"query\" prompt")
    a("--passage-prompt", default=None, metavar="TEXT",
      help="embedding: put before every positive and negative (e.g. 'passage: '), saved as its \"passage\" prompt")
    a("--pos-weight", type=pos_weight_arg, default=None, metavar="W|balanced|FILE",
      help="rerank (bce) and multilabel: weight of the positives' terms (e.g. the number of negatives per "
           "positive; default 1); multilabel also per label: balanced (each label's negatives per positive in "
           "training) or a JSON file {label: weight} naming every label")


def check(args) -> None:
    """What needs several flags or the file system; every single flag was checked when parsed."""
    check_job(args)
    check_resumable_dir(args, RESULT_MARKERS, "fine-tuning result")
    check_report_to(args)


def check_job(args) -> None:
    """The flags that make the job, together (the output aside): `bertkit tune` checks its own with this."""
    from bertkit.finetune.registry import TASKS

    if args.feature_based and TASKS[args.task].feature_based is None:
        raise UserError(f"--feature-based applies to --task {_tasks_with(lambda kind: kind.feature_based)} only")
    if args.layers != DEFAULT_LAYERS and not args.feature_based:
        raise UserError("--layers applies to --feature-based only")
    if args.classifier_dropout is not None and (args.task in ("squad", "embedding") or args.feature_based):
        raise UserError("--classifier-dropout applies to the classification and tagging heads "
                        "(not squad's span head, embedding or --feature-based)")
    _check_task_options(args)
    check_long_inputs(args)
    if args.feature_based and args.long_inputs == "windows":
        raise UserError("--long-inputs windows applies to fine-tuning; the --feature-based tagger reads sentences "
                        "cut to --max-seq-len")
    if args.split_articles is not None and args.task != "squad":
        raise UserError("--split-articles applies to --task squad only")
    if args.dev is None and args.split_articles is None:
        raise UserError("--dev is required (or, for squad, --split-articles K)")


def _check_task_options(args) -> None:
    """A task's own flags (its `TaskKind.options`) with that task only; --loss among its losses."""
    from bertkit.finetune.registry import TASKS

    kind = TASKS[args.task]
    if args.pos_weight is not None and "pos_weight" not in kind.options:
        raise UserError(f"--pos-weight applies to --task {_tasks_with(lambda k: 'pos_weight' in k.options)} only")
    if args.pos_weight is not None and args.loss == "listwise":
        raise UserError("--pos-weight applies to --task rerank with --loss bce only")
    if isinstance(args.pos_weight, str) and args.task != "multilabel":
        raise UserError(f"--pos-weight {args.pos_weight}: per-label weights apply to --task multilabel; "
                        "rerank takes one number")
    if args.class_weights is not None and args.feature_based:
        raise UserError("--class-weights applies to fine-tuning, not the --feature-based tagger")
    for name in dict.fromkeys(o for k in TASKS.values() for o in k.options if o != "loss"):
        if getattr(args, name) not in (None, False) and name not in kind.options:
            owners = _tasks_with(lambda k, name=name: name in k.options)
            raise UserError(f"--{name.replace('_', '-')} applies to --task {owners} only")
    if args.loss is not None and args.loss not in kind.losses:
        raise UserError(f"--loss {args.loss} applies to --task {_tasks_with(lambda k: args.loss in k.losses)} only")
    if args.symmetric and args.loss == "cosent":
        raise UserError("--symmetric applies to the contrastive loss, not cosent")


def _tasks_with(has) -> str:
    """The task names whose `TaskKind` has something, for a message: "rerank", "a or b"."""
    from bertkit.finetune.registry import TASKS

    return " or ".join(dict.fromkeys(name for name, kind in TASKS.items() if has(kind)))


def hyper_from_args(args):
    """The `Hyper` the flags give: each field from its flag (those a command leaves out at their
    defaults); --lr's default depends on --feature-based."""
    from bertkit.finetune.hyper import Hyper

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Hyper) if hasattr(args, f.name)}
    if given.get("lr") is None:
        given["lr"] = 1e-3 if getattr(args, "feature_based", False) else 2e-5
    return Hyper(**given)


def job_from_args(args):
    """The FinetuneJob the command line asks for (after `check`)."""
    from bertkit.finetune.run import FinetuneJob

    hp = hyper_from_args(args)
    from bertkit.finetune.registry import TASKS

    columns = [c.strip() for c in args.text_columns.split(",")] if args.text_columns else None
    return FinetuneJob(
        model=args.model, task=args.task, train=args.train, out=args.out, dev=args.dev, hyper=hp,
        max_seq_len=args.max_seq_len, text_columns=columns, label_column=args.label_column,
        feature_based=args.feature_based, layers=args.layers if args.feature_based else None,
        split_articles=args.split_articles, max_train_examples=args.max_train_examples,
        options={name: getattr(args, name) for name in TASKS[args.task].options}, device=args.device,
        precision=args.precision, eval_batch_size=args.eval_batch_size, progress=not args.no_progress,
        report_to=args.report_to)


def run(args, new_model=None) -> int:
    from bertkit.finetune.run import run_job
    from bertkit.train.stop import Stopped

    try:  # the run's arguments, as its model card and results record them: --resume is how, not what
        results = run_job(job_from_args(args), log=lambda line: print(line, flush=True), new_model=new_model,
                          args={k: v for k, v in vars(args).items() if k != "resume"})
    except Stopped as e:
        print(e, flush=True)
        return e.exit_code
    _print_summary(results, Path(args.out))
    return 0


def _print_summary(results: dict, out: Path) -> None:
    main = results["main_metric"]
    print(f"done in {results['time_s']:.0f}s. dev {main} per seed: "
          + ", ".join(f"{r['seed']}: {r['dev'].get(main, float('nan')):.2f}" for r in results["seeds"]))
    for key, s in results["summary"].items():
        print(f"  {key:<10} median {s['median']:7.2f}  std {s['std']:6.2f}  min {s['min']:7.2f}  max {s['max']:7.2f}")
    best = f" (step {results['best_step']}, {results['metric_for_best']} {results['best_metric']:.2f})" \
        if "best_step" in results else ""
    print(f"saved seed {results['saved_seed']}'s model{best} to {out / 'model'}; results in {out / 'results.json'}")
