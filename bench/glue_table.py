"""The bertkit-vs-Trainer GLUE table, rendered from whatever runs exist (issue 17).

`bench/glue_vs_trainer.py` writes one results.json per run to ROOT/<task>/<pipeline>-seed<k>.json
(pipeline `bertkit` or `trainer`, one seed per file). This module reads them, summarizes each
task's dev main metric (median, sample std, min, max over seeds), wall time per run (the
training loop with its dev evaluations: `seeds[0].time_s` in both layouts) and median last-epoch
training loss, applies the goal check, and renders the Markdown table docs/results/glue-vs-trainer.md shows, a JSON
summary and a PNG of every seed. It also measures how far Trainer is ahead and whether
seed-to-seed noise explains it: a permutation test on the means and, with at least 10 seeds each,
how often the 5-seed goal misses by chance (a pipeline against itself).

The goal, per task, judged only once both pipelines have every seed:
- quality: bertkit's median >= Trainer's median - half the larger of the two stds;
- time: bertkit's median wall time per run <= Trainer's. The verdict also gives the median over
  seeds of Trainer's time / bertkit's in the same pair, which ran side by side.
A task with missing runs is marked incomplete (k/n seeds) and shows what it has.

As a script it summarizes any tasks and seeds of a results folder, e.g. RTE over seeds 1-20:

    python bench/glue_table.py --tasks rte --seeds 1-20 --json RESULTS/rte-seeds-1-20.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
from pathlib import Path

TASKS = ("mrpc", "rte", "stsb", "cola", "sst2")
PIPELINES = ("bertkit", "trainer")
NAMES = {"mrpc": "MRPC", "rte": "RTE", "stsb": "STS-B", "cola": "CoLA", "sst2": "SST-2 (8k)"}
START = "<!-- glue-vs-trainer table: start (bench/glue_vs_trainer.py writes this) -->"
END = "<!-- glue-vs-trainer table: end -->"


def run_path(root: Path, task: str, pipeline: str, seed: int) -> Path:
    return Path(root) / task / f"{pipeline}-seed{seed}.json"


def load_runs(root: Path, task: str, pipeline: str, seeds: list[int]) -> list[dict]:
    """{seed, metric, value, time_s, epoch1, loss} of each finished run, in seed order; loss is the
    mean training loss of the last epoch (None when the run did not record it)."""
    runs = []
    for seed in seeds:
        path = run_path(root, task, pipeline, seed)
        if not path.exists():
            continue
        results = json.loads(path.read_text(encoding="utf-8"))
        run, metric = results["seeds"][0], results["main_metric"]
        epochs = run.get("epochs") or [{}]
        runs.append({"seed": run["seed"], "metric": metric, "value": run["dev"][metric], "time_s": run["time_s"],
                     "epoch1": epochs[0].get(metric), "loss": epochs[-1].get("train_loss")})
    return runs


def stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def summarize_task(bertkit: list[dict], trainer: list[dict], n_seeds: int) -> dict:
    """Both pipelines' statistics and the goal check (None until both have all seeds)."""
    out: dict = {"complete": len(bertkit) == n_seeds and len(trainer) == n_seeds, "seeds": n_seeds}
    for name, runs in (("bertkit", bertkit), ("trainer", trainer)):
        losses = [r["loss"] for r in runs if r.get("loss") is not None]
        out[name] = ({**stats([r["value"] for r in runs]), "time_s": statistics.median([r["time_s"] for r in runs]),
                      "train_loss": statistics.median(losses) if losses else None,
                      "values": {r["seed"]: r["value"] for r in runs}} if runs else None)
        if runs:
            out["metric"] = runs[0]["metric"]
    # pairs ran side by side, so their ratio is the time comparison that machine drift does not move
    ratios = [t["time_s"] / b["time_s"] for b in bertkit for t in trainer if t["seed"] == b["seed"]]
    out["time_ratio"] = statistics.median(ratios) if ratios else None
    values = [r["value"] for r in bertkit], [r["value"] for r in trainer]
    out["gap"] = gap(*values)
    out["miss_rates"] = miss_rates(*values)
    out["quality_ok"] = out["time_ok"] = None
    if out["complete"]:
        out["margin"] = goal_margin(*values)
        out["quality_ok"] = goal_met(*values)
        out["time_ok"] = out["bertkit"]["time_s"] <= out["trainer"]["time_s"]
    return out


