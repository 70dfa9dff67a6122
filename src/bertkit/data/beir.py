"""Retrieval sets in BEIR's layout: reading them, and building one from SQuAD v1.1.

BEIR's layout (Thakur et al., 2021): `corpus.jsonl` ({"_id", "title", "text"} per line),
`queries.jsonl` ({"_id", "text"}), and `qrels/<split>.tsv` with a header and the columns
query-id, corpus-id, score. A qrels row with score > 0 marks the document relevant; relevance is
binary, as sentence-transformers' InformationRetrievalEvaluator treats it.

From SQuAD v1.1 (`squad_to_beir`): every paragraph is a document (its article's title in
`title`), every question a query whose one relevant document is its own paragraph. The articles
are split in two by the rule `bertkit finetune --task squad --split-articles K` uses (K titles
drawn with random.Random(seed).sample from the file's order): the questions of those articles
go to qrels/train.tsv, the others' to qrels/test.tsv (the held-out half). The corpus holds the
paragraphs of both halves, so a held-out question is searched among all of them.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from bertkit.errors import UserError


def _jsonl(path: Path, what: str):
    from bertkit.io import read_jsonl

    for number, row in read_jsonl(path):
        if "_id" not in row or not isinstance(row.get("text"), str):
            raise UserError(f'expected a {what} object with "_id" and a "text" string', path, number)
        yield number, row


def read_queries(path: str | os.PathLike) -> dict[str, str]:
    """queries.jsonl -> {query id: text}."""
    return {str(row["_id"]): row["text"] for _, row in _jsonl(Path(path), "query")}


def read_corpus(path: str | os.PathLike) -> dict[str, str]:
    """corpus.jsonl -> {document id: "title text"} (the title first, stripped, when there is one)."""
    out = {}
    for number, row in _jsonl(Path(path), "document"):
        pid = str(row["_id"])
        if pid in out:
            raise UserError(f"id {pid!r} appears twice", path, number)
        out[pid] = f"{row.get('title') or ''} {row['text']}".strip()
    return out


def read_qrels(path: str | os.PathLike) -> dict[str, set[str]]:
    """qrels TSV (query-id, corpus-id, score; a header line is skipped) -> {query id: relevant ids}."""
    from bertkit.io import read_lines

    out: dict[str, set[str]] = {}
    for number, line in enumerate(read_lines(path), start=1):
        cols = line.split("\t")
        if not line.strip() or (number == 1 and cols[0] == "query-id"):
            continue
        if len(cols) < 3:
            raise UserError(f"expected 3 tab-separated columns (query-id, corpus-id, score), found {len(cols)}",
                            path, number)
        try:
            score = float(cols[2])
        except ValueError:
            raise UserError(f"score must be a number, not {cols[2]!r}", path, number) from None
        if score > 0:
            out.setdefault(cols[0], set()).add(cols[1])
    if not out:
        raise UserError("no relevant (score > 0) query-document pairs", path)
    return out


def split_titles(titles: list[str], train_articles: int, seed: int = 0) -> set[str]:
    """The training half's titles: the draw of `bertkit finetune --split-articles` (data.squad)."""
    if not 0 < train_articles < len(titles):
        raise UserError(f"need 0 < training articles < {len(titles)}, got {train_articles}")
    return set(random.Random(seed).sample(titles, train_articles))


def squad_to_beir(squad: str | os.PathLike, out: str | os.PathLike, train_articles: int | None = None,
                  seed: int = 0) -> dict:
    """Write a BEIR folder from a SQuAD v1.1 file into `out` (which must exist); returns counts.
    `train_articles` defaults to half of the articles (rounded down)."""
    from bertkit.io import read_json

    data = read_json(squad, "a SQuAD JSON file").get("data")
    if not isinstance(data, list) or not data:
        raise UserError('no "data" list of articles: not a SQuAD v1.1 file', squad)
    titles = [a["title"] for a in data]
    train = split_titles(titles, len(titles) // 2 if train_articles is None else train_articles, seed)
    out = Path(out)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    counts = {"documents": 0, "queries": 0, "train": 0, "test": 0}
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as corpus, \
            open(out / "queries.jsonl", "w", encoding="utf-8") as queries, \
            open(out / "qrels" / "train.tsv", "w", encoding="utf-8") as qtrain, \
            open(out / "qrels" / "test.tsv", "w", encoding="utf-8") as qtest:
        for f in (qtrain, qtest):
            f.write("query-id\tcorpus-id\tscore\n")
        for a, article in enumerate(data):
            split = "train" if article["title"] in train else "test"
            for p, paragraph in enumerate(article["paragraphs"]):
                pid = f"a{a:03d}p{p:03d}"
                title = article["title"].replace("_", " ")
                corpus.write(json.dumps({"_id": pid, "title": title, "text": paragraph["context"]},
                                        ensure_ascii=False) + "\n")
                counts["documents"] += 1
                for qa in paragraph["qas"]:
                    queries.write(json.dumps({"_id": qa["id"], "text": qa["question"]}, ensure_ascii=False) + "\n")
                    (qtrain if split == "train" else qtest).write(f"{qa['id']}\t{pid}\t1\n")
                    counts["queries"] += 1
                    counts[split] += 1
    counts.update(train_articles=len(train), test_articles=len(titles) - len(train), seed=seed)
    return counts
