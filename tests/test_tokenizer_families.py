"""The tokenizers of BERT's descendants (RoBERTa, ModernBERT: byte-level BPE; XLM-R, ALBERT,
DeBERTa-v3: SentencePiece Unigram; DistilBERT: WordPiece) read from a model directory's
tokenizer.json, against transformers' fast tokenizer for the same directory: ids, type ids,
attention mask, offsets and word ids on every line of the GLUE dev files (SST-2, MRPC and STS-B
pairs), pre-split words, longest-first truncation of pairs, the special tokens' parts and counts,
save and load round trips; exact values on hand-made vocabularies; whole-word continuation
tables; training that gives the same vocabulary twice; one-line errors for broken files.

The directories are built offline (tests/tokenizer_family_dirs.py): nothing comes from a hub.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from bertkit.data.masking import continuation_table
from bertkit.errors import UserError
from bertkit.tokenizer import Tokenizer
from conftest import shared_path
from tokenizer_family_dirs import CONFIGS, FAMILIES, KIND, build, hand_bpe, hand_unigram, save

transformers = pytest.importorskip("transformers")

# task -> (column of text A, column of text B or None); each dev file has a header line
DEV = {"SST-2": (0, None), "MRPC": (3, 4), "STS-B": (7, 8)}
LEARNED_FROM = 3000  # SST-2 training sentences the families' vocabularies are learned from


def _dev(task: str) -> tuple[list[str], list[str] | None]:
    col_a, col_b = DEV[task]
    rows = [line.split("\t") for line in shared_path("glue", task, "dev.tsv").read_text(encoding="utf-8")
            .split("\n")[1:] if line]
    return [r[col_a] for r in rows], [r[col_b] for r in rows] if col_b is not None else None


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    lines = shared_path("glue", "SST-2", "train.tsv").read_text(encoding="utf-8").split("\n")[1:LEARNED_FROM + 1]
    return [line.split("\t")[0] for line in lines]


@pytest.fixture(scope="module")
def family_dirs(sentences, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("families")
    return {f: save(build(f, sentences), root / f, CONFIGS[f]) for f in FAMILIES}


@pytest.fixture(scope="module")
def pairs(family_dirs) -> dict:
    """family -> (ours, transformers' AutoTokenizer) for the same directory."""
    return {f: (Tokenizer.from_pretrained(d), transformers.AutoTokenizer.from_pretrained(str(d)))
            for f, d in family_dirs.items()}


def _theirs(hf, texts, pairs=None, **options) -> list[tuple]:
    got = hf(texts, pairs, return_offsets_mapping=True, return_token_type_ids=True, **options)
    return [(got["input_ids"][i], got["token_type_ids"][i], got["attention_mask"][i],
             [tuple(o) for o in got["offset_mapping"][i]], got.word_ids(i)) for i in range(len(texts))]


def _ours(encodings) -> list[tuple]:
    return [(e.ids, e.type_ids, e.attention_mask, e.offsets, e.word_ids) for e in encodings]


def _first_difference(mine: list, ref: list) -> str:
    i = next(i for i, (m, r) in enumerate(zip(mine, ref)) if m != r)
    return f"line {i + 1}: (ids, type ids, mask, offsets, word ids)\nours   {mine[i]}\ntheirs {ref[i]}"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_glue_dev_line_matches_transformers(pairs, family):
    ours, hf = pairs[family]
    for task in DEV:
        texts, second = _dev(task)
        mine = _ours(ours.encode_batch(texts, second, truncation=False))
        ref = _theirs(hf, texts, second)
        assert len(mine) == len(ref) == len(texts) > 400
        assert mine == ref, f"{family} {task} dev {_first_difference(mine, ref)}"


@pytest.mark.parametrize("family", FAMILIES)
def test_pre_split_words_match_is_split_into_words(pairs, family_dirs, family):
    """RoBERTa's class with add_prefix_space=True is what transformers asks for with pre-split
    words; ModernBERT's generic class ignores that flag, so its reference gets the same prefix
    space by hand (bertkit gives every byte-level BPE the leading Ġ)."""
    ours, hf = pairs[family]
    if family == "roberta":
        hf = transformers.AutoTokenizer.from_pretrained(str(family_dirs[family]), add_prefix_space=True)
    elif family == "modernbert":
        from tokenizers import pre_tokenizers

        hf = transformers.AutoTokenizer.from_pretrained(str(family_dirs[family]))
        hf.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    texts, _ = _dev("SST-2")
    cases = [t.split() for t in texts] + [["Café", "naïve"], ["我爱", "北京"], ["😀", "x" * 250], ["New", "York", "-"]]
    for words in cases:
        got = hf(words, is_split_into_words=True, return_offsets_mapping=True, return_token_type_ids=True)
        ref = (got["input_ids"], got["token_type_ids"], got["attention_mask"],
               [tuple(o) for o in got["offset_mapping"]], got.word_ids())
        assert _ours([ours.encode_words(words)])[0] == ref, words
    truncated = hf(cases[0], is_split_into_words=True, truncation=True, max_length=6)["input_ids"]
    assert ours.encode_words(cases[0], max_length=6).ids == truncated and len(truncated) == 6


@pytest.mark.parametrize("family", FAMILIES)
def test_pairs_truncate_longest_first_as_transformers(pairs, family):
    ours, hf = pairs[family]
    texts, second = _dev("MRPC")
    for max_length in (8, 9, 17, 40):  # the library's overflow windows make short limits slow: few pairs
        mine = _ours(ours.encode_batch(texts[:16], second[:16], max_length=max_length))
        ref = _theirs(hf, texts[:16], second[:16], truncation="longest_first", max_length=max_length)
        assert mine == ref, f"{family} max_length {max_length} {_first_difference(mine, ref)}"
        assert max(len(m[0]) for m in mine) == max_length


@pytest.mark.parametrize("family", FAMILIES)
def test_special_tokens_and_counts_are_the_familys(pairs, family):
    ours, hf = pairs[family]
    assert ours.kind == KIND[family]
    assert (ours.cls_id, ours.sep_id, ours.pad_id, ours.mask_id, ours.unk_id) == (
        hf.cls_token_id, hf.sep_token_id, hf.pad_token_id, hf.mask_token_id, hf.unk_token_id)
    assert set(ours.special_ids) == set(hf.all_special_ids) and ours.special_ids == sorted(ours.special_ids)
    assert ours.template.single_count == hf.num_special_tokens_to_add(pair=False) == 2
    pair = 4 if family in ("roberta", "xlmr") else 3
    assert ours.template.pair_count == hf.num_special_tokens_to_add(pair=True) == pair
    assert len(ours) == len(hf) and ours.vocab == hf.get_vocab()
    assert ours.convert_ids_to_tokens([ours.cls_id, 10**9]) == [hf.cls_token, hf.unk_token]
    assert ours.decode(ours.encode("the movie is good").ids) == hf.decode(hf("the movie is good")["input_ids"],
                                                                          skip_special_tokens=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_template_lays_out_ids_as_the_tokenizer_does(pairs, family):
    """What SQuAD windows and long inputs build by hand (`Tokenizer.template`) is what encoding the
    texts gives: ids and type ids, one text and a pair."""
    ours, _ = pairs[family]
    for a, b in [("a good film", "the river bank"), ("x", "y z"), ("one more text .", None)]:
        ids_a = ours.encode(a, add_special_tokens=False).ids
        ids_b = ours.encode(b, add_special_tokens=False).ids if b is not None else None
        want = ours.encode(a, b)
        assert ours.template.wrap(ids_a, ids_b) == (want.ids, want.type_ids), (family, a, b)
        if b is not None:
            start = ours.template.second_offset(len(ids_a))
            assert want.ids[start : start + len(ids_b)] == ids_b


@pytest.mark.parametrize("family", FAMILIES)
def test_saved_copy_loads_back_in_both_with_the_same_ids(pairs, family, tmp_path):
    ours, _ = pairs[family]
    ours.save_pretrained(tmp_path)
    files = {"tokenizer.json", "tokenizer_config.json"} | ({"vocab.txt"} if family == "distilbert" else set())
    assert {p.name for p in tmp_path.iterdir()} == files
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    wanted = "BertTokenizer" if family == "distilbert" else CONFIGS[family]["tokenizer_class"]
    assert config["tokenizer_class"] == wanted and config["model_max_length"] == 512
    again, hf = Tokenizer.from_pretrained(tmp_path), transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert again.fingerprint == ours.fingerprint and again.kind == ours.kind
    texts, second = _dev("MRPC")
    assert _ours(again.encode_batch(texts, second)) == _ours(ours.encode_batch(texts, second)) == _theirs(
        hf, texts, second)


def test_fingerprints_follow_the_vocabulary(pairs, bert_vocab):
    assert Tokenizer.from_pretrained(bert_vocab.parent).fingerprint == "1f952ab19a949aad"  # as before families
    prints = {ours.fingerprint for ours, _ in pairs.values()}
    assert len(prints) == len(FAMILIES) and all(re.fullmatch("[0-9a-f]{16}", p) for p in prints)


# ---- exact values on vocabularies small enough to check by hand ----

HAND_CASES = {  # text -> (kind -> (tokens, ids, offsets, word ids))
    "Café naïve": {
        "bpe": (["<s>", "C", "a", "f", "Ã©", "Ġn", "a", "Ã", "¯", "v", "e", "</s>"],
                [0, 39, 69, 74, 267, 268, 69, 132, 112, 90, 73, 2],
                [(0, 0), (0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (6, 7), (7, 8), (7, 8), (8, 9), (9, 10), (0, 0)],
                [None, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, None]),
        # unknown characters in a row are one <unk> (id 3)
        "unigram": (["<s>", "▁", "C", "a", "f", "é", "▁", "n", "a", "ïve", "</s>"],
                    [0, 4, 3, 9, 12, 13, 4, 3, 9, 3, 2],
                    [(0, 0), (0, 1), (0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (5, 6), (6, 7), (7, 10), (0, 0)],
                    [None, 0, 0, 0, 0, 0, 1, 1, 1, 1, None]),
    },
    "我北京 门": {  # CJK: three bytes a character in byte-level BPE
        "bpe": (["<s>", "æ", "Ī", "ĳ", "å", "Į", "Ĺ", "ä", "º", "¬", "Ġ", "é", "Ĺ", "¨", "</s>"],
                [0, 167, 235, 244, 166, 239, 250, 165, 123, 110, 225, 170, 250, 106, 2],
                [(0, 0), (0, 1), (0, 1), (0, 1), (1, 2), (1, 2), (1, 2), (2, 3), (2, 3), (2, 3), (4, 4), (4, 5),
                 (4, 5), (4, 5), (0, 0)],
                [None, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, None]),
        "unigram": (["<s>", "▁", "我", "北", "京", "▁", "门", "</s>"], [0, 4, 3, 15, 16, 4, 3, 2],
                    [(0, 0), (0, 1), (0, 1), (1, 2), (2, 3), (4, 5), (4, 5), (0, 0)],
                    [None, 0, 0, 0, 0, 1, 1, None]),
    },
    "the 😀 cats!": {  # an emoji: four bytes, or one unknown piece
        "bpe": (["<s>", "t", "he", "Ġ", "ð", "Ł", "ĺ", "Ģ", "Ġcat", "s", "!", "</s>"],
                [0, 88, 262, 225, 177, 258, 251, 227, 266, 87, 5, 2],
                [(0, 0), (0, 1), (1, 3), (4, 4), (4, 5), (4, 5), (4, 5), (4, 5), (6, 9), (9, 10), (10, 11), (0, 0)],
                [None, 0, 0, 1, 1, 1, 1, 1, 2, 2, 3, None]),
        "unigram": (["<s>", "▁the", "▁", "😀", "▁cat", "s", "!", "</s>"], [0, 5, 4, 3, 6, 7, 18, 2],
                    [(0, 0), (0, 3), (4, 5), (4, 5), (6, 9), (9, 10), (10, 11), (0, 0)],
                    [None, 0, 1, 1, 2, 2, 2, None]),
    },
    "": {"bpe": (["<s>", "</s>"], [0, 2], [(0, 0), (0, 0)], [None, None]),
         "unigram": (["<s>", "</s>"], [0, 2], [(0, 0), (0, 0)], [None, None])},
    # an over-long word has no [UNK] limit in either: one piece per character
    "x" * 250: {"bpe": (["<s>", *"x" * 250, "</s>"], [0, *[92] * 250, 2],
                        [(0, 0), *((i, i + 1) for i in range(250)), (0, 0)], [None, *[0] * 250, None]),
                "unigram": (["<s>", "▁", *"x" * 250, "</s>"], [0, 4, *[19] * 250, 2],
                            [(0, 0), (0, 1), *((i, i + 1) for i in range(250)), (0, 0)], [None, *[0] * 251, None])},
}


@pytest.fixture(scope="module")
def hand(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("hand")
    return {"bpe": Tokenizer.from_pretrained(save(hand_bpe(), root / "bpe", CONFIGS["roberta"])),
            "unigram": Tokenizer.from_pretrained(save(hand_unigram(), root / "unigram", CONFIGS["xlmr"]))}


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
@pytest.mark.parametrize("text", list(HAND_CASES), ids=["accents", "cjk", "emoji", "empty", "long"])
def test_hand_made_vocabulary_exact(hand, kind, text):
    tokens, ids, offsets, word_ids = HAND_CASES[text][kind]
    e = hand[kind].encode(text)
    assert (e.tokens, e.ids, e.offsets, e.word_ids) == (tokens, ids, offsets, word_ids)
    assert e.type_ids == [0] * len(ids) and e.attention_mask == [1] * len(ids)


@pytest.mark.parametrize("kind, tokens, ids, offsets", [
    ("bpe", ["<s>", "t", "he", "Ġcat", "</s>", "</s>", "ca", "t", "s", ",", "Ġthe", "!", "</s>"],
     [0, 88, 262, 266, 2, 2, 264, 88, 87, 16, 263, 5, 2],
     [(0, 0), (0, 1), (1, 3), (4, 7), (0, 0), (0, 0), (0, 2), (2, 3), (3, 4), (4, 5), (6, 9), (9, 10), (0, 0)]),
    ("unigram", ["<s>", "▁the", "▁cat", "</s>", "</s>", "▁cat", "s", ",", "▁the", "!", "</s>"],
     [0, 5, 6, 2, 2, 6, 7, 17, 5, 18, 2],
     [(0, 0), (0, 3), (4, 7), (0, 0), (0, 0), (0, 3), (3, 4), (4, 5), (6, 9), (9, 10), (0, 0)]),
])
def test_hand_made_pair_exact(hand, kind, tokens, ids, offsets):
    """RoBERTa's and XLM-R's pair: <s> A </s></s> B </s>, every type id 0, offsets into each text."""
    e = hand[kind].encode("the cat", "cats, the!")
    assert (e.tokens, e.ids, e.offsets, e.type_ids) == (tokens, ids, offsets, [0] * len(ids))
    assert e.sequence_ids == [None, *[0] * (tokens.index("</s>") - 1), None, None,
                              *[1] * (len(tokens) - tokens.index("</s>") - 3), None]


def test_continuation_tables_one_rule_per_kind(hand):
    wordpiece = Tokenizer({t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "play", "##ing",
                                                       "##s", "a"])})
    assert continuation_table(wordpiece).tolist() == [False] * 6 + [True, True, False]
    bpe = continuation_table(hand["bpe"])
    byte_level = {t: bpe[i].item() for t, i in hand["bpe"].vocab.items()}
    assert byte_level["Ġthe"] is False and byte_level["Ġ"] is False and byte_level["he"] is True
    assert byte_level["<s>"] is False and byte_level["<mask>"] is False  # specials never continue
    assert bpe.sum().item() == len(hand["bpe"]) - 5 - 6  # all but the specials and Ġ, Ġt, Ġthe, Ġca, Ġcat, Ġn
    unigram = continuation_table(hand["unigram"])
    continuing = {t for t, i in hand["unigram"].vocab.items() if unigram[i]}
    assert continuing == {"s", "a", "t", "c", "f", "é", "北", "京", ",", "!", "x"}  # all but specials and ▁...


# ---- training ----

@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_training_gives_the_same_vocabulary_twice(kind, sentences, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences[:2000]) + "\n", encoding="utf-8")
    first, second = (Tokenizer.train([corpus], vocab_size=500, lowercase=False, kind=kind, show_progress=False)
                     for _ in range(2))
    assert first.vocab == second.vocab and len(first) == 500 and first.fingerprint == second.fingerprint
    assert first.convert_ids_to_tokens(range(5)) == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    assert (first.cls_id, first.pad_id, first.sep_id, first.unk_id, first.mask_id) == (0, 1, 2, 3, 4)
    assert first.template.pair_count == 4 and first.kind == kind
    texts, _ = _dev("SST-2")
    assert [e.ids for e in first.encode_batch(texts)] == [e.ids for e in second.encode_batch(texts)]
    first.save_pretrained(tmp_path / "tok")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert type(hf).__name__ == {"bpe": "RobertaTokenizer", "unigram": "XLMRobertaTokenizer"}[kind]
    assert _ours(first.encode_batch(texts)) == _theirs(hf, texts)


def test_uncased_training_is_read_as_it_stands(sentences, tmp_path):
    """An uncased BPE: RoBERTa's class would drop the normalizer, so the saved copy names the
    generic class, which reads tokenizer.json as it stands."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences[:500]) + "\nCAFÉ Naïve\n", encoding="utf-8")
    tok = Tokenizer.train([corpus], vocab_size=300, lowercase=True, kind="bpe", show_progress=False)
    assert tok.lowercase and tok.tokenize("CAFÉ") == tok.tokenize("cafe")
    tok.save_pretrained(tmp_path / "tok")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert hf("CAFÉ Naïve")["input_ids"] == tok.encode("CAFÉ Naïve").ids
    with pytest.raises(ValueError, match="kind must be one of wordpiece, bpe, unigram"):
        Tokenizer.train([corpus], vocab_size=300, kind="sentencepiece")


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_training_skips_a_file_that_stops_being_text_and_refuses_no_words(kind, tmp_path, capsys):
    """As `bertkit prepare`: a file not UTF-8 past the head the text check reads is left out whole,
    with a warning naming file and line; blank lines alone are no text to learn from."""
    good, late = tmp_path / "good.txt", tmp_path / "late.txt"
    good.write_text("the cat sat on the mat\n" * 200, encoding="utf-8")
    late.write_bytes(b"dog dog dog dog\n" * 5000 + b"caf\xe9\n")  # 80 KB of text, then Latin-1
    tok = Tokenizer.train([good, late], vocab_size=300, kind=kind, show_progress=False)
    assert tok.vocab == Tokenizer.train([good], vocab_size=300, kind=kind, show_progress=False).vocab
    assert "late.txt:5001: not valid UTF-8" in capsys.readouterr().err
    (tmp_path / "blank.txt").write_text("  \n\n \n", encoding="utf-8")
    with pytest.raises(UserError, match=re.escape("blank.txt: no text to learn a vocabulary from")):
        Tokenizer.train([tmp_path / "blank.txt"], vocab_size=300, kind=kind, show_progress=False)


def test_cli_trains_each_kind(sentences, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences[:300]) + "\n", encoding="utf-8")
    runs = {kind: subprocess.Popen([sys.executable, "-m", "bertkit.cli", "tokenizer", "train", "--input", str(corpus),
                                    "--kind", kind, "--vocab-size", "300", "--cased", "--out", str(tmp_path / kind)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for kind in ("bpe", "unigram")}
    for kind, run in runs.items():
        stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
        assert f"300-entry cased {kind} vocabulary" in stdout
        assert sorted(p.name for p in (tmp_path / kind).iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
        assert Tokenizer.from_pretrained(tmp_path / kind).kind == kind


# ---- files that are not a tokenizer bertkit reads ----

@pytest.mark.parametrize("content, message", [
    ("{not json", "tokenizer.json: not valid JSON"),
    ('{"model": {"type": "WordLevel", "vocab": {}}}', "tokenizer.json: not a WordPiece tokenizer (BERT's), nor a "
                                                      "BPE or Unigram one: its model type is 'WordLevel'"),
    ('{"model": {"type": "Unigram"}}', "tokenizer.json: not a WordPiece tokenizer (BERT's), nor a BPE or Unigram "
                                       "one the tokenizers library reads"),
    ("[]", "its model type is None"),
])
def test_a_broken_tokenizer_json_is_one_line_naming_it(tmp_path, content, message):
    (tmp_path / "tokenizer.json").write_text(content, encoding="utf-8")
    with pytest.raises(UserError) as caught:
        Tokenizer.from_pretrained(tmp_path)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith(str(tmp_path / "tokenizer.json"))


def test_special_tokens_from_config_strings_dicts_or_usual_names(tmp_path):
    hand_unigram().save(str(tmp_path / "tokenizer.json"))
    assert Tokenizer.from_pretrained(tmp_path).cls_id == 0  # no config: the usual names
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"cls_token": {"content": "▁the"}}), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"sep_token": "!", "mask_token": None}),
                                                    encoding="utf-8")
    tok = Tokenizer.from_pretrained(tmp_path)
    assert (tok.cls_id, tok.sep_id, tok.mask_id) == (5, 18, 20)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"sep_token": "[SEP]"}), encoding="utf-8")
    with pytest.raises(UserError, match=re.escape("tokenizer.json: sep_token '[SEP]' is not in tokenizer.json's")):
        Tokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(UserError, match=re.escape("tokenizer_config.json: not valid JSON")):
        Tokenizer.from_pretrained(tmp_path)


def test_a_sentencepiece_model_without_tokenizer_json_says_how_to_make_one(tmp_path):
    (tmp_path / "spm.model").write_bytes(b"\x0a\x05")  # DeBERTa-v3 as published: spm.model alone
    with pytest.raises(UserError, match=re.escape("no vocab.txt or tokenizer.json: bertkit reads a SentencePiece "
                                                  "model through tokenizer.json")):
        Tokenizer.from_pretrained(tmp_path)
