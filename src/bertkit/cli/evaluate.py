"""`bertkit evaluate`: a fine-tuned model's metrics on a task's file, as JSON.

Goes through the same task code as `bertkit finetune`'s dev evaluation (prepare -> predict ->
score), so the numbers match results.json for the saved model. Encoding options (max sequence
length, table columns) default to those saved with the model in `finetune.json`.

`--zero-shot` scores sentence embeddings of a model that was never trained on the task: each
pair's cosine similarity against the gold STS-B score (Pearson / Spearman x100), with the
[CLS] vector, or the mean or max over the tokens (`--pooling`).

`--task retrieval` ranks a BEIR set's corpus for each query (`--queries`, `--corpus`,
`--qrels`) with the model as a bi-encoder (pooled as its directory says) and, with `--bm25`,
with BM25 too, and reports NDCG@10, MRR@10, Recall@10/100 and MAP@100 as
sentence-transformers' InformationRetrievalEvaluator defines them (bertkit.eval.retrieval).

Long inputs (`bertkit.long_inputs`) follow the model's finetune.json unless --long-inputs,
--window-stride or --aggregate say otherwise: a classifier fine-tuned on windows is evaluated on
windows with its aggregation. For retrieval, --long-inputs windows pools a long document's
chunk vectors, and --best-chunk scores it by its best chunk. The JSON says what happened.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bertkit.cli import note_long
from bertkit.cli.args import (
    add_long_inputs,
    add_overwrite,
    add_precision,
    check_long_inputs,
    check_output_file,
    check_precision,
    device_name,
    existing_file,
    float_in,
    int_between,
    long_policy,
    model_dir,
    positive_int,
)
from bertkit.errors import UserError


def add_arguments(parser) -> None:
    from bertkit.finetune.registry import TASKS

    a = parser.add_argument
    a("--model", type=model_dir,
      help="model directory (from `bertkit finetune`; any BERT directory for --zero-shot or retrieval)")
    a("--task", required=True, choices=(*TASKS, "retrieval"),
      help="the task the model was fine-tuned for, or retrieval (a BEIR set)")
    a("--data", type=existing_file, help="file in the task's layout, with gold labels (every task but retrieval)")
    a("--batch-size", type=positive_int, default=64, help="inputs per forward pass")
    a("--max-seq-len", type=int_between(8, 512), default=None, help="default: the model's fine-tuning value")
    a("--out", help="write the predictions here (the task's format, as finetune writes them)")
    add_overwrite(parser, "predictions file")
    a("--text-columns", help="classify/regress/multilabel: text column(s); default: as fine-tuned")
    a("--label-column", help="classify/regress/multilabel: label column; default: as fine-tuned")
    a("--threshold", type=float_in(0.0, 1.0, low_open=True, high_open=True), default=None,
      help="multilabel: predict a label when its sigmoid is at least this (default: the model's, from finetune.json)")
    a("--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps")
    add_precision(parser, " (fp32 reproduces the scores finetune wrote to results.json, which it computes in fp32 "
                          "unless trained with --precision bf16)")
    a("--int8", action="store_true",
      help="quantize the linear layers to int8 (dynamic, CPU only): ~2x faster inference; with --backend onnx, "
           "run the export's int8 graph")
    a("--backend", choices=("torch", "onnx"), default="torch",
      help="torch: the model's weights; onnx: a `bertkit export` folder in ONNX Runtime (CPU)")
    a("--zero-shot", action="store_true",
      help="stsb (or a regress pair table): cosine of untrained sentence embeddings vs gold")
    a("--pooling", choices=("cls", "mean", "max"), default=None,
      help="for --zero-shot (mean when not given) and retrieval (the model directory's own when not given)")
    a("--queries", type=existing_file, help="retrieval: BEIR queries.jsonl")
    a("--corpus", type=existing_file, help="retrieval: BEIR corpus.jsonl")
    a("--qrels", type=existing_file, help="retrieval: BEIR qrels TSV (query-id, corpus-id, score)")
    a("--bm25", action="store_true", help="retrieval: rank with BM25 (bm25s) too, as a baseline")
    add_long_inputs(parser, "as the model was fine-tuned, else truncate", aggregate=True, chunks=True)


_RETRIEVAL_ONLY = ("queries", "corpus", "qrels", "bm25")


def _check_retrieval(args) -> None:
    for flag in ("queries", "corpus", "qrels"):
        if getattr(args, flag) is None:
            raise UserError(f"--task retrieval needs --{flag}")
    if args.model is None and not args.bm25:
        raise UserError("--task retrieval needs --model, --bm25 or both")
    for flag in ("data", "out", "text_columns", "label_column", "threshold"):
        if getattr(args, flag):
            raise UserError(f"--{flag.replace('_', '-')} does not apply to --task retrieval")
    if args.zero_shot:
        raise UserError("--zero-shot does not apply to --task retrieval")
    if args.aggregate:
        raise UserError("--aggregate applies to classification and regression tasks (retrieval: --best-chunk)")
    check_long_inputs(args)
    if args.model:
        _check_backend(args)


def _check_backend(args) -> None:
    from bertkit.export import check_backend

    check_backend(args.model, args.backend)
    if args.backend == "onnx" and args.device not in ("auto", "cpu"):
        raise UserError("--backend onnx runs on the CPU: drop --device or use --device cpu")
    check_precision(args.precision, args.int8, args.backend)


def check(args) -> None:
    if args.task == "retrieval":
        return _check_retrieval(args)
    for flag in _RETRIEVAL_ONLY:
        if getattr(args, flag):
            raise UserError(f"--{flag} applies to --task retrieval only")
    if args.best_chunk:
        raise UserError("--best-chunk applies to --task retrieval only")
    if args.threshold is not None and (args.task != "multilabel" or args.zero_shot):
        raise UserError("--threshold applies to --task multilabel only")
    _check_task_long_inputs(args)
    if args.model is None:
        raise UserError("--model is required")
    if args.data is None:
        raise UserError(f"--data is required for --task {args.task}")
    if args.zero_shot and args.out:
        raise UserError("--zero-shot writes no predictions: drop --out")
    _check_backend(args)
    if args.out:
        check_output_file(args.out, "--out", args.overwrite)


def _check_task_long_inputs(args) -> None:
    """The window flags with a task that reads windows (its `TaskKind.options`), or --zero-shot."""
    from bertkit.finetune.registry import TASKS

    options = ("long_inputs", "window_stride") if args.zero_shot else TASKS[args.task].options
    for flag in ("long_inputs", "window_stride", "aggregate"):
        if getattr(args, flag) is not None and flag not in options:
            owners = "classification, regression and ner tasks" if flag != "aggregate" else \
                "classification and regression tasks"
            raise UserError(f"--{flag.replace('_', '-')} applies to {owners}" +
                            (" (and --zero-shot)" if flag != "aggregate" else ""))
    check_long_inputs(args, saved_may_window=not args.zero_shot)


def _run_retrieval(args, rt) -> dict:
    from bertkit.data.beir import read_corpus, read_qrels, read_queries
    from bertkit.search.encoder import Encoder
    from bertkit.search.evaluate import evaluate_retrieval

    queries, corpus, qrels = read_queries(args.queries), read_corpus(args.corpus), read_qrels(args.qrels)
    encoder = None
    if args.model:
        encoder = Encoder.load(args.model, args.pooling, args.max_seq_len, args.batch_size, rt.device,
                               backend=args.backend, int8=args.int8, precision=rt.precision, policy=long_policy(args))
    report = evaluate_retrieval(queries, corpus, qrels, encoder, args.bm25, chunks=args.best_chunk)
    if "dense" in report["results"]:
        for what, long in report["results"]["dense"]["long_inputs_report"].items():
            note_long("evaluate", long, f"{what}: " + ("one vector per chunk, a document scored by its best"
                                                       if args.best_chunk and what == "documents" else "chunks pooled"))
    return {"task": "retrieval", "queries_file": str(args.queries), "corpus": str(args.corpus),
            "qrels": str(args.qrels), **report}


def _run_zero_shot(args, rt, columns) -> dict:
    from bertkit.eval.sts import read_scored_pairs, zero_shot_similarity

    examples, spec = read_scored_pairs(args.task, args.data, columns, args.label_column)
    long: dict = {}
    metrics = zero_shot_similarity(args.model, examples, spec, args.pooling or "mean", args.batch_size,
                                   args.max_seq_len or 128, rt.device, report=long, backend=args.backend,
                                   int8=args.int8, precision=rt.precision, policy=long_policy(args))
    note_long("evaluate", long, "each text's chunk vectors averaged by their token counts")
    return {"task": args.task, "model": str(args.model), "data": str(args.data), "zero_shot": True,
            "pooling": args.pooling or "mean", "examples": len(examples), "backend": args.backend,
            "int8": args.int8, "precision": rt.precision, **metrics,
            "long_inputs": {k: v for k, v in long.items() if k not in ("cut", "max_length")}}


def _run_task(args, rt, columns) -> dict:
    from bertkit.finetune.registry import task_for_model
    from bertkit.finetune.run import evaluate_saved

    policy = {"long_inputs": args.long_inputs, "window_stride": args.window_stride, "aggregate": args.aggregate}
    task = task_for_model(args.task, Path(args.model), rt, args.max_seq_len, columns, args.label_column, policy,
                          args.threshold)
    if not task.policy.windows and (args.window_stride or args.aggregate):
        raise UserError("--window-stride and --aggregate apply to windows, and this model was fine-tuned with "
                        "truncation: add --long-inputs windows")
    metrics, data, predictions = evaluate_saved(task, Path(args.model), args.data, rt, int8=args.int8,
                                                backend=args.backend)
    long = {}
    if data.long_inputs is not None:
        long = {**data.long_inputs.as_dict(), **task.settings()}
        long = {k: long[k] for k in (*data.long_inputs.as_dict(), "long_inputs", "window_stride", "aggregate")
                if k in long}
        note_long("evaluate", data.long_inputs, "tagged from the window where each token has the most context"
                  if args.task == "ner" else f"the windows' logits aggregated by their {task.policy.aggregate}")
    elif data.cut:
        note_long("evaluate", {"policy": "truncate", "limit": task.max_seq_len, "inputs": len(data.features),
                               "long": data.cut})
    if args.out:
        task.write_predictions(Path(args.out), data, predictions)
    return {"task": args.task, "model": str(args.model), "data": str(args.data),
            "examples": len(data.examples), "backend": args.backend, "int8": args.int8,
            "precision": rt.precision, **metrics, **({"long_inputs": long} if long else {})}


def run(args) -> int:
    from bertkit.devices import inference_precision, resolve_device
    from bertkit.finetune.task import Runtime

    device = resolve_device("cpu" if args.backend == "onnx" else args.device)
    if args.int8 and device.type != "cpu":
        raise UserError("--int8 runs on the CPU: add --device cpu")
    rt = Runtime(device, inference_precision(args.precision, device, args.int8, args.backend), args.batch_size)
    columns = args.text_columns.split(",") if args.text_columns else None
    if args.task == "retrieval":
        report = _run_retrieval(args, rt)
    elif args.zero_shot:
        report = _run_zero_shot(args, rt, columns)
    else:
        report = _run_task(args, rt, columns)
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0
