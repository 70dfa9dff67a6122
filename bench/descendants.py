"""BERT's descendants pretrained side by side: which idea buys the most per CPU-minute.

    OMP_NUM_THREADS=1 python bench/descendants.py [--minutes 10] [--seeds 0,1,2] [--archs bert,roberta,...]

Every arm pretrains on the demo's data (BBC News's training articles, the demo's split, one
8,000-entry WordPiece vocabulary for all, so only the idea differs), the tiny preset's shape made
each architecture's by `bertkit pretrain --arch` (the same width, depth and heads; feed-forward
parameters equal for ModernBERT's GeGLU; ALBERT shares one layer's weights), with the budget
recipe and each architecture's own objective: BERT masked LM (the budget recipe's), RoBERTa masked
LM, ALBERT masked LM + sentence order, DeBERTa-v3 replaced-token detection with gradient-disentangled
sharing, ModernBERT masked LM at 30%. Each arm gets the same wall-clock budget on one thread,
two arms at a time, for every seed; then every model is scored the same way:
- the demo's topic probe from 4 / 16 / 64 / all labelled articles per topic (frozen mean-pooled
  features, 5 draws) and its sense probe ("court", "bank": same-sense neighbours);
- SST-2 fine-tuned on a fixed 8,000-sentence subset (3 fine-tuning seeds, median) and CoNLL-2003
  NER on 2,000 training sentences (F1 on the whole dev set, 3 seeds, median);
- steps, tokens per second and useful FLOPs per token (`bertkit.pretrain.report.useful_flops`).
The equal-FLOPs view divides each arm's scores by nothing: it reports each arm's FLOPs spent,
so a reader can see which arm had more compute in the same minutes. Results: --json (and a PNG).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
TODAY = dt.date.today().isoformat()
ARCHS = ("bert", "roberta", "albert", "deberta", "modernbert")
FORMAT = {"albert": "sop"}  # the prepared data an arch's objective reads; packed otherwise


def parse_args(argv):
    p = argparse.ArgumentParser(prog="descendants.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="wall-clock budget of every arm (default 10)")
    p.add_argument("--seeds", default="0,1,2", help="pretraining seeds (default 0,1,2)")
    p.add_argument("--archs", default=",".join(ARCHS))
    p.add_argument("--parallel", type=int, default=2, help="arms at a time, one thread each")
    p.add_argument("--work", default=str(ROOT / "scratch/descendants"))
    p.add_argument("--json", default=str(ROOT / f"docs/results/descendants/{TODAY}.json"))
    p.add_argument("--sst2-examples", type=int, default=8000)
    p.add_argument("--ner-sentences", type=int, default=2000)
    p.add_argument("--articles-per-topic", type=int, default=None, help="a smaller corpus (smoke runs)")
    p.add_argument("--skip-finetuning", action="store_true", help="probes and senses only (smoke runs)")
    return p.parse_args(argv)


def prepare(work: Path, articles_per_topic: int | None) -> dict[str, Path]:
    """The demo's corpus and vocabulary, prepared packed and as sentence-order pairs."""
    from bertkit.data.prepare import PrepareOptions, prepare_corpus
    from pretrain_recipes import prepare as demo_data

    paths = demo_data(work, articles_per_topic)
    sop = work / "data-sop"
    if not sop.is_dir():
        prepare_corpus([work / "corpus"], work / "vocab", sop,
                       PrepareOptions(max_seq_len=128, format="sop", val_fraction=0.02, seed=0, workers=1))
    return {"packed": paths["packed"], "sop": sop}


def pretrain_args(arch: str, data: Path, out: Path, minutes: float, seed: int) -> list[str]:
    return ["pretrain", "--data", str(data), "--out", str(out), "--preset", "tiny", "--arch", arch, "--recipe",
            "budget", "--minutes", str(minutes), "--seed", str(seed), "--eval-every", "1000000", "--eval-samples",
            "256", "--log-every", "50", "--keep", "1", "--overwrite", "--threads", "1"]


