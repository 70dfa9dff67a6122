"""Retrieval evaluation on a BEIR set: a bi-encoder and BM25 ranked and scored the same way.

Both retrievers score every (query, document) pair exactly: the bi-encoder by the cosine of its
unit vectors (pooled as the model directory says; a document longer than its tokens cut, pooled
from its windows' vectors, or scored by its best chunk, as the encoder's long-input policy and
`chunks` say), BM25 by bm25s (Lucene's variant, k1 1.5,
b 0.75, English stop words, no stemming). Each query keeps its 100 best documents, equal scores
broken by corpus id, and `eval.retrieval` turns the rankings into the evaluator's metrics.
Only queries with a relevant document in the qrels are evaluated.
"""

from __future__ import annotations

import time

import numpy as np

from bertkit.errors import UserError
from bertkit.eval.retrieval import rank_documents, retrieval_metrics

DEPTH = 100  # documents kept per query: the largest k of any metric
QUERY_BLOCK = 512  # queries scored at once: a (512, N) float32 score matrix


def evaluated_queries(queries: dict[str, str], qrels: dict[str, set[str]], source: object = None) -> list[str]:
    """Query ids with relevant documents, in the queries file's order; a UserError when none."""
    qids = [q for q in queries if qrels.get(q)]
    if not qids:
        raise UserError("no query of the queries file has a relevant document in the qrels", source)
    return qids


def _rank_blocks(score_block, n_queries: int, corpus_ids: list[str]) -> list[list[str]]:
    out: list[list[str]] = []
    for start in range(0, n_queries, QUERY_BLOCK):
        out += rank_documents(score_block(start, min(start + QUERY_BLOCK, n_queries)), corpus_ids, DEPTH)
    return out


def dense_rankings(encoder, queries: list[str], corpus_ids: list[str], corpus_texts: list[str],
                   progress: bool = True, chunks: bool = False) -> tuple[list[list[str]], dict]:
    """(rankings, the documents' and the queries' long-input reports) of a bi-encoder
    (`search.encoder.Encoder`); with `chunks`, each document scored by its best chunk."""
    from bertkit.long_inputs import best_chunk

    first, second = {}, {}
    docs = encoder.encode(corpus_texts, progress=progress, report=first, chunks=chunks)  # (N or R, C), unit rows
    q = encoder.encode(queries, progress=progress, report=second)  # (Q, C)

    def score(a: int, b: int) -> np.ndarray:
        if chunks:
            return best_chunk(q[a:b] @ docs[0].T, docs[1], len(corpus_ids))  # (b - a, N)
        return q[a:b] @ docs.T

    return _rank_blocks(score, len(queries), corpus_ids), {"documents": first, "queries": second}


def bm25_rankings(queries: list[str], corpus_ids: list[str], corpus_texts: list[str]) -> list[list[str]]:
    import bm25s

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(corpus_texts, stopwords="en", show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False)
    zero = np.zeros(len(corpus_ids), dtype=np.float32)

    def block(a: int, b: int) -> np.ndarray:
        return np.stack([retriever.get_scores(t).astype(np.float32) if t else zero for t in tokens[a:b]])

    return _rank_blocks(block, len(queries), corpus_ids)


def evaluate_retrieval(queries: dict[str, str], corpus: dict[str, str], qrels: dict[str, set[str]],
                       encoder=None, bm25: bool = False, progress: bool = True, chunks: bool = False) -> dict:
    """{"queries", "documents", "results": {"bm25": metrics, "dense": metrics}} for what is asked."""
    qids = evaluated_queries(queries, qrels)
    texts = [queries[q] for q in qids]
    corpus_ids = list(corpus)
    corpus_texts = [corpus[c] for c in corpus_ids]
    results = {}
    if bm25:
        start = time.perf_counter()
        ranked = bm25_rankings(texts, corpus_ids, corpus_texts)
        results["bm25"] = {**retrieval_metrics(dict(zip(qids, ranked)), qrels),
                           "seconds": round(time.perf_counter() - start, 2)}
    if encoder is not None:
        start = time.perf_counter()
        ranked, info = dense_rankings(encoder, texts, corpus_ids, corpus_texts, progress, chunks)
        results["dense"] = {**retrieval_metrics(dict(zip(qids, ranked)), qrels),
                            "seconds": round(time.perf_counter() - start, 2), "model": encoder.model_dir,
                            "pooling": encoder.pooling, "max_length": encoder.max_length,
                            "cut": info["documents"]["cut"] + info["queries"]["cut"],
                            **encoder.policy.settings(), "chunks": chunks,
                            "long_inputs_report": {k: _report(v) for k, v in info.items()}}
    return {"queries": len(qids), "documents": len(corpus_ids), "results": results}


def _report(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("cut", "max_length")}