def permutation_p(a: list[float], b: list[float], rounds: int = 20000, seed: int = 0) -> float:
    """Two-sided p-value that the means of `a` and `b` differ only by chance: the share of
    relabellings of the pooled values whose mean difference is at least the observed one. Every
    split is enumerated when there are at most `rounds` of them (5 vs 5: 252), otherwise `rounds`
    random ones are drawn (seeded) and p is (hits + 1) / (rounds + 1)."""
    pooled, n, total = [*a, *b], len(a), sum(a) + sum(b)
    observed = abs(sum(b) / len(b) - sum(a) / n) - 1e-9 * (1 + abs(total))

    def far(first_sum: float) -> bool:
        return abs((total - first_sum) / len(b) - first_sum / n) >= observed

    if math.comb(len(pooled), n) <= rounds:
        splits = list(itertools.combinations(range(len(pooled)), n))
        return sum(far(sum(pooled[i] for i in split)) for split in splits) / len(splits)
    rng, hits = random.Random(seed), 0
    for _ in range(rounds):
        hits += far(sum(rng.sample(pooled, n)))
    return (hits + 1) / (rounds + 1)


def gap(bertkit: list[float], trainer: list[float]) -> dict | None:
    """How far Trainer is ahead (negative: behind) in median and mean, and whether the mean gap
    is larger than chance relabelling of the seeds gives (`permutation_p`); None below 2 runs each."""
    if len(bertkit) < 2 or len(trainer) < 2:
        return None
    return {"median": statistics.median(trainer) - statistics.median(bertkit),
            "mean": statistics.fmean(trainer) - statistics.fmean(bertkit), "p": permutation_p(bertkit, trainer)}


def goal_margin(bertkit: list[float], trainer: list[float]) -> float:
    """How far under Trainer's median bertkit's may fall: half the larger of the two stds."""
    return max(statistics.stdev(bertkit), statistics.stdev(trainer)) / 2


def goal_met(bertkit: list[float], trainer: list[float]) -> bool:
    """The quality goal: bertkit's median >= Trainer's median - `goal_margin`."""
    return statistics.median(bertkit) >= statistics.median(trainer) - goal_margin(bertkit, trainer)


def miss_rates(bertkit: list[float], trainer: list[float], n: int = 5, draws: int = 5000, seed: int = 0) -> dict | None:
    """How often the n-seed quality goal fails by chance alone: over `draws` random n-seed samples,
    the share that miss for bertkit against Trainer, and for each pipeline against itself (two
    disjoint samples of its own runs: a placebo, where every miss is noise). None below 2n runs each."""
    if len(bertkit) < 2 * n or len(trainer) < 2 * n:
        return None
    rng = random.Random(seed)

    def rate(pick) -> float:
        return sum(not goal_met(*pick()) for _ in range(draws)) / draws

    def against_itself(values):
        both = rng.sample(values, 2 * n)
        return both[:n], both[n:]

    return {"n": n, "draws": draws,
            "bertkit_vs_trainer": rate(lambda: (rng.sample(bertkit, n), rng.sample(trainer, n))),
            "trainer_vs_itself": rate(lambda: against_itself(trainer)),
            "bertkit_vs_itself": rate(lambda: against_itself(bertkit))}


def render_gaps(summary: dict) -> str:
    """Per task with runs in both pipelines: Trainer's lead and its permutation p-value, and the
    5-seed goal's miss rates when there are enough seeds."""
    lines = []
    for task, row in summary.items():
        g = row.get("gap")
        if g:
            n = f"{row['bertkit']['n']} vs {row['trainer']['n']} seeds"
            lines.append(f"{NAMES.get(task, task)}: Trainer - bertkit = {g['median']:+.2f} (median), "
                         f"{g['mean']:+.2f} (mean); permutation p {g['p']:.3f} ({n})")
        m = row.get("miss_rates")
        if m:
            lines.append(f"  the {m['n']}-seed goal misses in {m['bertkit_vs_trainer']:.0%} of random {m['n']}-seed "
                         f"draws, bertkit vs Trainer; by chance alone (a pipeline vs itself): Trainer "
                         f"{m['trainer_vs_itself']:.0%}, bertkit {m['bertkit_vs_itself']:.0%} ({m['draws']:,} draws)")
    return "\n".join(lines) + ("\n" if lines else "")


def summarize(root: Path, tasks=TASKS, seeds=(1, 2, 3, 4, 5)) -> dict:
    seeds = list(seeds)
    return {task: summarize_task(load_runs(root, task, "bertkit", seeds), load_runs(root, task, "trainer", seeds),
                                 len(seeds)) for task in tasks}


