"""`bertkit distill`: train a smaller student to imitate a teacher (DistilBERT-style).

The teacher is a model `bertkit finetune` made (any sequence task: the student learns its softened
outputs at a temperature plus the gold labels), any encoder (`--task embedding`: the student learns
its mean-pooled sentence vectors from corpus sentences, scored on STS-B pairs), or an MLM model
(`--task mlm` on a folder `bertkit prepare` made: soft targets on the masked tokens). A student as
wide as the teacher also learns the direction of its last hidden states (cosine loss) and, unless
it is given (`--student DIR`), starts from the teacher's every k-th layer.

Writes into OUT what `bertkit finetune` writes (model/ in HF format with vocabulary, results.json,
predictions, plots) plus distill.json (teacher and student dev scores, sizes, the layers copied);
built in `.OUT.partial` beside it, so a stopped run keeps its checkpoint there for --resume (as
`bertkit finetune`); --overwrite replaces a previous result.

`--to static` makes a static embedding model instead (`bertkit.distill.static`: each token through
the teacher, PCA, token weights, optionally refined on `--corpus`), written as sentence-transformers'
StaticEmbedding layout; it takes --teacher, --out, --overwrite, --device, --seed and its own flags
(`StaticOptions`), and none of the student's (--task, --train, --student..., --dev).
"""

from __future__ import annotations

from pathlib import Path

from bertkit.cli.args import (
    add_option_flags,
    add_overwrite,
    add_report_to,
    check_report_to,
    check_resumable_dir,
    comma_ints,
    device_name,
    existing_file,
    existing_path,
    int_between,
    model_dir,
    nonnegative_float,
    positive_float,
    positive_int,
)
from bertkit.errors import UserError

RESULT_MARKERS = ("distill.json", "results.json", "model")
STATIC_MARKERS = ("static.json", "modules.json")
STUDENT_ONLY = ("task", "train", "dev", "student", "student_preset", "student_layers", "teacher_layers")


def add_arguments(parser) -> None:
    from bertkit.config import PRESETS
    from bertkit.distill.run import SPECIAL_TASKS
    from bertkit.finetune.hyper import RUN_FLAGS, Hyper
    from bertkit.finetune.registry import TASKS

    a = parser.add_argument
    a("--to", choices=("student", "static"), default="student",
      help="what to make: a smaller transformer (student), or a static embedding model (static: one vector per "
           "token, sentence-transformers' StaticEmbedding)")
    a("--teacher", required=True, type=model_dir, help="teacher model directory (fine-tuned for --task)")
    a("--task", choices=tuple(dict.fromkeys((*TASKS, *SPECIAL_TASKS))),
      help="--to student (required): the teacher's fine-tuning task; embedding (sentence vectors) or mlm (masked LM)")
    student = parser.add_mutually_exclusive_group()
    student.add_argument("--student-preset", choices=("teacher", *PRESETS),
                         help="the student's shape: the teacher's own (then fewer layers) or a preset")
    student.add_argument("--student", type=model_dir, help="a student model directory to start from")
    a("--student-layers", type=positive_int, default=None,
      help="student depth (default: a quarter of the teacher's, rounded up, for --student-preset teacher)")
    a("--teacher-layers", type=comma_ints(low=1), default=None,
      help="teacher layers (1 = first) the student's start from (default: every k-th, the top one last)")
    a("--train", nargs="+", type=existing_path,
      help="--to student (required): training file; embedding: corpus files or folders; mlm: a `bertkit prepare` "
           "folder")
    a("--dev", type=existing_file, help="dev file (embedding: STS-B pairs; mlm: none, the data's val split)")
    a("--out", required=True, help="output folder: model/, results.json, distill.json, predictions, plots")
    add_overwrite(parser, "distillation result")
    a("--temperature", type=positive_float, default=2.0, help="softmax temperature of the soft targets")
    a("--soft-weight", type=nonnegative_float, default=1.0,
      help="weight of the soft-target loss (KL; MSE for regression)")
    a("--hard-weight", type=nonnegative_float, default=1.0, help="weight of the gold-label loss")
    a("--cosine-weight", type=nonnegative_float, default=1.0,
      help="weight of the last-hidden-state cosine loss (equal widths only)")
    a("--mse-weight", type=nonnegative_float, default=1.0, help="embedding: weight of the sentence-vector MSE")
    a("--pooling", choices=("mean", "cls", "max"), default="mean", help="embedding: how tokens become a vector")
    a("--epochs", type=positive_int, default=3, help="passes over the training set")
    a("--lr", type=positive_float, default=1e-4, help="peak learning rate")
    a("--batch-size", type=positive_int, default=32, help="training examples per step")
    a("--warmup", type=nonnegative_float, default=0.1, help="warm-up: below 1 a fraction of the steps, else steps")
    a("--weight-decay", type=nonnegative_float, default=0.01, help="AdamW's decoupled weight decay")
    a("--seed", type=int_between(0, 2**31 - 1), default=1, help="random seed (student init, batches, dropout)")
    a("--max-seq-len", type=int_between(8, 512), default=None, help="tokens per input (default: the teacher's, or 128)")
    a("--max-train-examples", type=positive_int, default=None,
      help="train on a random subset of this many examples (fixed seed 0)")
    a("--text-columns", help="classify/regress: text column(s); default: as the teacher was fine-tuned")
    a("--label-column", help="classify/regress: label column; default: as the teacher was fine-tuned")
    a("--group-by-length", action="store_true", help="batch inputs of similar length together (faster on CPU)")
    a("--precision", choices=("fp32", "bf16"), default="fp32", help="bf16: autocast (weights stay fp32)")
    a("--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps")
    a("--eval-batch-size", type=positive_int, default=64, help="inputs per forward pass when evaluating")
    a("--no-progress", action="store_true", help="no progress bar (log lines only)")
    add_report_to(parser, "OUT/tensorboard/seedN")
    add_option_flags(parser, Hyper, RUN_FLAGS)
    add_static_flags(parser)


