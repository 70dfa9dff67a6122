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
    from bertkit.train.finetune import TASKS

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


def _saved_run(model_dir: Path) -> dict:
    from bertkit.train.finetune import RUN_FILE

    path = model_dir / RUN_FILE
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"not valid JSON ({e})", path) from None


def build_for_model(args, model_dir: Path, rt):
    """The task object for a saved model: its labels, columns and sequence length."""
    from bertkit.config import BertConfig
    from bertkit.tokenizer import Tokenizer
    from bertkit.train.feature_tagger import TAGGER_CONFIG, read_tagger_config
    from bertkit.train.finetune import make_task

    saved = _saved_run(model_dir)
    if saved.get("task") and saved["task"] != args.task:
        raise UserError(f"model was fine-tuned for {saved['task']}, not {args.task}", model_dir)
    config = BertConfig.load(model_dir)
    tokenizer = Tokenizer.from_pretrained(model_dir)
    feature_based = (model_dir / TAGGER_CONFIG).exists()
    labels = layers = None
    if feature_based:
        tagger = read_tagger_config(model_dir)
        labels, layers = tagger["labels"], tuple(tagger["layers"])
    elif config.id2label and args.task not in ("squad", "regress", "stsb"):
        labels = [config.id2label[i] for i in sorted(config.id2label)]
    text_columns = args.text_columns.split(",") if args.text_columns else saved.get("text_columns")
    return make_task(args.task, tokenizer, args.max_seq_len or saved.get("max_seq_len"), text_columns,
                     args.label_column or saved.get("label_column"), labels=labels,
                     feature_based=feature_based, model_dir=model_dir, rt=rt, layers=layers)


def evaluate_model(task, model_dir: Path, data_path, rt, int8: bool = False) -> tuple[dict, dict, object]:
    """(metrics, prepared data, predictions) of the saved model on a file (int8: quantized, CPU)."""
    examples = task.read(data_path)
    data = task.prepare(examples)
    model = task.load_model(model_dir).to(rt.device)
    if int8:
        from bertkit.quantize import quantize_int8

        model = quantize_int8(model, inplace=True)
    predictions = task.predict(model, data, rt)
    return task.score(data, predictions), data, predictions


def run(args) -> int:
    from bertkit.devices import resolve_device
    from bertkit.train.finetune_tasks import Runtime

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
    if args.zero_shot:
        report = zero_shot(args, model_dir, rt)
    else:
        task = build_for_model(args, model_dir, rt)
        metrics, data, predictions = evaluate_model(task, model_dir, args.data, rt, int8=args.int8)
        if args.out:
            task.write_predictions(Path(args.out), data, predictions)
        report = {"task": args.task, "model": str(model_dir), "data": str(args.data),
                  "examples": len(data["examples"]), "int8": args.int8, **metrics}
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


def zero_shot(args, model_dir: Path, rt) -> dict:
    """Cosine similarity of each pair's pooled embeddings, correlated with the gold scores."""
    import numpy as np

    from bertkit.data.tasks import custom_spec, glue_task, read_glue, read_table
    from bertkit.embed import embed_texts, load_encoder
    from bertkit.eval.metrics import task_metrics

    if args.task == "stsb":
        examples, spec = read_glue("stsb", args.data), glue_task("stsb")
    elif args.task == "regress" and args.text_columns and args.label_column:
        examples = read_table(args.data, args.text_columns.split(","), args.label_column, "regression")
        spec = custom_spec("regress", "regression")
    else:
        raise UserError("--zero-shot scores sentence pairs: use --task stsb, or regress with two --text-columns")
    if any(e.text_b is None for e in examples) or any(e.label is None for e in examples):
        raise UserError("--zero-shot needs sentence pairs with gold scores", args.data)
    model, tokenizer = load_encoder(model_dir)
    kw = dict(pooling=args.pooling, normalize=True, batch_size=args.batch_size,
              max_length=args.max_seq_len or 128, device=rt.device)
    a = np.asarray(embed_texts(model, tokenizer, [e.text_a for e in examples], **kw), dtype=np.float64)
    b = np.asarray(embed_texts(model, tokenizer, [e.text_b for e in examples], **kw), dtype=np.float64)
    cosine = (a * b).sum(axis=1)  # unit vectors
    metrics = task_metrics(spec, cosine.tolist(), [float(e.label) for e in examples])
    return {"task": args.task, "model": str(model_dir), "data": str(args.data), "zero_shot": True,
            "pooling": args.pooling, "examples": len(examples), **metrics}