def _cell(s: dict | None) -> str:
    if s is None:
        return "– | – | – | – | – | –"
    loss = f"{s['train_loss']:.4f}" if s.get("train_loss") is not None else "–"
    return f"{s['median']:.2f} | {s['std']:.2f} | {s['min']:.2f} | {s['max']:.2f} | {s['time_s']:.0f} | {loss}"


def _verdict(row: dict) -> str:
    if not row["complete"]:
        have = [row[p]["n"] if row[p] else 0 for p in PIPELINES]
        return f"incomplete ({have[0]}/{row['seeds']} bertkit, {have[1]}/{row['seeds']} Trainer seeds)"
    quality = "yes" if row["quality_ok"] else "**no**"
    time = "yes" if row["time_ok"] else "**no**"
    ratio = f" (Trainer/bertkit {row['time_ratio']:.2f}x per pair)" if row.get("time_ratio") else ""
    return f"quality {quality} (>= {row['trainer']['median'] - row['margin']:.2f}); time {time}{ratio}"


def render(summary: dict) -> str:
    """The Markdown table: per task, each pipeline's median, std, min, max, wall time, median
    last-epoch training loss (equal losses with unequal dev scores point at noise or evaluation,
    not at learning), and the goal."""
    lines = ["| task | metric | pipeline | median | std | min | max | s/run | train loss | goal met? |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for task, row in summary.items():
        metric = row.get("metric", "–")
        lines.append(f"| {NAMES.get(task, task)} | {metric} | bertkit | {_cell(row['bertkit'])} | {_verdict(row)} |")
        lines.append(f"| | | Trainer | {_cell(row['trainer'])} | |")
    return "\n".join(lines) + "\n"


def replace_section(text: str, table: str) -> str:
    """`text` with the block between START and END replaced by `table` (markers kept)."""
    if START not in text or END not in text:
        raise ValueError("README has no glue-vs-trainer table markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}{END}{tail}"


def plot(summary: dict, dest: Path) -> None:
    """One panel per task with runs: every seed's dev metric for each pipeline, medians as bars."""
    from bertkit.plots import pyplot, save_figure

    rows = {t: r for t, r in summary.items() if r["bertkit"] or r["trainer"]}
    if not rows:
        return
    plt = pyplot()
    fig, axes = plt.subplots(1, len(rows), figsize=(max(3 * len(rows), 4.5), 3.8), squeeze=False)
    for ax, (task, row) in zip(axes[0], rows.items()):
        for x, name in enumerate(PIPELINES):
            s = row[name]
            if s:
                values = list(s["values"].values())
                ax.scatter([x] * len(values), values, alpha=0.7)
                ax.hlines(s["median"], x - 0.25, x + 0.25, colors="black")
        ax.set(xticks=[0, 1], xticklabels=["bertkit", "Trainer"], xlim=(-0.6, 1.6),
               title=f"{NAMES.get(task, task)} ({'done' if row['complete'] else 'partial'})",
               ylabel=f"dev {row.get('metric', '')}")
        ax.grid(alpha=0.3)
    fig.suptitle("all-MiniLM-L6-v2, 2 epochs: each seed's dev score (bar: median)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, dest)


def parse_seeds(text: str) -> list[int]:
    """"1,2,5" or "1-10" (or a mix: "1-3,7") -> the seeds in that order."""
    seeds = []
    for part in filter(None, (t.strip() for t in text.split(","))):
        first, _, last = part.partition("-")
        seeds.extend(range(int(first), int(last or first) + 1))
    return seeds


def main(argv=None) -> None:
    root = Path(__file__).resolve().parents[1] / "docs/results/glue-vs-trainer"
    p = argparse.ArgumentParser(prog="glue_table.py", description="Summarize finished runs of some tasks and "
                                "seeds: print the Markdown table; optionally write the summary JSON and plot")
    p.add_argument("--results", default=str(root), help="per-run JSON folder (bench/glue_vs_trainer.py's)")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated")
    p.add_argument("--seeds", default="1-5", help='comma-separated seeds or ranges, e.g. "1-10"')
    p.add_argument("--json", help="write the summary here, and its plot beside it as .png")
    args = p.parse_args(argv)
    summary = summarize(Path(args.results), args.tasks.split(","), parse_seeds(args.seeds))
    print(render(summary), end="")
    print(render_gaps(summary), end="")
    if args.json:
        from bertkit.io import write_json

        write_json(Path(args.json), summary)
        plot(summary, Path(args.json).with_suffix(".png"))


if __name__ == "__main__":
    main()
