"""Our tokenizer against transformers' BertTokenizerFast on every line of the GLUE train and dev
files: identical ids, type ids and offsets for all ~92,000 single sentences and pairs.

Each task's TSV layout is read as it is (no header in CoLA, a byte-order mark before MRPC's dev
header, the STS-B sentences in columns 7 and 8), splitting on tabs only: MRPC's strings hold
bare quote characters that a CSV reader would swallow.
"""

from __future__ import annotations

import pytest

from bertkit.tokenizer import Tokenizer
from conftest import shared_path

# task -> (has header, column of text A, column of text B or None)
LAYOUTS = {
    "CoLA": (False, 3, None),
    "SST-2": (True, 0, None),
    "MRPC": (True, 3, 4),
    "STS-B": (True, 7, 8),
    "RTE": (True, 1, 2),
}

# data lines per file, from the GLUE release notes in ../shared/data/README.md (not from parsing)
LINES = {
    ("CoLA", "train"): 8551, ("CoLA", "dev"): 1043,
    ("SST-2", "train"): 67349, ("SST-2", "dev"): 872,
    ("MRPC", "train"): 3668, ("MRPC", "dev"): 408,
    ("STS-B", "train"): 5749, ("STS-B", "dev"): 1500,
    ("RTE", "train"): 2490, ("RTE", "dev"): 277,
}

CHUNK = 4096


def _read(task: str, split: str) -> tuple[list[str], list[str] | None]:
    has_header, col_a, col_b = LAYOUTS[task]
    text = shared_path("glue", task, f"{split}.tsv").read_text(encoding="utf-8")
    rows = [line.split("\t") for line in text.split("\n") if line]
    if has_header:
        header = rows.pop(0)
        if task == "STS-B":
            assert (header[col_a], header[col_b]) == ("sentence1", "sentence2")
    texts = [r[col_a] for r in rows]
    pairs = [r[col_b] for r in rows] if col_b is not None else None
    return texts, pairs


@pytest.fixture(scope="module")
def tokenizers_pair(bert_vocab):
    transformers = pytest.importorskip("transformers")
    ours = Tokenizer.from_pretrained(bert_vocab.parent)
    theirs = transformers.BertTokenizerFast.from_pretrained(str(bert_vocab.parent)).backend_tokenizer
    theirs.no_truncation()
    theirs.no_padding()
    return ours, theirs


@pytest.mark.parametrize("task", list(LAYOUTS))
def test_glue_tokenization_identical(tokenizers_pair, task):
    ours, theirs = tokenizers_pair
    for split in ("train", "dev"):
        texts, pairs = _read(task, split)
        compared = 0
        for start in range(0, len(texts), CHUNK):
            a = texts[start:start + CHUNK]
            b = pairs[start:start + CHUNK] if pairs is not None else None
            mine = [(e.ids, e.type_ids, e.offsets) for e in ours.encode_batch(a, b, truncation=False)]
            ref = [(e.ids, e.type_ids, e.offsets) for e in theirs.encode_batch(list(zip(a, b)) if b else a)]
            assert len(mine) == len(ref) == len(a)
            if mine != ref:
                i = next(i for i, (m, r) in enumerate(zip(mine, ref)) if m != r)
                pytest.fail(f"{task}/{split} data line {start + i + 1}: (ids, type ids, offsets) differ\n"
                            f"ours   {mine[i]}\ntheirs {ref[i]}")
            compared += len(mine)
            if b is not None:
                assert any(1 in type_ids for _, type_ids, _ in mine)
        assert compared == LINES[task, split]
