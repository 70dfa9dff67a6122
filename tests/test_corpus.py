"""Corpus reading, sentence splitting and `bertkit prepare` end to end."""

from __future__ import annotations

import gzip
import json
import lzma
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.data import PretrainingDataset, check_tokenizer, read_documents, read_manifest, split_sentences
from bertkit.data.corpus import file_layout
from bertkit.errors import UserError
from bertkit.tokenizer import Tokenizer

WRAPPED = """\
It was a bright cold day in April, and the clocks were striking
thirteen. Winston Smith, his chin nuzzled into his breast, slipped
quickly through the glass doors.

Outside, even through the shut window-pane, the world looked cold.
Down in the street little eddies of wind were whirling dust.
"""

LONG = "This line is a whole paragraph and it goes on well past a hundred characters, as a Wikipedia paragraph does."


@pytest.mark.parametrize("case, expected", [
    ("Mr. Smith met Dr. Jones. They talked.", ["Mr. Smith met Dr. Jones.", "They talked."]),
    ("It costs 3.50 dollars. Pi is 3.14159 or so.", ["It costs 3.50 dollars.", "Pi is 3.14159 or so."]),
    ("Fruit, e.g. Apples, are good. I agree.", ["Fruit, e.g. Apples, are good.", "I agree."]),
    ("J. R. R. Tolkien wrote it. The U.S. Army read it.", ["J. R. R. Tolkien wrote it.", "The U.S. Army read it."]),
    ('"Stop!" she cried. "Why?" He left.', ['"Stop!" she cried.', '"Why?"', "He left."]),
    ("He said, \u201cI am done.\u201d Then he left.", ["He said, \u201cI am done.\u201d", "Then he left."]),
    ("Really? Yes! It is 2015. (See below.) Done", ["Really?", "Yes!", "It is 2015.", "(See below.)", "Done"]),
    ("lower. case does not split; no full stop", ["lower. case does not split; no full stop"]),
    ("See No. 5 and fig. 2. No. Said I. Then", ["See No. 5 and fig. 2.", "No.", "Said I.", "Then"]),
    ("", []),
])
def test_split_sentences(case, expected):
    assert split_sentences(case) == expected


def test_layouts(tmp_path):
    wrapped = tmp_path / "book.txt"
    wrapped.write_text(WRAPPED)
    assert list(read_documents(wrapped)) == [[
        "It was a bright cold day in April, and the clocks were striking thirteen.",
        "Winston Smith, his chin nuzzled into his breast, slipped quickly through the glass doors.",
        "Outside, even through the shut window-pane, the world looked cold.",
        "Down in the street little eddies of wind were whirling dust.",
    ]]
    wiki = tmp_path / "wiki.txt"
    wiki.write_text(f"Title One\n{LONG}\n{LONG} Second.\n\nTitle Two\n{LONG}\n\n\n")
    docs = list(read_documents(wiki))
    assert docs == [["Title One", LONG, LONG, "Second."], ["Title Two", LONG]]
    speech = tmp_path / "speech.txt"
    speech.write_text(f"{LONG}\n\n{LONG} Two.\n\n{LONG}\n")
    assert list(read_documents(speech)) == [[LONG, LONG, "Two.", LONG]]
    assert file_layout(WRAPPED.splitlines()) == "wrapped"


def test_compressed_and_jsonl(tmp_path):
    with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as f:
        f.write(WRAPPED)
    with lzma.open(tmp_path / "b.txt.xz", "wt", encoding="utf-8") as f:
        f.write(WRAPPED)
    assert list(read_documents(tmp_path / "a.txt.gz")) == list(read_documents(tmp_path / "b.txt.xz"))
    assert len(next(iter(read_documents(tmp_path / "a.txt.gz")))) == 4
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"text": "One doc. Two sentences."}) + "\n\n"
                     + json.dumps({"text": WRAPPED, "id": 3}) + "\n")
    docs = list(read_documents(jsonl))
    assert docs[0] == ["One doc.", "Two sentences."] and len(docs[1]) == 4
    jsonl.write_text('{"text": "fine."}\n{"title": "no text"}\n')
    with pytest.raises(UserError, match=r"c\.jsonl:2: expected a JSON object"):
        list(read_documents(jsonl))


def test_bad_utf8_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\nbad \xff byte\n")
    with pytest.raises(UserError, match=r"bad\.txt:2: not valid UTF-8"):
        list(read_documents(bad))


def _tiny_tokenizer_dir(tmp_path):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", ".", "a", "dog"]
    Tokenizer({w: i for i, w in enumerate(words)}).save_pretrained(tmp_path / "tiny-tok")
    return tmp_path / "tiny-tok"


