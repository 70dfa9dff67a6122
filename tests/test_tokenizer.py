"""WordPiece tokenizer: exact tokens, ids, offsets and type ids on the bert-base-uncased vocabulary,
save/load round trips readable by transformers, casing, and vocabulary training.

Every expected value below was computed once, checked by hand against BERT's rules (clean control
characters, split CJK, lower-case and strip accents, split punctuation, greedy longest-match
WordPiece, [UNK] for words over 100 characters) and against transformers' BertTokenizerFast, then
written down literally so a change in any layer of the pipeline shows up here.
"""

from __future__ import annotations

import gzip
import json
import lzma
import random
import re
import subprocess
import sys

import pytest

from bertkit.errors import UserError
from bertkit.tokenizer import SPECIAL_TOKENS, Tokenizer

# text -> (tokens, ids, offsets, word_ids); all single texts, so type ids are all 0.
SINGLE_CASES = {
    # uncased: lower-cased and accents stripped (NFD, drop combining marks)
    "Café naïve résumé": (
        ["[CLS]", "cafe", "naive", "resume", "[SEP]"],
        [101, 7668, 15743, 13746, 102],
        [(0, 0), (0, 4), (5, 10), (11, 17), (0, 0)],
        [None, 0, 1, 2, None],
    ),
    # every CJK ideograph is its own word, with or without spaces; 爱 and 门 are not in the vocab
    "我爱北京 天安门": (
        ["[CLS]", "我", "[UNK]", "北", "京", "天", "安", "[UNK]", "[SEP]"],
        [101, 1855, 100, 1781, 1755, 1811, 1820, 100, 102],
        [(0, 0), (0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (6, 7), (7, 8), (0, 0)],
        [None, 0, 1, 2, 3, 4, 5, 6, None],
    ),
    # zero-width space (a format character) and NUL are deleted, joining "abc"; tab and newline split
    "a\u200bb\x00c\td\ne": (
        ["[CLS]", "abc", "d", "e", "[SEP]"],
        [101, 5925, 1040, 1041, 102],
        [(0, 0), (0, 5), (6, 7), (8, 9), (0, 0)],
        [None, 0, 1, 2, None],
    ),
    # each punctuation character is a word of its own
    "Hello, world! (U.S.A.) -- it's $5.00?": (
        ["[CLS]", "hello", ",", "world", "!", "(", "u", ".", "s", ".", "a", ".", ")", "-", "-",
         "it", "'", "s", "$", "5", ".", "00", "?", "[SEP]"],
        [101, 7592, 1010, 2088, 999, 1006, 1057, 1012, 1055, 1012, 1037, 1012, 1007, 1011, 1011,
         2009, 1005, 1055, 1002, 1019, 1012, 4002, 1029, 102],
        [(0, 0), (0, 5), (5, 6), (7, 12), (12, 13), (14, 15), (15, 16), (16, 17), (17, 18), (18, 19),
         (19, 20), (20, 21), (21, 22), (23, 24), (24, 25), (26, 28), (28, 29), (29, 30), (31, 32),
         (32, 33), (33, 34), (34, 36), (36, 37), (0, 0)],
        [None] + list(range(22)) + [None],
    ),
    # greedy longest match with ## continuations; word_ids tie the pieces to their word
    "unbelievably tokenization": (
        ["[CLS]", "un", "##bel", "##ie", "##va", "##bly", "token", "##ization", "[SEP]"],
        [101, 4895, 8671, 2666, 3567, 6321, 19204, 3989, 102],
        [(0, 0), (0, 2), (2, 5), (5, 7), (7, 9), (9, 12), (13, 18), (18, 25), (0, 0)],
        [None, 0, 0, 0, 0, 0, 1, 1, None],
    ),
    # a word over 100 characters is one [UNK] spanning the whole word
    "x" * 250: (["[CLS]", "[UNK]", "[SEP]"], [101, 100, 102], [(0, 0), (0, 250), (0, 0)], [None, 0, None]),
    "": (["[CLS]", "[SEP]"], [101, 102], [(0, 0), (0, 0)], [None, None]),
}


@pytest.fixture(scope="module")
def uncased(bert_vocab) -> Tokenizer:
    return Tokenizer.from_pretrained(bert_vocab.parent)


@pytest.fixture(scope="module")
def hf_uncased(bert_vocab):
    transformers = pytest.importorskip("transformers")
    return transformers.BertTokenizerFast.from_pretrained(str(bert_vocab.parent))


@pytest.mark.parametrize("text", list(SINGLE_CASES),
                         ids=["accents", "cjk", "control", "punct", "wordpiece", "long", "empty"])
def test_single_text_exact(uncased, text):
    tokens, ids, offsets, word_ids = SINGLE_CASES[text]
    e = uncased.encode(text)
    assert e.tokens == tokens
    assert e.ids == ids
    assert e.offsets == offsets
    assert e.word_ids == word_ids
    assert e.type_ids == [0] * len(ids)
    assert e.attention_mask == [1] * len(ids)
    assert uncased.convert_ids_to_tokens(ids) == tokens


def test_special_ids(uncased):
    assert (uncased.pad_id, uncased.unk_id, uncased.cls_id, uncased.sep_id, uncased.mask_id) == (0, 100, 101, 102, 103)
    assert uncased.special_ids == [0, 100, 101, 102, 103]
    assert len(uncased) == 30522


def test_pair_type_ids_and_offsets(uncased):
    e = uncased.encode("The cat sat.", "On the mat!")
    assert e.tokens == ["[CLS]", "the", "cat", "sat", ".", "[SEP]", "on", "the", "mat", "!", "[SEP]"]
    assert e.ids == [101, 1996, 4937, 2938, 1012, 102, 2006, 1996, 13523, 999, 102]
    assert e.type_ids == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    # offsets index into each text separately
    assert e.offsets == [(0, 0), (0, 3), (4, 7), (8, 11), (11, 12), (0, 0), (0, 2), (3, 6), (7, 10), (10, 11), (0, 0)]
    assert e.sequence_ids == [None, 0, 0, 0, 0, None, 1, 1, 1, 1, None]


@pytest.mark.parametrize("max_length, kept_a, kept_b", [
    (9, ["one", "two", "three"], ["alpha", "beta", "gamma"]),
    # one token to cut from an even split: BERT's rule pops from B on a tie
    (10, ["one", "two", "three", "four"], ["alpha", "beta", "gamma"]),
    (11, ["one", "two", "three", "four"], ["alpha", "beta", "gamma", "delta"]),
    # the longer text alone is cut while it is longer
    (13, ["one", "two", "three", "four", "five"], ["alpha", "beta", "gamma", "delta", "epsilon"]),
])
def test_pair_longest_first_truncation(uncased, max_length, kept_a, kept_b):
    e = uncased.encode("one two three four five six seven", "alpha beta gamma delta epsilon", max_length=max_length)
    assert e.tokens == ["[CLS]", *kept_a, "[SEP]", *kept_b, "[SEP]"]
    assert len(e) == max_length
    assert e.type_ids == [0] * (len(kept_a) + 2) + [1] * (len(kept_b) + 1)


def test_pair_truncation_keeps_short_text_whole(uncased):
    e = uncased.encode("one two three four five six seven", "alpha beta", max_length=9)
    assert e.ids == [101, 2028, 2048, 2093, 2176, 102, 6541, 8247, 102]
    assert e.type_ids == [0, 0, 0, 0, 0, 0, 1, 1, 1]


def test_single_truncation(uncased):
    e = uncased.encode("one two three four five six seven", max_length=5)
    assert e.ids == [101, 2028, 2048, 2093, 102]


def test_padding_to_max_length(uncased):
    e = uncased.encode("hi there", max_length=7, padding="max_length")
    assert e.tokens == ["[CLS]", "hi", "there", "[SEP]", "[PAD]", "[PAD]", "[PAD]"]
    assert e.ids == [101, 7632, 2045, 102, 0, 0, 0]
    assert e.attention_mask == [1, 1, 1, 1, 0, 0, 0]
    assert e.type_ids == [0] * 7
    assert e.offsets == [(0, 0), (0, 2), (3, 8)] + [(0, 0)] * 4
    assert e.word_ids == [None, 0, 1, None, None, None, None]


def test_batch_padding_to_longest_then_plain_encode_unpadded(uncased):
    batch = uncased.encode_batch(["a", "a b c"], padding=True)
    assert [b.ids for b in batch] == [[101, 1037, 102, 0, 0], [101, 1037, 1038, 1039, 102]]
    # settings of one call must not leak into the next
    assert uncased.encode("a").ids == [101, 1037, 102]


def test_matches_transformers(uncased, hf_uncased):
    texts = list(SINGLE_CASES)
    for text in texts:
        theirs = hf_uncased(text, return_offsets_mapping=True)
        ours = uncased.encode(text)
        assert ours.ids == theirs["input_ids"], text
        assert ours.offsets == [tuple(o) for o in theirs["offset_mapping"]], text
    theirs = hf_uncased("one two three four five six seven", "alpha beta gamma delta epsilon",
                        max_length=10, truncation="longest_first")
    ours = uncased.encode("one two three four five six seven", "alpha beta gamma delta epsilon", max_length=10)
    assert (ours.ids, ours.type_ids) == (theirs["input_ids"], theirs["token_type_ids"])


def test_save_load_round_trip_and_transformers_reads_it(uncased, tmp_path):
    transformers = pytest.importorskip("transformers")
    uncased.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"vocab.txt", "tokenizer.json", "tokenizer_config.json"}
    again = Tokenizer.from_pretrained(tmp_path)
    assert again.vocab == uncased.vocab
    assert again.lowercase is True
    assert again.fingerprint == uncased.fingerprint
    hf = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
    for text in SINGLE_CASES:
        assert again.encode(text).ids == uncased.encode(text).ids == hf(text)["input_ids"], text


