"""NER data: CoNLL readers on CoNLL-2003 and WNUT-17, IOB1 -> IOB2, labels on first sub-tokens
only, and `bertkit score --task ner` from a conlleval-layout file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bertkit.cli import main as cli
from bertkit.data.ner import (
    IGNORE_INDEX,
    Sentence,
    align_labels,
    encode_sentences,
    read_conll,
    tag_list,
    to_iob2,
    word_predictions,
)
from bertkit.errors import UserError
from bertkit.tokenizer import Tokenizer
from conftest import shared_path


def test_conll2003_counts_and_columns():
    train = read_conll(shared_path("ner", "conll2003", "train.txt"))
    dev = read_conll(shared_path("ner", "conll2003", "dev.txt"))
    assert (len(train), len(dev)) == (14041, 3250)
    assert dev[0] == Sentence(["CRICKET", "-", "LEICESTERSHIRE", "TAKE", "OVER", "AT", "TOP", "AFTER", "INNINGS",
                               "VICTORY", "."], ["O", "O", "B-ORG", "O", "O", "O", "O", "O", "O", "O", "O"])
    assert tag_list(train) == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def test_wnut17_whitespace_only_lines_break_sentences():
    train = read_conll(shared_path("ner", "wnut17", "train.conll"))
    # Line 28 holds only a tab: it ends the first sentence after 27 tokens.
    assert train[0].tokens[:2] == ["@paulwalk", "It"] and len(train[0].tokens) == 27
    assert train[1].tokens[0] == "From"
    assert len(train) == 3394 and sum(len(s.tokens) for s in train) == 62730
    assert "B-creative-work" in tag_list(train)


def test_read_conll_errors_and_layouts(tmp_path):
    path = tmp_path / "x.conll"
    path.write_text("-DOCSTART- -X- O\n\nJohn NNP B-PER\nlives VBZ O\n \t\nParis NNP B-LOC\n", encoding="utf-8")
    assert read_conll(path) == [Sentence(["John", "lives"], ["B-PER", "O"]), Sentence(["Paris"], ["B-LOC"])]
    path.write_text("John B-PER\nlives\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"x.conll:2: expected a token and a tag"):
        read_conll(path)
    path.write_text("John NNP B-PER\nlives O\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"x.conll:2: expected 3 columns"):
        read_conll(path)
    path.write_text("John PER\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"x.conll:1: tag 'PER'"):
        read_conll(path)


def test_iob1_to_iob2():
    assert to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]) == \
        ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG"]
    iob2 = ["B-PER", "I-PER", "O", "B-LOC"]
    assert to_iob2(iob2) == iob2


def test_labels_on_first_sub_token_only():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "john", "un", "##believ", "##able", "new", "york"]
    tokenizer = Tokenizer({w: i for i, w in enumerate(vocab)}, lowercase=True)
    label2id = {"O": 0, "B-PER": 1, "B-LOC": 2, "I-LOC": 3}
    sentence = Sentence(["John", "unbelievable", "New", "York"], ["B-PER", "O", "B-LOC", "I-LOC"])
    item = encode_sentences(tokenizer, [sentence], label2id, max_length=32)[0]
    assert tokenizer.convert_ids_to_tokens(item["input_ids"]) == \
        ["[CLS]", "john", "un", "##believ", "##able", "new", "york", "[SEP]"]
    assert item["word_ids"] == [None, 0, 1, 1, 1, 2, 3, None]
    assert item["labels"] == [IGNORE_INDEX, 1, 0, IGNORE_INDEX, IGNORE_INDEX, 2, 3, IGNORE_INDEX]
    assert align_labels([None, 0, 0, 1, None], [7, 8]) == [IGNORE_INDEX, 7, IGNORE_INDEX, 8, IGNORE_INDEX]
    # Predictions come back per word from first pieces; a truncated word defaults to O.
    short = encode_sentences(tokenizer, [sentence], label2id, max_length=6)[0]
    assert short["word_ids"] == [None, 0, 1, 1, 1, None]
    id2label = {v: k for k, v in label2id.items()}
    assert word_predictions(short["word_ids"], [0, 1, 0, 2, 2, 0], 4, id2label) == ["B-PER", "O", "O", "O"]
    with pytest.raises(UserError, match="tag 'B-ORG'"):
        encode_sentences(tokenizer, [Sentence(["John"], ["B-ORG"])], label2id, 8)


def test_score_ner_via_cli(tmp_path, capsys):
    lines = ["-DOCSTART- -X- O O", "", "John B-PER B-PER", "Smith I-PER I-PER", "visited O O",
             "New B-LOC B-ORG", "York I-LOC I-ORG", "", "Bonn B-LOC I-LOC", ""]
    path = tmp_path / "out.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "bertkit.cli", "score", "--task", "ner", "--conlleval", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # gold: PER, LOC, LOC; predicted: PER, ORG, LOC (an I- after a sentence break opens one)
    assert (result["phrases"], result["found"], result["correct"]) == (3, 3, 2)
    assert result["f1"] == pytest.approx(200 / 3) and result["accuracy"] == pytest.approx(300 / 6)
    assert result["per_type"]["LOC"]["support"] == 2
    # Gold and predicted CoNLL files with the same tokens score the same way (in process).
    gold, pred = tmp_path / "gold.conll", tmp_path / "pred.conll"
    gold.write_text("John B-PER\nSmith I-PER\n\nBonn B-LOC\n", encoding="utf-8")
    pred.write_text("John B-PER\nSmith O\n\nBonn B-LOC\n", encoding="utf-8")
    assert cli(["score", "--task", "ner", "--gold", str(gold), "--pred", str(pred)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["phrases"], result["found"], result["correct"]) == (2, 2, 1)
    pred.write_text("Jon B-PER\nSmith O\n\nBonn B-LOC\n", encoding="utf-8")
    assert cli(["score", "--task", "ner", "--gold", str(gold), "--pred", str(pred)]) == 2
    assert "sentence 1 has other tokens" in capsys.readouterr().err