def test_prepare_errors(tmp_path, capsys):
    tok = _tiny_tokenizer_dir(tmp_path)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the cat sat.\n\xfe\n")
    common = ["--tokenizer", str(tok), "--out", str(tmp_path / "out"), "--workers", "1"]
    assert main(["prepare", "--input", str(empty), str(bad), *common]) == 2
    err = capsys.readouterr().err
    assert "bad.txt:2: not valid UTF-8" in err and "skipped this file" in err
    assert "the input holds no text to prepare" in err
    assert not (tmp_path / "out").exists()
    assert main(["prepare", "--input", str(tmp_path / "missing.txt"), *common]) == 2
    assert "missing.txt: no such file or folder" in capsys.readouterr().err
    assert main(["prepare", "--input", str(empty), *common, "--max-seq-len", "4"]) == 2
    assert "--max-seq-len" in capsys.readouterr().err


def _corpus(folder):
    """A small mixed corpus: a wrapped book (.gz), wiki-style articles (.xz), JSONL documents."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    words = "the a cat dog sat ran over under quickly slowly house river big small old new".split()

    def sentence():
        return " ".join(rng.choice(words, rng.integers(4, 14))).capitalize() + "."

    book = "\n\n".join(textwrap.fill(" ".join(sentence() for _ in range(6)), width=70) for _ in range(40))
    with gzip.open(folder / "book.txt.gz", "wt", encoding="utf-8") as f:
        f.write(book)
    articles = "\n\n".join(f"Article {k}\n" + "\n".join(" ".join(sentence() for _ in range(9)) for _ in range(3))
                           for k in range(60))
    with lzma.open(folder / "wiki.txt.xz", "wt", encoding="utf-8") as f:
        f.write(articles)
    with open(folder / "docs.jsonl", "w", encoding="utf-8") as f:
        for _ in range(40):
            f.write(json.dumps({"text": " ".join(sentence() for _ in range(12))}) + "\n")
    (folder / "latin1.txt").write_bytes("caf\xe9 au lait.\n".encode("latin-1"))


def test_prepare_end_to_end(tmp_path, bert_vocab):
    tok_dir = tmp_path / "tok"
    Tokenizer.from_pretrained(bert_vocab.parent).save_pretrained(tok_dir)
    _corpus(tmp_path / "corpus")
    out = tmp_path / "data"
    cmd = [sys.executable, "-m", "bertkit.cli", "prepare", "--input", str(tmp_path / "corpus"), "--tokenizer",
           str(tok_dir), "--max-seq-len", "61", "--format", "nsp", "--out", str(out), "--val-fraction", "0.05",
           "--workers", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "latin1.txt:1: not valid UTF-8" in done.stderr
    manifest = read_manifest(out)
    assert manifest["format"] == "nsp" and manifest["max_seq_len"] == 61 and manifest["token_dtype"] == "uint16"
    assert manifest["corpus"]["documents"] == 1 + 60 + 40 and manifest["corpus"]["files"] == 4
    assert len(manifest["corpus"]["skipped_files"]) == 1
    splits = manifest["splits"]
    assert splits["val"]["documents"] == 5 and splits["train"]["documents"] == 96
    assert splits["train"]["tokens"] + splits["val"]["tokens"] == manifest["corpus"]["tokens"]
    assert (out / "tokenizer" / "vocab.txt").exists()

    train, val = PretrainingDataset(out, "train"), PretrainingDataset(out, "val")
    assert len(train) == splits["train"]["instances"] > 100 and len(val) == splits["val"]["instances"] > 0
    batch = train.batch(np.arange(len(train)))
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    assert ids.shape == (len(train), 61)
    assert (ids[:, 0] == 101).all() and ((ids == 102) & (mask == 1)).sum(dim=1).eq(2).all()
    assert ((ids == 0) == (mask == 0)).all()
    assert abs(batch["next_sentence_label"].float().mean().item() - 0.5) < 0.1
    assert (types[mask == 0] == 0).all() and (types.sum(dim=1) > 0).all()

    check_tokenizer(out, Tokenizer.from_pretrained(tok_dir))
    with pytest.raises(UserError, match=manifest["tokenizer_fingerprint"]):
        check_tokenizer(out, Tokenizer.from_pretrained(_tiny_tokenizer_dir(tmp_path)))


def test_prepare_packed_in_process(tmp_path, bert_vocab):
    _corpus(tmp_path / "corpus")
    out = tmp_path / "packed"
    assert main(["prepare", "--input", str(tmp_path / "corpus" / "docs.jsonl"), "--tokenizer", str(bert_vocab.parent),
                 "--max-seq-len", "37", "--format", "packed", "--out", str(out), "--workers", "1"]) == 0
    data = PretrainingDataset(out)
    batch = data.batch(np.arange(len(data)))
    assert "next_sentence_label" not in batch and (batch["token_type_ids"] == 0).all()
    assert (batch["attention_mask"].sum(dim=1) <= 37).all()
    assert read_manifest(out)["splits"]["val"]["documents"] == 1  # 1% of 40, at least one


def test_not_text_rule(tmp_path):
    """One rule for every reader (bertkit.io.check_text): UTF-8, no NUL byte, at most 5% control
    characters in the first 64 KiB; prepare and tokenizer train skip other files, every reader refuses them."""
    from bertkit.io import SNIFF_BYTES, check_text, read_lines, text_files

    def check(name: str, data: bytes) -> str | None:
        (tmp_path / name).write_bytes(data)
        try:
            check_text(tmp_path / name)
        except UserError as e:
            return str(e).removeprefix(f"{tmp_path / name}")
        return None

    assert check("ok.txt", "caf\u00e9 \u4e2d\u6587\tpage\x0cbreak\r\n".encode() * 100) is None
    assert check("few.txt", b"text with one escape \x1b[0m in it\n" * 10) is None  # 1 in 34 characters
    assert check("nul.txt", b"line one\nline\0 two\n") == ":2: not text: holds NUL bytes (a binary file?)"
    assert check("zeros.txt", b"\0" * 1000) == ":1: not text: holds NUL bytes (a binary file?)"
    assert check("ctl.txt", bytes(range(1, 9)) * 100) == (": not text: 800 of its first 800 characters are "
                                                          "control characters")
    assert check("latin1.txt", "fine\ncaf\xe9\n".encode("latin-1")) == ":2: not valid UTF-8 (byte 3)"
    # A character cut by the end of the 64 KiB head is no error; one at the end of a file is.
    assert check("cut.txt", b"a" * (SNIFF_BYTES - 1) + "\u00e9 more".encode()) is None
    assert check("end.txt", b"abc\xc3") == ":1: not valid UTF-8 (byte 3)"
    with gzip.open(tmp_path / "nul.txt.gz", "wb") as f:  # judged after decompression
        f.write(b"\0" * 100)
    gzipped = (tmp_path / "nul.txt.gz").read_bytes()
    assert check("nul.txt.gz", gzipped) == ":1: not text: holds NUL bytes (a binary file?)"
    with pytest.raises(UserError, match=re.escape("zeros.txt:1: not text")):
        list(read_lines(tmp_path / "zeros.txt"))
    (tmp_path / "empty.txt").write_text("")
    kept, skipped = text_files([tmp_path / n for n in ("ok.txt", "zeros.txt", "empty.txt", "ctl.txt")])
    assert kept == [tmp_path / "ok.txt"] and len(skipped) == 2 and skipped[0].endswith("; skipped this file")
    with pytest.raises(UserError, match=re.escape("zeros.txt:1: not text")):
        text_files([tmp_path / "zeros.txt", tmp_path / "ctl.txt"])
    with pytest.raises(UserError, match=re.escape("empty.txt: empty file")):
        text_files([tmp_path / "empty.txt"])


def test_prepare_and_tokenizer_skip_what_is_not_text_alike_and_overwrite_only_when_asked(tmp_path, capsys):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("The cat sat on the mat. The dog ran far away.\n" * 40)
    (tmp_path / "corpus" / "zeros.txt").write_bytes(b"\0" * 5000)
    vocab = ["tokenizer", "train", "--input", str(tmp_path / "corpus"), "--out", str(tmp_path / "tok"),
             "--vocab-size", "40"]
    assert main(vocab) == 0
    warning = f"{tmp_path / 'corpus' / 'zeros.txt'}:1: not text: holds NUL bytes (a binary file?); skipped this file"
    assert capsys.readouterr().err == f"warning: {warning}\n"
    prepare = ["prepare", "--input", str(tmp_path / "corpus"), "--tokenizer", str(tmp_path / "tok"), "--out",
               str(tmp_path / "data"), "--workers", "1", "--max-seq-len", "16"]
    assert main(prepare) == 0
    assert f"bertkit prepare: warning: {warning}\n" in capsys.readouterr().err
    manifest = read_manifest(tmp_path / "data")
    assert manifest["corpus"]["files"] == 2 and manifest["corpus"]["skipped_files"] == [warning]
    for argv, what in ((vocab, "vocabulary"), (prepare, "prepared data folder")):
        assert main([*argv[:-1], "24"]) == 2  # another --vocab-size / --max-seq-len
        assert f"holds a previous {what}; pass --overwrite" in capsys.readouterr().err
    assert len(Tokenizer.from_pretrained(tmp_path / "tok")) == 40 and read_manifest(tmp_path / "data") == manifest
    assert main([*vocab[:-1], "35", "--overwrite"]) == 0
    assert main([*prepare[:-1], "24", "--overwrite"]) == 0
    assert len(Tokenizer.from_pretrained(tmp_path / "tok")) == 35
    assert read_manifest(tmp_path / "data")["max_seq_len"] == 24