def test_cased_keeps_case_and_accents(tmp_path):
    transformers = pytest.importorskip("transformers")
    words = ["Café", "café", "cafe", "Hello", "hello", "naïve", "naive", ",", "##s"]
    vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, *words])}
    cased = Tokenizer(vocab, lowercase=False)
    e = cased.encode("Hello Café, naïve hellos")
    assert e.tokens == ["[CLS]", "Hello", "Café", ",", "naïve", "hello", "##s", "[SEP]"]
    assert e.ids == [2, 8, 5, 12, 10, 9, 13, 3]
    cased.save_pretrained(tmp_path)
    again = Tokenizer.from_pretrained(tmp_path)
    assert again.lowercase is False
    assert again.fingerprint == cased.fingerprint != Tokenizer(vocab, lowercase=True).fingerprint
    hf = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
    assert hf("Hello Café, naïve hellos")["input_ids"] == e.ids
    # the same vocabulary uncased folds both words onto their plain forms
    assert Tokenizer(vocab, lowercase=True).encode("Hello Café").tokens == ["[CLS]", "hello", "cafe", "[SEP]"]


def _write_corpus(folder) -> list:
    rng = random.Random(7)
    stems = ["walk", "talk", "play", "jump", "read", "writ", "sing", "think", "build", "dream"]
    endings = ["", "s", "ed", "ing", "er", "ers"]
    lines = [" ".join(rng.choice(stems) + rng.choice(endings) for _ in range(9)) + "." for _ in range(300)]
    plain, gz, xz = folder / "a.txt", folder / "b.txt.gz", folder / "c.txt.xz"
    plain.write_text("\n".join(lines[:100]) + "\n", encoding="utf-8")
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines[100:200]) + "\n")
    with lzma.open(xz, "wt", encoding="utf-8") as f:
        f.write("Ünïcödé Straße\n" + "\n".join(lines[200:]) + "\n")
    return [plain, gz, xz]