def add_static_flags(parser) -> None:
    from bertkit.distill.static import STATIC_FLAGS, StaticOptions

    group = parser.add_argument_group("--to static")
    add_option_flags(group, StaticOptions, STATIC_FLAGS, types={"counts": existing_path, "corpus": existing_path})


def check_static(args) -> None:
    """--to static: none of the student's flags; --to student: none of the static model's."""
    import dataclasses

    from bertkit.cli.args import check_output_dir
    from bertkit.distill.static import STATIC_FLAGS, StaticOptions
    from bertkit.pretrain.options import field_flag

    if args.to == "static":
        given = [name for name in STUDENT_ONLY if getattr(args, name) is not None]
        if given:
            raise UserError(f"--{given[0].replace('_', '-')} is a student's flag: --to static takes --teacher, "
                            "--out and the --to static flags")
        if args.resume:
            raise UserError("--to static takes seconds to minutes and has no --resume: run it again")
        check_output_dir(args.out, "--out", args.overwrite, STATIC_MARKERS, "static model")
        return
    for f in dataclasses.fields(StaticOptions):
        if f.name in STATIC_FLAGS and getattr(args, f.name) != f.metadata.get("flag_default", f.default):
            raise UserError(f"{field_flag(f)} applies to --to static")
    for name, flag in (("task", "--task"), ("train", "--train")):
        if getattr(args, name) is None:
            raise UserError(f"{flag} is required (unless --to static)")
    if args.student is None and args.student_preset is None:
        raise UserError("one of --student-preset or --student is required (unless --to static)")


def check(args) -> None:
    """What needs several flags or the file system; every single flag was checked when parsed."""
    check_static(args)
    if args.to == "static":
        return
    if args.task != "embedding":
        if len(args.train) != 1:
            raise UserError(f"--task {args.task} trains on one {'folder' if args.task == 'mlm' else 'file'}: "
                            "give --train one path")
        train = Path(args.train[0])
        if args.task == "mlm" and not train.is_dir():
            raise UserError("is a file; --task mlm trains on a folder `bertkit prepare` made", train)
        if args.task != "mlm" and not train.is_file():
            raise UserError(f"is a folder; --task {args.task} trains on one file", train)
    if args.dev is not None and args.task == "mlm":
        raise UserError("--task mlm evaluates on the prepared folder's val split: drop --dev")
    if args.dev is None and args.task != "mlm":
        raise UserError(f"--dev is required for --task {args.task}")
    if args.student_layers is not None and args.student:
        raise UserError("--student-layers applies to --student-preset only (--student has its own depth)")
    if args.teacher_layers is not None and args.student:
        raise UserError("--teacher-layers applies to --student-preset only (--student has its own weights)")
    if args.pooling != "mean" and args.task != "embedding":
        raise UserError("--pooling applies to --task embedding only")
    check_resumable_dir(args, RESULT_MARKERS, "distillation result")
    check_report_to(args)


