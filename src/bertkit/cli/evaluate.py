"""`bertkit evaluate`: a fine-tuned model's metrics on a task's file, as JSON.

Goes through the same task code as `bertkit finetune`'s dev evaluation (prepare -> predict ->
score), so the numbers match results.json for the saved model. Encoding options (max sequence
length, table columns) default to those saved with the model in `finetune.json`.

`--zero-shot` scores sentence embeddings of a model that was never trained on the task: each
pair's cosine similarity against the gold STS-B score (Pearson / Spearman x100), with the
[CLS] vector, or the mean or max over the tokens (`--pooling`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bertkit.errors import UserError


def add_arguments(parser) -> None:
    from bertkit.finetune.registry import TASKS

    parser.add_argument("--model", required=True,
                        help="model directory (from `bertkit finetune`; any BERT directory for --zero-shot)")
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--data", required=True, help="file in the task's layout, with gold labels")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-seq-len", type=int, default=None, help="default: the model's fine-tuning value")
    parser.add_argument("--out", help="write the predictions here (the task's format, as finetune writes them)")
    parser.add_argument("--text-columns", help="classify/regress: text column(s); default: as fine-tuned")
    parser.add_argument("--label-column", help="classify/regress: label column; default: as fine-tuned")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--int8", action="store_true",
                        help="quantize the linear layers to int8 (dynamic, CPU only): ~2x faster inference")
    parser.add_argument("--zero-shot", action="store_true",
                        help="stsb (or a regress pair table): cosine of untrained sentence embeddings vs gold")
    parser.add_argument("--pooling", choices=("cls", "mean", "max"), default="mean", help="for --zero-shot")


def run(args) -> int:
    from bertkit.devices import resolve_device
    from bertkit.finetune.task import Runtime

    model_dir = Path(args.model)
    if not model_dir.is_dir():
        raise UserError("no such model directory", model_dir)
    if not Path(args.data).is_file():
        raise UserError("--data: no such file", args.data)
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
    rt = Runtime(resolve_device(args.device), args.precision, args.batch_size)
    if args.int8 and (rt.device.type != "cpu" or args.precision != "fp32" or args.zero_shot):
        raise UserError("--int8 runs fine-tuned models on the CPU in fp32: use --device cpu, no --precision bf16 "
                        "or --zero-shot")
    columns = args.text_columns.split(",") if args.text_columns else None
    if args.zero_shot:
        from bertkit.eval.sts import read_scored_pairs, zero_shot_similarity

        examples, spec = read_scored_pairs(args.task, args.data, columns, args.label_column)
        metrics = zero_shot_similarity(model_dir, examples, spec, args.pooling, args.batch_size,
                                       args.max_seq_len or 128, rt.device)
        report = {"task": args.task, "model": str(model_dir), "data": str(args.data), "zero_shot": True,
                  "pooling": args.pooling, "examples": len(examples), **metrics}
    else:
        from bertkit.finetune.registry import task_for_model
        from bertkit.finetune.run import evaluate_saved

        task = task_for_model(args.task, model_dir, rt, args.max_seq_len, columns, args.label_column)
        metrics, data, predictions = evaluate_saved(task, model_dir, args.data, rt, int8=args.int8)
        if args.out:
            task.write_predictions(Path(args.out), data, predictions)
        report = {"task": args.task, "model": str(model_dir), "data": str(args.data),
                  "examples": len(data.examples), "int8": args.int8, **metrics}
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0
