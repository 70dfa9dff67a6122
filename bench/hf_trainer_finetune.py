"""The same GLUE fine-tuning through transformers' own pipeline, end to end: bertkit's reference.

    python bench/hf_trainer_finetune.py --model DIR --task mrpc --train ... --dev ... --out OUT \
        --epochs 2 --lr 5e-5 --seeds 1,2,3 [the other flags of `bertkit finetune`]

Where `bench/hf_finetune.py` swaps only the model inside bertkit's loop, here everything that
trains is transformers': `BertTokenizerFast` from the model directory (pairs truncated
longest-first to --max-seq-len), a plain torch Dataset of its encodings, `DataCollatorWithPadding`,
`BertForSequenceClassification` and `Trainer` with `TrainingArguments`. Only the examples and the
score are bertkit's, so that a difference is the pipeline's: the files are read by bertkit's GLUE
readers (and --max-train-examples picks the same subset, `random.Random(0).sample`), and dev
predictions are scored by bertkit's official metrics after every epoch.

Flags set Trainer's counterparts of bertkit's recipe: epochs, peak lr, batch size, warm-up
(`warmup_steps`, a fraction below 1), weight decay, gradient clipping (`max_grad_norm`), the seed
(`transformers.set_seed` before the model is built, then `TrainingArguments.seed`, which also
shuffles the batches), --group-by-length (`train_sampling_strategy="group_by_length"`),
--classifier-dropout (the config's `classifier_dropout`), --adam-eps (`adam_epsilon`). The rest
are Trainer's defaults. Those that differ from bertkit's recipe:
- AdamW `adamw_torch_fused`, eps 1e-8 unless --adam-eps (bertkit 1e-6), betas (0.9, 0.999) as bertkit's;
- the linear schedule's first step has lr 0 (bertkit's has peak / warm-up steps), and a warm-up
  fraction becomes ceil(fraction x steps) steps (bertkit rounds);
- dev batches in file order, each padded to its longest (bertkit sorts dev inputs by length: the
  same predictions, less padding); --eval-batch-size is bertkit's 64, not Trainer's 8.
Those that agree: no decay on biases and LayerNorm weights, mean cross-entropy (MSE for STS-B),
the config's dropout on the pooled vector, the classifier drawn from N(0, 0.02) with zero bias.

Writes OUT/results.json in the layout of `bertkit finetune`'s (per seed: final dev metrics, per-epoch
dev metrics and train loss, every evaluation's step, epoch, train loss and dev metrics (`evals`;
--eval-every N adds evaluations every N steps, at the same steps as bertkit's loop), loss per step,
steps, seconds for training and the dev evaluations; the median, std, min and max over seeds),
OUT/train_loss.png and OUT/dev_<metric>.png (drawn by bertkit.plots, as bertkit's).
No model is saved. One log line per epoch; Trainer's progress bars and log prints are off. Torch
uses OMP_NUM_THREADS threads when it is set.

A benchmark, not part of bertkit: transformers is a test/bench dependency only, and Trainer also
needs `accelerate` (`pip install accelerate`).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import (
    BertForSequenceClassification,
    BertTokenizerFast,
    DataCollatorWithPadding,
    PrinterCallback,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from bertkit.data.glue import glue_task, read_glue
from bertkit.eval.metrics import task_metrics
from bertkit.io import write_json
from bertkit.plots import plot_finetuning

TASKS = ("cola", "sst2", "mrpc", "stsb", "rte")


def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(prog="hf_trainer_finetune.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="pretrained model directory (HF format + vocab.txt)")
    p.add_argument("--task", required=True, choices=TASKS, help="GLUE task")
    p.add_argument("--train", required=True, help="training file (official GLUE layout)")
    p.add_argument("--dev", required=True, help="dev file, evaluated after each epoch")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=2e-5, help="peak learning rate")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-len", type=int, default=128, help="tokens per input (pairs: longest first)")
    p.add_argument("--warmup", type=float, default=0.1, help="warm-up: fraction of steps (<1) or steps")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="clip the gradient's norm (0: off)")
    p.add_argument("--adam-eps", type=float, default=None,
                   help="AdamW's epsilon, adam_epsilon (default: Trainer's, 1e-8; bertkit's is 1e-6)")
    p.add_argument("--seeds", default="1,2,3", help="comma-separated seeds; one run per seed")
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="train on a random subset of this many examples (fixed seed 0, as bertkit)")
    p.add_argument("--group-by-length", action="store_true", help="Trainer's length-grouped sampler")
    p.add_argument("--classifier-dropout", type=float, default=None,
                   help="dropout before the classifier (default: the model config's)")
    p.add_argument("--eval-every", type=int, default=None, metavar="N",
                   help="also evaluate every N steps (eval_strategy steps); default: after each epoch")
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument("--device", choices=("auto", "cpu"), default="auto", help="auto: Trainer's choice")
    return p.parse_args(argv)


class Encoded(torch.utils.data.Dataset):
    """BertTokenizerFast's encodings and their label ids (or scores), one dict per example."""

    def __init__(self, encodings, labels: list):
        self.encodings, self.labels = encodings, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {**{k: v[i] for k, v in self.encodings.items()}, "labels": self.labels[i]}