def test_train_tiny_vocabulary(tmp_path):
    files = _write_corpus(tmp_path)
    tok = Tokenizer.train(files, vocab_size=99, show_progress=False)
    ordered = sorted(tok.vocab, key=tok.vocab.get)
    assert ordered[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert len(tok) == 99
    assert sorted(tok.vocab.values()) == list(range(99))
    assert any(t.startswith("##") for t in tok.vocab)
    # the .xz file was read: its (lower-cased, accent-stripped) letters are in the alphabet
    assert "u" in tok.vocab and "ß" in tok.vocab and "Ü" not in tok.vocab
    e = tok.encode("walking talkers")
    assert e.ids[0] == 2 and e.ids[-1] == 3 and 1 not in e.ids
    assert tok.decode(e.ids) == "walking talkers"


def test_train_folder_and_empty_corpus(tmp_path):
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    with pytest.raises(UserError, match="no text"):
        Tokenizer.train([tmp_path / "empty.txt"], vocab_size=99, show_progress=False)
    with pytest.raises(UserError, match="no such file"):
        Tokenizer.train([tmp_path / "missing.txt"], vocab_size=99, show_progress=False)


# ---- the command line, as a user types it ----

def _bertkit(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bertkit.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_cli_tokenizer_train_and_tokenize(bert_vocab, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    plain, gz, xz = _write_corpus(corpus)
    (corpus / "notes.md").write_text("not a corpus file", encoding="utf-8")
    out = tmp_path / "tok"
    # all three at once: each run spends most of its time importing torch
    train = _bertkit("tokenizer", "train", "--input", str(corpus), "--vocab-size", "99", "--out", str(out))
    table = _bertkit("tokenize", "--model", str(bert_vocab.parent), "The cat sat.", "On the mat!")
    as_json = _bertkit("tokenize", "--model", str(bert_vocab.parent), "Café naïve résumé", "--json")

    stdout, stderr = table.communicate(timeout=300)
    assert table.returncode == 0, stderr
    rows = [line.split() for line in stdout.splitlines()]
    assert rows[0] == ["#", "token", "id", "type", "offsets", "text"]
    assert rows[1] == ["0", "[CLS]", "101", "0"]
    assert rows[3] == ["2", "cat", "4937", "0", "4-7", "cat"]
    assert rows[7] == ["6", "on", "2006", "1", "0-2", "On"]
    assert stdout.splitlines()[-1] == "11 tokens; ids: 101 1996 4937 2938 1012 102 2006 1996 13523 999 102"

    stdout, stderr = as_json.communicate(timeout=300)
    assert as_json.returncode == 0, stderr
    assert json.loads(stdout) == {
        "tokens": ["[CLS]", "cafe", "naive", "resume", "[SEP]"], "ids": [101, 7668, 15743, 13746, 102],
        "type_ids": [0, 0, 0, 0, 0], "offsets": [[0, 0], [0, 4], [5, 10], [11, 17], [0, 0]],
        "word_ids": [None, 0, 1, 2, None],
    }

    stdout, stderr = train.communicate(timeout=300)
    assert train.returncode == 0, stderr
    assert "on 3 file(s)" in stdout and f"vocabulary of 99 entries written to {out}" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    trained = Tokenizer.from_pretrained(out)
    assert len(trained) == 99 and trained.lowercase is True
    # the folder's files, named one by one in another process: the same vocabulary, id for id
    again = Tokenizer.train([plain, gz, xz], vocab_size=99, show_progress=False)
    assert trained.vocab == again.vocab


def test_cli_errors_are_one_line(tmp_path, capsys):
    from bertkit.cli import main

    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    cases = [
        (["tokenizer", "train", "--input", str(tmp_path / "empty.txt"), "--vocab-size", "99", "--out",
          str(tmp_path / "tok")], "empty.txt: empty file"),
        (["tokenizer", "train", "--input", str(tmp_path / "missing"), "--vocab-size", "99", "--out",
          str(tmp_path / "tok")], "missing: no such file or folder"),
        (["tokenizer", "train", "--input", str(tmp_path), "--vocab-size", "5", "--out", str(tmp_path / "tok")],
         "argument --vocab-size: must be at least 6"),
        (["tokenize", "--model", str(tmp_path), "hello"], "no vocab.txt"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "tok").exists()


def test_a_folder_with_only_tokenizer_json_loads_the_same_tokenizer(tmp_path):
    """sentence-transformers >= 6 saves tokenizer.json without vocab.txt."""
    tok = Tokenizer({t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world",
                                                  "##s"])}, lowercase=False)
    tok.save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").unlink()
    (tmp_path / "tokenizer_config.json").unlink()
    again = Tokenizer.from_pretrained(tmp_path)
    assert again.vocab == tok.vocab and again.lowercase is False
    assert again.encode("hello worlds").ids == tok.encode("hello worlds").ids
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {}}}', encoding="utf-8")
    with pytest.raises(UserError, match=re.escape("tokenizer.json: not a WordPiece tokenizer")):
        Tokenizer.from_pretrained(tmp_path)