def pretrain_all(args, data: dict, work: Path, jobs: list[tuple[str, int]]) -> None:
    """Every (arch, seed) arm not yet done, `args.parallel` at a time, each in its own process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    waiting = [j for j in jobs if not (work / f"{j[0]}-{j[1]}" / "model").is_dir()]
    running = []
    while waiting or running:
        while waiting and len(running) < args.parallel:
            arch, seed = waiting.pop(0)
            out = work / f"{arch}-{seed}"
            log = (work / f"{arch}-{seed}.log").open("w")
            cmd = [sys.executable, "-m", "bertkit.cli",
                   *pretrain_args(arch, data[FORMAT.get(arch, "packed")], out, args.minutes, seed)]
            running.append(((arch, seed), subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
            print(f"  pretraining {arch} seed {seed} ({args.minutes:g} min)", flush=True)
        time.sleep(5)
        for item in list(running):
            job, proc, log = item
            if proc.poll() is not None:
                running.remove(item)
                log.close()
                if proc.returncode != 0:
                    raise SystemExit(f"{job} failed: see {work}/{job[0]}-{job[1]}.log")


def run_record(out: Path) -> dict:
    """Steps, tokens/s, useful FLOPs per token and the last validation of one arm."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    val = [r for r in rows if r["kind"] == "val"]
    from bertkit.hf import load_config, parameter_count, weight_shapes

    model = out / "model"
    params = parameter_count(weight_shapes(model), load_config(model).model_type)
    return {"steps": train[-1]["step"], "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in train), 1),
            "parameters": params, "flops_per_token": flops_per_token(out),
            "validation": {k: v for k, v in (val[-1] if val else {}).items() if isinstance(v, float)}}


def flops_per_token(out: Path) -> float:
    """Useful FLOPs of a training step over its tokens, as the run's status line counts them."""
    from bertkit.pretrain import TrainConfig
    from bertkit.pretrain.build import build_model
    from bertkit.pretrain.report import useful_flops
    from bertkit.pretrain.setup import open_data

    saved = json.loads((out / "config.json").read_text())["train"]
    cfg = TrainConfig(**{**saved, "resume": False, "overwrite": False})
    train, _, _ = open_data(cfg)
    import torch

    model, _ = build_model(cfg, train.manifest, None, torch.device("meta"))
    seq = int(train.manifest["max_seq_len"])
    return round(useful_flops(model, cfg, seq) / (cfg.batch_size * seq))


def finetune(model: Path, task: str, args, work: Path, name: str) -> dict:
    """SST-2 (a fixed subset) or CoNLL NER, 3 seeds: each seed's dev metric and their median."""
    shared = ROOT.parent / "shared/data"
    if task == "sst2":
        files = ["--train", str(shared / "glue/SST-2/train.tsv"), "--dev", str(shared / "glue/SST-2/dev.tsv"),
                 "--max-train-examples", str(args.sst2_examples), "--max-seq-len", "64"]
        metric = "accuracy"
    else:
        files = ["--train", str(shared / "ner/conll2003/train.txt"), "--dev", str(shared / "ner/conll2003/dev.txt"),
                 "--max-train-examples", str(args.ner_sentences)]
        metric = "f1"
    out = work / f"{task}-{name}"
    if not (out / "results.json").exists():
        cmd = [sys.executable, "-m", "bertkit.cli", "finetune", "--model", str(model), "--task", task, *files,
               "--out", str(out), "--overwrite", "--seeds", "1,2,3", "--epochs", "3", "--lr", "1e-4",
               "--batch-size", "32", "--group-by-length", "--no-progress", "--threads", "1"]
        subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
    values = [s["dev"][metric] for s in json.loads((out / "results.json").read_text())["seeds"]]
    return {"seeds": [round(v, 2) for v in values], "median": round(statistics.median(values), 2)}


def score(args, work: Path, jobs: list[tuple[str, int]]) -> dict:
    """Every arm's record, probes, senses and fine-tuned scores (each arm's discriminator for DeBERTa)."""
    from pretrain_objectives import score_probes

    models = {f"{arch}-{seed}": work / f"{arch}-{seed}" / "model" for arch, seed in jobs}
    probes = score_probes({k: str(v) for k, v in models.items()}, with_random=True)
    results = {"random": {"probe": probes["random"]["probe"], "senses": probes["random"]["senses"]}}
    for name, model in models.items():
        r = {"run": run_record(model.parent), **probes[name]}
        if not args.skip_finetuning:
            r["sst2"] = finetune(model, "sst2", args, work, name)
            r["ner"] = finetune(model, "ner", args, work, name)
        results[name] = r
        print(f"  scored {name}: probe-4 {r['probe']['4']['mean']}" +
              (f", SST-2 {r['sst2']['median']}, NER {r['ner']['median']}" if "sst2" in r else ""), flush=True)
    return results