def encode(tokenizer, spec, examples, max_seq_len: int) -> Encoded:
    pairs = [e.text_b or "" for e in examples] if spec.pair else None
    enc = tokenizer([e.text_a for e in examples], pairs, truncation="longest_first", max_length=max_seq_len)
    if spec.kind == "regression":
        return Encoded(enc, [float(e.label) for e in examples])
    return Encoded(enc, [spec.labels.index(str(e.label)) for e in examples])


def scorer(spec):
    """compute_metrics for Trainer: logits -> label values -> bertkit's official metrics, against the
    gold labels Trainer hands over beside them (`label_ids`). Never against the dev file's order:
    with group_by_length, Trainer's evaluation sampler is length-grouped and shuffled too
    (`Trainer._get_eval_sampler`), so predictions do not come in file order."""

    def compute(prediction) -> dict:
        logits, ids = np.asarray(prediction.predictions), np.asarray(prediction.label_ids)
        if spec.kind == "regression":
            return task_metrics(spec, logits.reshape(-1).tolist(), ids.reshape(-1).tolist())
        return task_metrics(spec, [spec.labels[i] for i in logits.argmax(-1).tolist()],
                            [spec.labels[i] for i in ids.tolist()])

    return compute


class Curve(TrainerCallback):
    """The dev learning curve, as bertkit's loop records it: after each evaluation, its step, its
    (fractional) epoch, the mean train loss since the previous one and the dev metrics; after each
    epoch's, also that epoch's record. With --eval-every, Trainer evaluates every N steps
    (eval_strategy "steps") and this callback adds an evaluation at each epoch's end unless that
    step was just evaluated, so both pipelines score dev at the same steps."""

    def __init__(self, seed: int, spec, epochs: int, steps_per_epoch: int, eval_every: int | None):
        self.seed, self.spec, self.epochs, self.per_epoch = seed, spec, epochs, steps_per_epoch
        self.eval_every = eval_every
        self.records: list[dict] = []
        self.evals: list[dict] = []
        self.last_step = 0

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.eval_every and state.global_step != self.last_step:
            control.should_evaluate = True
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        step, losses = state.global_step, step_losses(state.log_history)
        since = losses[self.last_step : step]
        dev = {m: metrics[f"eval_{m}"] for m in self.spec.metrics}
        self.evals.append({"step": step, "epoch": round(step / self.per_epoch, 4),
                           "train_loss": statistics.fmean(since) if since else math.nan, **dev})
        self.last_step = step
        scores = "  ".join(f"{k} {v:.2f}" for k, v in dev.items())
        if step % self.per_epoch:
            print(f"  seed {self.seed} step {step} (epoch {step / self.per_epoch:.2f}): dev {scores}", flush=True)
            return
        epoch = step // self.per_epoch
        epoch_losses = losses[(epoch - 1) * self.per_epoch : epoch * self.per_epoch]
        self.records.append({"epoch": epoch, "train_loss": statistics.fmean(epoch_losses), **dev})
        print(f"  seed {self.seed} epoch {epoch}/{self.epochs}: train loss {self.records[-1]['train_loss']:.4f}  "
              f"dev {scores}", flush=True)


def step_losses(log_history: list[dict]) -> list[float]:
    return [h["loss"] for h in log_history if "loss" in h and "step" in h]


def training_args(args, seed: int) -> TrainingArguments:
    """bertkit's recipe in Trainer's terms; Trainer's defaults for everything else."""
    return TrainingArguments(
        output_dir=str(Path(args.out) / "trainer"), seed=seed,
        num_train_epochs=args.epochs, learning_rate=args.lr, per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.eval_batch_size, warmup_steps=args.warmup,
        weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm,
        **({"adam_epsilon": args.adam_eps} if args.adam_eps is not None else {}),
        train_sampling_strategy="group_by_length" if args.group_by_length else "random",
        eval_strategy="steps" if args.eval_every else "epoch", eval_steps=args.eval_every,
        save_strategy="no", logging_strategy="steps", logging_steps=1,
        disable_tqdm=True, report_to="none", use_cpu=args.device == "cpu",
        dataloader_pin_memory=torch.cuda.is_available() and args.device != "cpu",
    )


