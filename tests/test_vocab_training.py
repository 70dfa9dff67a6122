"""Vocabulary training (bertkit.wordpiece): the same input gives the same vocab.txt on every run,
ties are broken by the documented order, incremental merging agrees with a naive recount, words
are counted exactly as the encoding pipeline cuts them, and a file that is not text is refused."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import random
import subprocess
import sys
from collections import Counter

import pytest

from bertkit.tokenizer import SPECIAL_TOKENS, Tokenizer, _pipeline
from bertkit.wordpiece import (
    PREFIX,
    alphabet,
    count_pieces,
    learn_vocabulary,
    words_from_pieces,
)

# sha256 of vocab.txt trained from _tie_corpus() at 300 entries. A run on another machine, or
# after a change to the trainer, that gives another vocabulary shows up here.
TIE_CORPUS_VOCAB_SHA256 = "62af249a2bc4ba8bb27f7da136ae79b9b811452a164cd89e30e77511b1143ae2"


def _tie_corpus() -> str:
    """Made-up words from few syllables at few, equal-ish counts: many pairs tie. The tokenizers
    trainer gave 5 different vocab.txt files in 5 runs on this text at 300 entries (the same
    tokens, numbered differently: a model trained with one reads garbage with another)."""
    rng = random.Random(16)
    syllables = ["ka", "ro", "mi", "tu", "ne", "sa", "lo", "pe", "di", "vu", "zo", "ha"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    lines = [" ".join(rng.choice(words) for _ in range(12)) + rng.choice([".", ",", "!", "?"])
             for _ in range(600)]
    return "\n".join(lines) + "\n"


def _bertkit(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bertkit.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_cli_runs_give_byte_identical_files(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(_tie_corpus(), encoding="utf-8")
    outs = [tmp_path / "one", tmp_path / "two"]
    # both at once: each spends most of its time starting up
    runs = [_bertkit("tokenizer", "train", "--input", str(corpus), "--vocab-size", "300", "--out", str(o))
            for o in outs]
    for run in runs:
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    vocab = (outs[0] / "vocab.txt").read_bytes()
    assert vocab.decode().split("\n")[:5] == list(SPECIAL_TOKENS)
    assert hashlib.sha256(vocab).hexdigest() == TIE_CORPUS_VOCAB_SHA256


def test_cli_refuses_a_binary_file_in_one_line(tmp_path):
    binary, mixed = tmp_path / "binary", tmp_path / "mixed"
    for folder in (binary, mixed):
        folder.mkdir()
        blob = random.Random(0).randbytes(200_000)  # the issue's case: 200 KB that is not text
        (folder / "photo.txt").write_bytes(blob)
        with gzip.open(folder / "packed.txt.gz", "wb") as f:  # binary once decompressed
            f.write(blob)
    (mixed / "good.txt").write_text("plain text, " * 100 + "\n", encoding="utf-8")
    # at once: each spends most of its time starting up
    cases = [(binary / "photo.txt", "photo.txt"), (binary, "packed.txt.gz"), (mixed, "")]
    runs = [_bertkit("tokenizer", "train", "--input", str(target), "--vocab-size", "99",
                     "--out", str(tmp_path / f"tok-{i}")) for i, (target, _) in enumerate(cases)]
    for (_, named), run in zip(cases, runs):
        _, stderr = run.communicate(timeout=300)
        lines = stderr.splitlines()
        if named:  # nothing left to learn from: refused, one line naming the file
            assert run.returncode == 2 and len(lines) == 1, stderr
            assert lines[0].startswith("bertkit tokenizer: error: ") and named in lines[0], stderr
            assert "not valid UTF-8" in lines[0] and "Traceback" not in stderr, stderr
        else:  # as `bertkit prepare` does: the rest is used, each binary file named in a warning
            assert run.returncode == 0, stderr
            assert len(lines) == 2 and all("not valid UTF-8" in line and "skipped" in line for line in lines), stderr
            assert {line.split(":")[1].rsplit("/", 1)[-1] for line in lines} == {"packed.txt.gz", "photo.txt"}
    assert not (tmp_path / "tok-0").exists() and not (tmp_path / "tok-1").exists()
    assert Tokenizer.from_pretrained(tmp_path / "tok-2").tokenize("plain text") == ["plain", "text"]


def test_ties_break_by_count_then_strings():
    base = len(SPECIAL_TOKENS) + 6 + 3  # alphabet a-f, pieces ##b ##d ##f
    for counts in ({"ab": 3, "cd": 3, "ef": 2}, {"ef": 2, "cd": 3, "ab": 3}):
        vocab = learn_vocabulary(counts, base + 1, SPECIAL_TOKENS)
        assert vocab[len(SPECIAL_TOKENS):] == [*"abcdef", "##b", "##d", "##f", "ab"], counts
    assert learn_vocabulary({"ab": 3, "cd": 3, "ef": 2}, base + 3, SPECIAL_TOKENS)[base:] == ["ab", "cd", "ef"]
    # equal character counts: the lower code point stays when the alphabet is cut
    assert alphabet({"q": 5, "z": 1, "y": 1, "x": 1}, limit=2) == ["q", "x"]


def _naive_vocabulary(word_counts: dict[str, int], vocab_size: int, min_frequency: int) -> list[str]:
    """Reference: recount every pair after every merge."""
    vocab = list(SPECIAL_TOKENS) + sorted({ch for w in word_counts for ch in w})
    words = {w: [w[0]] + [PREFIX + ch for ch in w[1:]] for w in word_counts if len(w) > 1}
    vocab += sorted({s for pieces in words.values() for s in pieces[1:]})
    while len(vocab) < vocab_size:
        pairs: Counter = Counter()
        for w, pieces in words.items():
            for pair in itertools.pairwise(pieces):
                pairs[pair] += word_counts[w]
        if not pairs:
            break
        (left, right), n = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if n < min_frequency:
            break
        token = left + right[len(PREFIX):]
        if token not in vocab:
            vocab.append(token)
        for pieces in words.values():
            j = 0
            while j < len(pieces) - 1:
                if (pieces[j], pieces[j + 1]) == (left, right):
                    pieces[j:j + 2] = [token]
                j += 1
    return vocab


@pytest.mark.parametrize("seed", range(4))
def test_incremental_merges_match_a_naive_recount(seed):
    rng = random.Random(seed)
    # few letters, so runs ("aaaa", "abab") and pieces made twice by different merges occur
    words = {"".join(rng.choice("aab") for _ in range(rng.randint(1, 9))) for _ in range(60)}
    words |= {"".join(rng.choice("abcde") for _ in range(rng.randint(1, 7))) for _ in range(60)}
    counts = {w: rng.randint(1, 6) for w in sorted(words)}
    for size, min_frequency in ((60, 2), (400, 1)):
        expected = _naive_vocabulary(counts, size, min_frequency)
        assert learn_vocabulary(counts, size, SPECIAL_TOKENS, min_frequency=min_frequency) == expected


@pytest.mark.parametrize("lowercase", [True, False])
def test_words_are_counted_as_the_pipeline_cuts_lines(lowercase):
    lines = [
        "Café NAÏVE résumé, Hello-World! 3.14 and x86_64",
        "  double  spaces\tand\ttabs\u00a0no-break\u2003em space ",
        "a\u200bb\x00c\x1fd \x1c e\ufffdf",  # format and control characters are deleted, not split
        " \u0301e e\u0301 \u0065\u0323\u0302",  # combining marks after a space and reordered by NFD
        "我爱北京天安门 and ＦＵＬＬ width",
        "ΣΊΣΥΦΟΣ ΟΔΟΣ straße İstanbul",
        "",
        "[MASK] [CLS] are text here, not special tokens",
    ]
    pipe = _pipeline({t: i for i, t in enumerate(SPECIAL_TOKENS)}, lowercase)
    expected = Counter(w for line in lines
                       for w, _ in pipe.pre_tokenizer.pre_tokenize_str(pipe.normalizer.normalize_str(line)))
    counted = words_from_pieces(count_pieces(lines * 3), pipe.normalizer, pipe.pre_tokenizer)
    assert counted == Counter({w: 3 * n for w, n in expected.items()})


def test_words_encoding_cannot_use_take_no_part_in_merges():
    long_word = "ab" * 60  # over 100 characters: encodes as [UNK]
    vocab = learn_vocabulary({long_word: 50, "cd": 2}, 99, SPECIAL_TOKENS)
    assert "cd" in vocab and "ab" not in vocab and "##b" not in vocab
    # d and z are cut from a 3-character alphabet (d ties with b and loses), so "cd" and "cz"
    # would encode as [UNK]: they add neither pieces nor merges
    vocab = learn_vocabulary({"aab": 10, "cd": 10, "cz": 1}, 99, SPECIAL_TOKENS, limit_alphabet=3, min_frequency=1)
    assert vocab[len(SPECIAL_TOKENS):] == ["a", "b", "c", "##a", "##b", "##ab", "aab"]
