"""Tiny fine-tuning data in the official layouts (GLUE TSVs, CoNLL, SQuAD JSON) and CLI helpers,
shared by the fine-tuning tests. The tiny model itself is conftest's `tiny_dir` fixture."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from bertkit.cli import main as cli

GOOD = ["good", "great", "fine", "lovely", "superb", "nice"]
BAD = ["bad", "awful", "poor", "dull", "boring", "weak"]
NOUNS = ["movie", "film", "plot", "cast", "story", "show", "city", "river", "team", "paris", "berlin", "john", "mary"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
FILLER = ["the", "a", "was", "is", "very", "really", "in", "and", "of", "to", "what", "who", "where"]


def sentence(rng: random.Random, positive: bool) -> str:
    adjective = rng.choice(GOOD if positive else BAD)
    return f"the {rng.choice(NOUNS)} was {rng.choice(['very', 'really', 'a'])} {adjective} ."


def write_sst2(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    rows = [(s, int(p)) for p in (True, False) * (n // 2) for s in [sentence(rng, p)]]
    path.write_text("sentence\tlabel\n" + "".join(f"{s} \t{y}\n" for s, y in rows), encoding="utf-8")


def write_stsb(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    rows = []
    for i in range(n):
        a = sentence(rng, i % 2 == 0)
        b = a if i % 3 == 0 else sentence(rng, i % 4 < 2)
        rows.append(f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{a}\t{b}\t{rng.uniform(0, 5):.3f}\n")
    path.write_text(header + "".join(rows), encoding="utf-8")


def write_mrpc(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a = sentence(rng, True)
        b, y = (a, 1) if i % 2 else (sentence(rng, False), 0)
        rows.append(f"{y}\t{1000 + i}\t{2000 + i}\t{a}\t{b}\n")
    path.write_text("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + "".join(rows), encoding="utf-8")


def run_cli(*args: str) -> int:
    return cli([str(a) for a in args])


def finetune(tiny_dir: Path, out: Path, task: str, train: Path, dev: Path, *extra) -> dict:
    code = run_cli("finetune", "--model", tiny_dir, "--task", task, "--train", train, "--dev", dev, "--out", out,
                   "--epochs", "1", "--batch-size", "8", "--seeds", "1", "--no-progress", *extra)
    assert code == 0
    return json.loads((out / "results.json").read_text())


def evaluate(capsys, model: Path, task: str, data: Path, *extra) -> dict:
    capsys.readouterr()
    assert run_cli("evaluate", "--model", model, "--task", task, "--data", data, *extra) == 0
    return json.loads(capsys.readouterr().out)


def assert_same_metrics(results: dict, evaluated: dict) -> None:
    saved = next(r for r in results["seeds"] if r["seed"] == results["saved_seed"])["dev"]
    for key, value in saved.items():
        if isinstance(value, float):
            assert evaluated[key] == pytest.approx(value, abs=1e-6), key
        else:
            assert evaluated[key] == value, key


def write_conll(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    blocks = ["-DOCSTART- -X- -X- O\n"]
    for _ in range(n):
        who, where = rng.choice(["john", "mary"]), rng.choice(["paris", "berlin"])
        words = [(who, "B-PER"), ("was", "O"), ("in", "O"), (where, "B-LOC"), ("river", "I-LOC"), (".", "O")]
        blocks.append("".join(f"{w} NN O {t}\n" for w, t in words))
    path.write_text("\n".join(blocks), encoding="utf-8")


def write_squad(path: Path, articles: int, seed: int) -> None:
    rng = random.Random(seed)
    data = []
    for a in range(articles):
        paragraphs = []
        for _ in range(2):
            # ~60 words: longer than the 48-token windows, so answers fall in different windows.
            words = [rng.choice(NOUNS + FILLER) for _ in range(60)]
            context = " ".join(words) + " ."
            qas = []
            for q in range(3):
                i = rng.randrange(len(words))
                start = len(" ".join(words[:i])) + (1 if i else 0)
                qas.append({"id": f"a{a}-{len(paragraphs)}-{q}", "question": f"what is the {words[i]} ?",
                            "answers": [{"text": words[i], "answer_start": start}]})
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"article {a}", "paragraphs": paragraphs})
    path.write_text(json.dumps({"version": "1.1", "data": data}))