def train_seed(args, spec, tokenizer, train: Encoded, dev: Encoded, seed: int) -> dict:
    transformers.set_seed(seed)  # before the model: the classifier's initialisation draws from it
    if spec.kind == "regression":
        head = {"num_labels": 1, "problem_type": "regression"}
    else:
        head = {"id2label": dict(enumerate(spec.labels)), "label2id": {n: i for i, n in enumerate(spec.labels)},
                "problem_type": "single_label_classification"}
    if args.classifier_dropout is not None:
        head["classifier_dropout"] = args.classifier_dropout
    model = BertForSequenceClassification.from_pretrained(args.model, **head)
    training = training_args(args, seed)
    per_epoch = math.ceil(len(train) / args.batch_size)
    log = Curve(seed, spec, args.epochs, per_epoch, args.eval_every)
    trainer = Trainer(model=model, args=training, train_dataset=train, eval_dataset=dev,
                      data_collator=DataCollatorWithPadding(tokenizer),
                      compute_metrics=scorer(spec), callbacks=[log])
    trainer.remove_callback(PrinterCallback)
    start = time.time()
    trainer.train()
    elapsed = time.time() - start
    losses = step_losses(trainer.state.log_history)
    final = {k: v for k, v in log.records[-1].items() if k not in ("epoch", "train_loss")}
    return {"seed": seed, "dev": final, "epochs": log.records, "evals": log.evals,
            "train_loss": [round(x, 5) for x in losses],
            "steps": trainer.state.global_step, "time_s": elapsed}


def summarize(runs: list[dict]) -> dict:
    """Median, sample standard deviation (0 for one seed), min and max of each dev metric."""
    out = {}
    for key in runs[0]["dev"]:
        values = [r["dev"][key] for r in runs]
        out[key] = {"median": statistics.median(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                    "min": min(values), "max": max(values)}
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    transformers.logging.set_verbosity_error()  # the "newly initialized classifier" notice, per seed
    transformers.utils.logging.disable_progress_bar()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    spec, model_dir, out = glue_task(args.task), Path(args.model), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    start = time.time()
    train_examples, dev_examples = read_glue(args.task, args.train), read_glue(args.task, args.dev)
    if args.max_train_examples is not None and args.max_train_examples < len(train_examples):
        train_examples = random.Random(0).sample(train_examples, args.max_train_examples)
    tokenizer = BertTokenizerFast.from_pretrained(model_dir)
    train = encode(tokenizer, spec, train_examples, args.max_seq_len)
    dev = encode(tokenizer, spec, dev_examples, args.max_seq_len)
    steps = math.ceil(len(train) / args.batch_size) * args.epochs
    print(f"hf_trainer_finetune.py (transformers {transformers.__version__} Trainer, torch "
          f"{torch.__version__}, {torch.get_num_threads()} thread(s)): {args.task} on {len(train)} training / "
          f"{len(dev)} dev examples; {steps} steps per seed x {len(seeds)} seed(s), lr {args.lr:g}, "
          f"batch {args.batch_size}", flush=True)

    defaults = training_args(args, seeds[0])
    runs = [train_seed(args, spec, tokenizer, train, dev, seed) for seed in seeds]
    results = {
        "task": args.task, "model": str(model_dir), "train": args.train, "dev": args.dev,
        "pipeline": f"transformers {transformers.__version__} Trainer",
        "main_metric": spec.main_metric, "n_train": len(train), "n_dev": len(dev),
        "seeds": runs, "summary": summarize(runs), "time_s": round(time.time() - start, 1),
        "hyper": {"epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size, "warmup": args.warmup,
                  "weight_decay": args.weight_decay, "max_grad_norm": args.max_grad_norm, "seeds": seeds,
                  "group_by_length": args.group_by_length, "classifier_dropout": args.classifier_dropout,
                  "eval_every": args.eval_every},
        "trainer_defaults": {k: getattr(getattr(defaults, k), "value", getattr(defaults, k)) for k in
                             ("optim", "adam_epsilon", "adam_beta1", "adam_beta2", "lr_scheduler_type")},
        "args": vars(args),
    }
    write_json(out / "results.json", results)
    plot_finetuning(runs, spec.main_metric, out, title="transformers Trainer")
    main_metric = spec.main_metric
    print(f"done in {results['time_s']:.0f}s. dev {main_metric} per seed: "
          + ", ".join(f"{r['seed']}: {r['dev'][main_metric]:.2f}" for r in runs))
    for key, s in results["summary"].items():
        print(f"  {key:<10} median {s['median']:7.2f}  std {s['std']:6.2f}  min {s['min']:7.2f}  max {s['max']:7.2f}")
    print(f"results in {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