def job_from_args(args):
    from bertkit.distill.losses import DistillWeights
    from bertkit.distill.run import DistillJob
    from bertkit.finetune.hyper import Hyper

    weights = DistillWeights(args.temperature, args.soft_weight, args.hard_weight, args.cosine_weight,
                             args.mse_weight)
    hp = Hyper(args.epochs, args.lr, args.batch_size, args.warmup, args.weight_decay, seeds=(args.seed,),
               group_by_length=args.group_by_length, save_every=args.save_every, resume=args.resume)
    columns = [c.strip() for c in args.text_columns.split(",")] if args.text_columns else None
    return DistillJob(
        teacher=args.teacher, task=args.task, train=list(args.train), out=args.out, dev=args.dev,
        student=args.student, student_preset=args.student_preset, student_layers=args.student_layers,
        teacher_layers=args.teacher_layers, weights=weights, hyper=hp, max_seq_len=args.max_seq_len,
        text_columns=columns, label_column=args.label_column, pooling=args.pooling,
        max_train_examples=args.max_train_examples, device=args.device, precision=args.precision,
        eval_batch_size=args.eval_batch_size, progress=not args.no_progress, report_to=args.report_to)


def run_static(args) -> int:
    from bertkit.devices import resolve_device
    from bertkit.distill.static import STATIC_FLAGS, StaticJob, StaticOptions, distill_static

    options = StaticOptions(**{name: getattr(args, name) for name in STATIC_FLAGS}, seed=args.seed)
    device = resolve_device(args.device)
    job = StaticJob(args.teacher, args.out, options, device)
    record = distill_static(job, log=lambda line: print(line, flush=True))
    seconds = record["seconds"]
    print(f"done in {seconds['total_s']:.1f}s: {record['vocab_size']:,} x {record['dim']} static vectors"
          + (f", refined on {record['refine_sentences']:,} sentences" if "refine_sentences" in record else "")
          + f"; saved to {args.out} (SentenceTransformer({str(args.out)!r}) loads it)")
    return 0


def run(args) -> int:
    from bertkit.distill.run import run_distill
    from bertkit.train.stop import Stopped

    if args.to == "static":
        return run_static(args)

    try:  # the run's arguments, as its model card and results record them: --resume is how, not what
        results = run_distill(job_from_args(args), log=lambda line: print(line, flush=True),
                              args={k: v for k, v in vars(args).items() if k != "resume"})
    except Stopped as e:
        print(e, flush=True)
        return e.exit_code
    d = results["distill"]
    main = d["main_metric"]
    teacher, student = d["teacher_dev"].get(main, float("nan")), d["student_dev"].get(main, float("nan"))
    agreement = d["student_dev"].get("teacher_agreement")
    kept = f" ({100 * student / teacher:.1f}% kept)" if teacher else ""  # a teacher at 0 keeps no ratio
    print(f"done in {results['time_s']:.0f}s. dev {main}: teacher {teacher:.2f}, student {student:.2f}{kept}"
          + (f", agreement with the teacher {agreement:.2f}" if agreement is not None else ""))
    print(f"  parameters: teacher {d['teacher_parameters']:,}, student {d['student_parameters']:,}; "
          f"student from {d['student'].get('init') or d['student'].get('from')}"
          + (f" layers {','.join(map(str, d['student']['teacher_layers']))}"
             if "teacher_layers" in d["student"] else ""))
    print(f"saved the student to {args.out}/model; results in {args.out}/results.json and distill.json")
    return 0
