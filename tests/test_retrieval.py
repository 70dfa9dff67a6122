"""Retrieval evaluation: our metrics against sentence-transformers' InformationRetrievalEvaluator,
the BEIR readers, `bertkit data beir-squad`, and `bertkit evaluate --task retrieval`.

The parity example is built to be hard: small integer vectors (so scores tie exactly, in float32
as in our numpy), corpus ids whose string order differs from their numeric order ("d10" < "d2"),
a relevant id missing from the corpus, a query without relevant documents, and more relevant
documents than k. The real evaluator runs on it, with a corpus chunk size that splits the ties.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertkit.data.beir import read_corpus, read_qrels, read_queries, squad_to_beir
from bertkit.errors import UserError
from bertkit.eval.retrieval import (
    average_precision_at_k,
    mrr_at_k,
    ndcg_at_k,
    rank_documents,
    recall_at_k,
    retrieval_metrics,
)

ROOT = Path(__file__).resolve().parents[1]


def test_each_metric_on_a_hand_worked_ranking():
    ranked, relevant = ["a", "b", "c", "d"], {"b", "d", "z"}  # z: relevant but never retrieved
    assert recall_at_k(ranked, relevant, 2) == pytest.approx(1 / 3)
    assert recall_at_k(ranked, relevant, 10) == pytest.approx(2 / 3)
    assert mrr_at_k(ranked, relevant, 10) == 0.5 and mrr_at_k(ranked, relevant, 1) == 0.0
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    assert ndcg_at_k(ranked, relevant, 10) == pytest.approx(dcg / (1 + 1 / math.log2(3) + 1 / math.log2(4)))
    assert average_precision_at_k(ranked, relevant, 100) == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert average_precision_at_k(ranked, relevant, 2) == pytest.approx((1 / 2) / 2)  # divided by min(k, |R|)


def test_ties_are_broken_by_corpus_id_in_string_order():
    scores = np.array([[1.0, 2.0, 2.0, 2.0, 0.5]], dtype=np.float32)
    ids = ["d2", "d10", "d3", "d1", "d0"]
    assert rank_documents(scores, ids, 2) == [["d1", "d10"]]
    assert rank_documents(scores, ids, 10) == [["d1", "d10", "d3", "d2", "d0"]]


def _example(seed: int = 0):
    rng = random.Random(seed)
    corpus_ids = [f"d{i}" for i in rng.sample(range(40), 25)]
    docs = {c: [rng.choice((-1, 0, 1, 2)) for _ in range(3)] for c in corpus_ids}
    queries = {f"q{i}": [rng.choice((0, 1, 2)) for _ in range(3)] for i in range(12)}
    qrels = {q: set(rng.sample(corpus_ids, rng.randint(1, 12))) for q in list(queries)[:11]}
    qrels["q0"].add("d999")  # relevant but not in the corpus
    return queries, docs, qrels


class _FixedVectors:
    """A stand-in model for the evaluator: each text's vector is given (so scores are exact)."""

    def __init__(self, vectors: dict[str, list[int]]):
        from types import SimpleNamespace

        self.vectors = vectors
        self.model_card_data = SimpleNamespace(set_evaluation_metrics=lambda *a: None)

    def _encode(self, sentences, **_):
        import torch

        return torch.tensor([self.vectors[s] for s in sentences], dtype=torch.float32)

    encode = encode_query = encode_document = _encode


def test_metrics_equal_sentence_transformers_information_retrieval_evaluator():
    pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.evaluation.information_retrieval import (
        InformationRetrievalEvaluator,
    )

    queries, docs, qrels = _example()
    evaluator = InformationRetrievalEvaluator(
        queries={q: q for q in queries}, corpus={c: c for c in docs}, relevant_docs=qrels, corpus_chunk_size=7,
        mrr_at_k=[10], ndcg_at_k=[10], accuracy_at_k=[1], precision_recall_at_k=[10, 100], map_at_k=[100],
        score_functions={"dot": lambda a, b: a @ b.T}, write_csv=False)
    theirs = evaluator(_FixedVectors({**queries, **docs}))
    corpus_ids = list(docs)
    scores = np.array(list(queries.values()), dtype=np.float32) @ np.array(list(docs.values()), dtype=np.float32).T
    rankings = dict(zip(queries, rank_documents(scores, corpus_ids, 100)))
    ours = retrieval_metrics(rankings, qrels)
    assert set(ours) == {"ndcg@10", "mrr@10", "recall@10", "recall@100", "map@100"}
    for name, value in ours.items():
        assert value == pytest.approx(theirs[f"dot_{name}"], abs=1e-12), (name, value, theirs[f"dot_{name}"])
    assert 0 < ours["ndcg@10"] < 1 and ours["recall@100"] < 1  # d999 is never found


