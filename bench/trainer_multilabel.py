"""transformers' Trainer on multi-label entity-type sets, for bench/finetune_conventions.py multilabel:
AutoModelForSequenceClassification with problem_type "multi_label_classification" at the same recipe,
scored as bertkit scores its own runs (`finetune_conventions.set_scores`)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from finetune_conventions import set_scores


def trainer_args(argv: list[str]) -> argparse.Namespace:
    """The flags: the data, and RECIPE's flags as bench/hf_trainer_finetune.py names them."""
    p = argparse.ArgumentParser(prog="trainer_multilabel.py")
    for name in ("--model", "--train", "--dev", "--out"):
        p.add_argument(name, required=True)
    for name, kind in (("--epochs", int), ("--lr", float), ("--batch-size", int), ("--max-seq-len", int),
                       ("--warmup", float), ("--weight-decay", float), ("--max-grad-norm", float),
                       ("--adam-eps", float), ("--seeds", int), ("--eval-batch-size", int)):
        p.add_argument(name, type=kind, default=64 if name == "--eval-batch-size" else None)
    p.add_argument("--group-by-length", action="store_true")
    p.add_argument("--device", default="cpu")
    return p.parse_args(argv)


def trainer_multilabel(argv: list[str]) -> int:
    """transformers' Trainer on a multi-label table, one seed: OUT/results.json."""
    import numpy as np
    import torch
    import transformers
    from transformers import (
        AutoModelForSequenceClassification,
        BertTokenizerFast,
        DataCollatorWithPadding,
        PrinterCallback,
        Trainer,
    )

    import hf_trainer_finetune as hft
    from bertkit.data.glue import read_label_sets
    from bertkit.io import write_json

    args = trainer_args(argv)
    args.eval_every, seed = None, args.seeds
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    train, dev = (read_label_sets(path, ["text"], "labels") for path in (args.train, args.dev))
    labels = sorted({name for e in train for name in e.label})
    tokenizer = BertTokenizerFast.from_pretrained(args.model)

    def encoded(examples):
        enc = tokenizer([e.text_a for e in examples], truncation=True, max_length=args.max_seq_len)
        return hft.Encoded(enc, [[float(name in e.label) for name in labels] for e in examples])

    def compute(prediction) -> dict:
        probs = 1.0 / (1.0 + np.exp(-np.asarray(prediction.predictions, dtype=np.float64)))  # (N, L)
        scores = set_scores(probs, np.asarray(prediction.label_ids) > 0.5, labels)
        per_label = scores.pop("per_label_f1")
        return {**scores, **{f"f1_{name}": v for name, v in per_label.items()}}

    keys = ("micro_f1", "macro_f1", "subset_accuracy", "threshold", "micro_f1_at_0.5", "macro_f1_at_0.5",
            *(f"f1_{name}" for name in labels))
    transformers.set_seed(seed)  # before the model: the classifier's initialisation draws from it
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model, num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={n: i for i, n in enumerate(labels)}, problem_type="multi_label_classification")
    per_epoch = math.ceil(len(train) / args.batch_size)
    curve = hft.Curve(seed, argparse.Namespace(metrics=keys), args.epochs, per_epoch, None)
    trainer = Trainer(model=model, args=hft.training_args(args, seed), train_dataset=encoded(train),
                      eval_dataset=encoded(dev), data_collator=DataCollatorWithPadding(tokenizer),
                      compute_metrics=compute, callbacks=[curve])
    trainer.remove_callback(PrinterCallback)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    start = time.time()
    trainer.train()
    final = {k: v for k, v in curve.records[-1].items() if k not in ("epoch", "train_loss")}
    final["per_label_f1"] = {name: final.pop(f"f1_{name}") for name in labels}
    write_json(Path(args.out) / "results.json", {
        "pipeline": f"transformers {transformers.__version__} Trainer", "labels": labels, "epochs": curve.records,
        "run": {"seed": seed, **final, "steps": trainer.state.global_step, "time_s": round(time.time() - start, 1)}})
    return 0


if __name__ == "__main__":
    sys.exit(trainer_multilabel(sys.argv[1:]))
