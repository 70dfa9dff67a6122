"""The data the issue-13 benchmarks build from ../shared: what they promise about held-out text.

bench/domain_adapt.py must never pretrain on the books its dev passages come from, and
bench/rerank_squad.py must draw its training rows (and their hard negatives) from the training
half of the SQuAD articles only; both are checked on the real files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import shared_path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def test_domain_task_holds_out_whole_books(tmp_path):
    books = shared_path("corpus", "gutenberg-authors")
    import domain_adapt

    counts = domain_adapt.build(tmp_path)
    assert counts["train"] == 8 * domain_adapt.TRAIN_PER_AUTHOR and counts["dev"] == 8 * domain_adapt.DEV_PER_AUTHOR
    corpus = (tmp_path / "corpus.txt").read_text(encoding="utf-8")
    rows = {name: [line.split("\t") for line in (tmp_path / name).read_text(encoding="utf-8").splitlines()[1:]]
            for name in ("train.tsv", "dev.tsv")}
    assert {label for _, label in rows["dev.tsv"]} == {a.split("_")[0] for a in domain_adapt.AUTHORS}
    assert all(text in corpus for text, _ in rows["train.tsv"][:50])  # training passages are in-domain text
    assert not any(text in corpus for text, _ in rows["dev.tsv"])  # the held-out books never are
    assert all(len(text.split()) <= domain_adapt.WORDS for text, _ in rows["dev.tsv"])
    held_out = set(counts["held_out_books"])
    assert held_out and all((books / b).exists() for b in held_out)


def test_reranker_rows_come_from_the_training_half(tmp_path):
    squad = shared_path("squad", "dev-v1.1.json")
    import rerank_squad
    from bertkit.data.beir import read_corpus, read_qrels, read_queries, squad_to_beir

    squad_to_beir(squad, tmp_path)
    queries, corpus = read_queries(tmp_path / "queries.jsonl"), read_corpus(tmp_path / "corpus.jsonl")
    train, test = read_qrels(tmp_path / "qrels" / "train.tsv"), read_qrels(tmp_path / "qrels" / "test.tsv")
    rows, dev = rerank_squad.training_rows(queries, corpus, train, 40, 0)
    assert len(rows) == 40 and len(dev) == 64
    train_texts = {corpus[d] for d in corpus if d[:4] in {x[:4] for docs in train.values() for x in docs}}
    test_texts = {corpus[d] for docs in test.values() for d in docs}
    for row in rows + dev:
        assert len(row["negatives"]) == rerank_squad.NEGATIVES
        assert row["positive"] not in row["negatives"]
        assert {row["positive"], *row["negatives"]} <= train_texts and not ({*row["negatives"]} & test_texts)
    assert len({r["query"] for r in rows + dev}) == len(rows) + len(dev)
    # spread: the hardest negatives stay, the rest come from lower down the same top 100
    wide, _ = rerank_squad.training_rows(queries, corpus, train, 40, 0, count=4, spread=2)
    top4, _ = rerank_squad.training_rows(queries, corpus, train, 40, 0, count=4)
    assert [r["negatives"][:2] for r in wide] == [r["negatives"][:2] for r in top4]
    assert sum(w["negatives"][2:] != t["negatives"][2:] for w, t in zip(wide, top4)) > 30
    assert all(len(set(r["negatives"])) == 4 and r["positive"] not in r["negatives"] for r in wide)


def test_reranker_paired_difference_counts_questions_that_rose_and_fell():
    import rerank_squad

    qrels = {"a": {"d1"}, "b": {"d2"}, "c": {"d3"}, "d": {"d4"}}
    before = {"a": ["d9", "d1"], "b": ["d2", "d9"], "c": ["d3", "d9", "d8"], "d": ["d4"]}
    after = {"a": ["d1", "d9"], "b": ["d9", "d2"], "c": ["d9", "d8", "d3"], "d": ["d4"]}  # a up, b and c down
    out = rerank_squad.paired_difference(before, after, qrels, resamples=500)
    assert (out["questions"], out["better"], out["worse"]) == (4, 1, 2)
    assert out["mean"] == pytest.approx(-0.5 / 4)  # a and b cancel (1 - 1/log2(3) each way); c loses 1 - 1/2
    low, high = out["interval_95"]
    assert -0.5 <= low < out["mean"] < high <= 0.37