def _squad(path: Path, articles: int) -> Path:
    data = [{"title": f"Article_{a}", "paragraphs": [
        {"context": f"paragraph {p} of article {a} about good film", "qas": [
            {"id": f"q{a}-{p}-{i}", "question": f"question {i} on {a} {p}",
             "answers": [{"text": "paragraph", "answer_start": 0}]}
            for i in range(2)]} for p in range(3)]} for a in range(articles)]
    path.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return path


def test_beir_squad_splits_articles_deterministically_and_reads_back(tmp_path):
    squad = _squad(tmp_path / "squad.json", 6)
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        counts = squad_to_beir(squad, tmp_path / name)
    assert counts == {"documents": 18, "queries": 36, "train": 18, "test": 18, "train_articles": 3,
                      "test_articles": 3, "seed": 0}
    for f in ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv"):
        assert (tmp_path / "one" / f).read_bytes() == (tmp_path / "two" / f).read_bytes()
    corpus, queries = read_corpus(tmp_path / "one" / "corpus.jsonl"), read_queries(tmp_path / "one" / "queries.jsonl")
    train, test = (read_qrels(tmp_path / "one" / "qrels" / f"{s}.tsv") for s in ("train", "test"))
    assert corpus["a001p002"] == "Article 1 paragraph 2 of article 1 about good film"
    assert len(queries) == 36 and set(train) | set(test) == set(queries) and not set(train) & set(test)
    articles = {split: {next(iter(docs))[:4] for docs in qrels.values()}
                for split, qrels in (("tr", train), ("te", test))}
    assert not articles["tr"] & articles["te"] and len(articles["tr"]) == 3  # whole articles on each side
    assert {**train, **test}["q1-2-0"] == {"a001p002"}
    from bertkit.data.squad import split_articles

    chosen = {t.removeprefix("Article_") for t in {e.title for e in split_articles(_examples(squad), 3, 0)[0]}}
    assert {f"a{int(a):03d}" for a in chosen} == articles["tr"]  # the draw of finetune --split-articles


def _examples(squad: Path):
    from bertkit.data.squad import read_squad

    return read_squad(squad)


def test_qrels_reader_refuses_bad_rows(tmp_path):
    bad = tmp_path / "q.tsv"
    bad.write_text("query-id\tcorpus-id\tscore\nq1\td1\n", encoding="utf-8")
    with pytest.raises(UserError, match=":2: expected 3 tab-separated columns"):
        read_qrels(bad)
    bad.write_text("q1\td1\t0\n", encoding="utf-8")
    with pytest.raises(UserError, match="no relevant"):
        read_qrels(bad)


def test_evaluate_retrieval_from_the_command_line(tiny_dir, tmp_path):
    squad = _squad(tmp_path / "squad.json", 4)
    done = subprocess.run([sys.executable, "-m", "bertkit.cli", "data", "beir-squad", "--squad", str(squad),
                           "--out", "beir"], check=False, cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}, timeout=120)
    assert done.returncode == 0 and "held-out from 2 (qrels/test.tsv)" in done.stdout, done.stderr
    beir = tmp_path / "beir"
    done = subprocess.run([sys.executable, "-m", "bertkit.cli", "evaluate", "--task", "retrieval", "--model",
                           str(tiny_dir), "--bm25", "--queries", str(beir / "queries.jsonl"), "--corpus",
                           str(beir / "corpus.jsonl"), "--qrels", str(beir / "qrels" / "test.tsv")], check=False,
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["queries"] == 12 and report["documents"] == 12 and set(report["results"]) == {"bm25", "dense"}
    for metrics in report["results"].values():
        assert 0 <= metrics["ndcg@10"] <= 1 and metrics["recall@100"] == 1.0  # 12 documents: all retrieved
    assert report["results"]["dense"]["pooling"] == "mean"
