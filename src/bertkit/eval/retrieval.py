"""Retrieval metrics, defined as sentence-transformers' InformationRetrievalEvaluator defines them.

Relevance is binary. A query's ranking is its documents by descending score, equal scores broken
by ascending corpus id (string order), cut at the largest k asked. For one query with relevant
set R and ranking d_1, d_2, ...:

- Recall@k = |R ∩ {d_1..d_k}| / |R|;
- MRR@k = 1 / (rank of the first relevant d_i, i <= k), 0 when none is;
- NDCG@k = DCG@k / IDCG@k with DCG@k = sum over relevant d_i, i <= k, of 1 / log2(i + 1) and
  IDCG@k the DCG of min(|R|, k) relevant documents at the top;
- MAP@k (average precision) = sum over relevant d_i, i <= k, of precision@i, divided by
  min(k, |R|).

Each is averaged over the queries that have at least one relevant document (queries without
one are left out, as the evaluator leaves them out). Relevant ids missing from the corpus still
count in |R|. Everything here is a pure function of scores, ids and qrels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

DEFAULT_KS = {"ndcg": (10,), "mrr": (10,), "recall": (10, 100), "map": (100,)}


def recall_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return sum(d in relevant for d in ranked[:k]) / len(relevant)


def mrr_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    for rank, d in enumerate(ranked[:k], start=1):
        if d in relevant:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    dcg = sum(1.0 / math.log2(rank + 1) for rank, d in enumerate(ranked[:k], start=1) if d in relevant)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(relevant), k) + 1))
    return dcg / ideal


def average_precision_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    found, total = 0, 0.0
    for rank, d in enumerate(ranked[:k], start=1):
        if d in relevant:
            found += 1
            total += found / rank
    return total / min(k, len(relevant))


_METRICS = {"ndcg": ndcg_at_k, "mrr": mrr_at_k, "recall": recall_at_k, "map": average_precision_at_k}


def retrieval_metrics(rankings: dict[str, Sequence[str]], qrels: dict[str, set[str]],
                      ks: dict[str, Sequence[int]] = DEFAULT_KS) -> dict[str, float]:
    """{"ndcg@10": ..., "mrr@10": ..., "recall@10": ..., "recall@100": ..., "map@100": ...}, each the
    mean over the queries of `rankings` that have relevant documents in `qrels`."""
    queries = [q for q in rankings if qrels.get(q)]
    out = {}
    for name, values in ks.items():
        for k in values:
            out[f"{name}@{k}"] = float(np.mean([_METRICS[name](rankings[q], qrels[q], k) for q in queries])) \
                if queries else 0.0
    return out


def rank_documents(scores: np.ndarray, corpus_ids: Sequence[str], k: int) -> list[list[str]]:
    """For a (Q, N) score matrix, each query's k best corpus ids by (-score, corpus id)."""
    k = min(k, scores.shape[1])
    id_rank = np.empty(len(corpus_ids), dtype=np.int64)
    id_rank[np.argsort(np.asarray(corpus_ids, dtype=object), kind="stable")] = np.arange(len(corpus_ids))
    out = []
    for row in scores:
        keep = np.flatnonzero(row >= np.partition(row, len(row) - k)[len(row) - k]) if k < len(row) \
            else np.arange(len(row))  # the k best and everything tied with the k-th
        order = keep[np.lexsort((id_rank[keep], -row[keep]))][:k]
        out.append([corpus_ids[i] for i in order])
    return out