def summarise(results: dict, archs: list[str], seeds: list[int]) -> dict:
    """Per arch, each measure's median over seeds with its spread (max - min), and its gap to BERT."""
    measures = {"probe-4": lambda r: r["probe"]["4"]["mean"], "probe-16": lambda r: r["probe"]["16"]["mean"],
                "probe-all": lambda r: r["probe"]["all"]["mean"],
                "court-nn": lambda r: 100 * r["senses"]["court"]["neighbours_same_sense"],
                "bank-nn": lambda r: 100 * r["senses"]["bank"]["neighbours_same_sense"],
                "sst2": lambda r: r["sst2"]["median"], "ner": lambda r: r["ner"]["median"],
                "steps": lambda r: r["run"]["steps"], "mflops_per_token": lambda r: r["run"]["flops_per_token"] / 1e6}
    table = {}
    for arch in archs:
        rows = [results[f"{arch}-{s}"] for s in seeds if f"{arch}-{s}" in results]
        table[arch] = {}
        for m, get in measures.items():
            try:
                values = [get(r) for r in rows]
            except KeyError:
                continue
            table[arch][m] = {"median": round(statistics.median(values), 3),
                              "spread": round(max(values) - min(values), 3), "values": [round(v, 3) for v in values]}
    for arch in archs:
        for m, cell in table[arch].items():
            if "bert" in table and m in table["bert"]:
                cell["gap_to_bert"] = round(cell["median"] - table["bert"][m]["median"], 3)
                cell["beyond_spread"] = abs(cell["gap_to_bert"]) > max(cell["spread"], table["bert"][m]["spread"])
    return table


def markdown(table: dict) -> str:
    cols = ("probe-4", "probe-16", "probe-all", "court-nn", "bank-nn", "sst2", "ner", "steps", "mflops_per_token")
    lines = ["| arch | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for arch, row in table.items():
        cells = []
        for c in cols:
            cell = row.get(c)
            if cell is None:
                cells.append("-")
                continue
            gap = f" ({cell['gap_to_bert']:+.1f}{'*' if cell.get('beyond_spread') else ''})" if arch != "bert" \
                and "gap_to_bert" in cell and c not in ("steps", "mflops_per_token") else ""
            cells.append(f"{cell['median']:.1f} ± {cell['spread'] / 2:.1f}{gap}")
        lines.append(f"| {arch} | " + " | ".join(cells) + " |")
    lines.append("\n(median ± half the seeds' spread; (gap to BERT), * beyond the larger spread)")
    return "\n".join(lines)


def plot(table: dict, path: Path) -> None:
    from bertkit.plots import pyplot, save_figure

    measures = [m for m in ("probe-4", "probe-16", "sst2", "ner") if all(m in row for row in table.values())]
    fig, axes = pyplot().subplots(1, len(measures), figsize=(3.2 * len(measures), 3.4))
    for ax, m in zip(axes if len(measures) > 1 else [axes], measures):
        for i, row in enumerate(table.values()):
            ax.scatter([i] * len(row[m]["values"]), row[m]["values"], alpha=0.6)
            ax.hlines(row[m]["median"], i - 0.3, i + 0.3)
        ax.set_xticks(range(len(table)), list(table), rotation=30, fontsize=8)
        ax.set_title(m)
        ax.grid(alpha=0.3)
    save_figure(fig, path, dpi=110)


def machine() -> dict:
    import platform

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
    return {"cpu": fields.get("Model name", platform.processor()).strip(),
            "family": fields.get("CPU family", "").strip(), "avx512_bf16": "avx512_bf16" in fields.get("Flags", ""),
            "cores": os.cpu_count()}


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    archs, seeds = args.archs.split(","), [int(s) for s in args.seeds.split(",")]
    jobs = [(a, s) for s in seeds for a in archs]
    data = prepare(work, args.articles_per_topic)
    started = time.time()
    pretrain_all(args, data, work, jobs)
    results = score(args, work, jobs)
    table = summarise(results, archs, seeds)
    print(markdown(table), flush=True)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    from bertkit.io import write_json

    write_json(out, {"minutes": args.minutes, "seeds": seeds, "machine": machine(), "table": table,
                     "results": results, "wall_s": round(time.time() - started, 1)})
    plot(table, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
