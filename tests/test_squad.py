"""SQuAD: windows over contexts longer than max_seq_len, answer positions in each window, spans
mapped back to the exact original text, reading and splitting the real dev file, and
`bertkit score --task squad` giving 100/100 for the gold answers."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from bertkit.data.squad import SquadExample, make_features, read_squad, split_articles
from bertkit.errors import UserError
from bertkit.eval.squad import decode_answers as postprocess
from bertkit.tokenizer import Tokenizer
from conftest import shared_path

# 40 one-token words; word 25 is "Café" (uncased vocabulary: "cafe"), followed by two spaces.
WORDS = [f"w{i}" for i in range(40)]
WORDS[25] = "Café"
CONTEXT = " ".join(WORDS[:26]) + "  " + " ".join(WORDS[26:])
QUESTION = "what is w5?"  # 4 tokens: what is w5 ?
PREFIX = 6  # [CLS] + 4 question tokens + [SEP]
MAX_SEQ_LEN = PREFIX + 16 + 1  # windows of 16 context tokens
STRIDE = 8  # windows start at tokens 0, 8, 16, 24


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "what", "is", "?", "cafe", *[f"w{i}" for i in range(40)]]
    return Tokenizer({w: i for i, w in enumerate(words)}, lowercase=True)


def _example(qid: str, answer: str) -> SquadExample:
    return SquadExample(qid, "t", CONTEXT, QUESTION, [(answer, CONTEXT.index(answer))])


def test_windows_and_answer_positions(tokenizer):
    # tokens 14..17: cut by the first window's end, whole in the second, absent from the others
    ex = _example("q", "w14 w15 w16 w17")
    f = make_features([ex], tokenizer, max_seq_len=MAX_SEQ_LEN, doc_stride=STRIDE)
    assert len(f) == 4 and f.lengths == [MAX_SEQ_LEN] * 4  # windows stay unpadded
    assert f.example_index.tolist() == [0, 0, 0, 0]
    assert f.start_positions.tolist() == [0, PREFIX + 14 - 8, 0, 0]
    assert f.end_positions.tolist() == [0, PREFIX + 17 - 8, 0, 0]
    second = tokenizer.convert_ids_to_tokens(f.input_ids[1])
    assert second[:PREFIX] == ["[CLS]", "what", "is", "w5", "?", "[SEP]"]
    assert second[PREFIX] == "w8" and second[PREFIX + 15] == "w23" and second[PREFIX + 16] == "[SEP]"
    assert f.token_type_ids[1] == [0] * PREFIX + [1] * 17
    assert len(f.input_ids[3]) == MAX_SEQ_LEN  # the last window holds 16 tokens (24..39)
    assert f.offsets[1][:PREFIX] == [None] * PREFIX and f.offsets[1][-1] is None
    assert CONTEXT[slice(*f.offsets[1][PREFIX])] == "w8"


def test_question_truncated_to_max_query_len(tokenizer):
    ex = SquadExample("q", "t", CONTEXT, "what is " * 40, [("w3", CONTEXT.index("w3"))])
    f = make_features([ex], tokenizer, max_seq_len=100, doc_stride=50, max_query_len=64)
    assert f.token_type_ids[0].index(1) == 64 + 2
    with pytest.raises(UserError, match="leaves no room for context"):
        make_features([ex], tokenizer, max_seq_len=60, doc_stride=50, max_query_len=64)


def test_postprocess_recovers_original_text_across_windows(tokenizer):
    examples = [_example("accent", "Café  w26"), _example("plain", "w14 w15 w16 w17")]
    f = make_features(examples, tokenizer, max_seq_len=MAX_SEQ_LEN, doc_stride=STRIDE)
    starts = np.zeros((len(f), MAX_SEQ_LEN))
    ends = np.zeros((len(f), MAX_SEQ_LEN))
    for i in range(len(f)):
        if f.start_positions[i]:  # oracle logits on the labelled windows
            starts[i, f.start_positions[i]] = 5.0
            ends[i, f.end_positions[i]] = 5.0
    # Distractors that score higher but are invalid: end before start, in the question, too long.
    starts[0, PREFIX + 9], ends[0, PREFIX + 3] = 9.0, 9.0
    starts[0, 2], ends[0, 3] = 20.0, 20.0
    predictions = postprocess(examples, f, starts, ends, n_best=20, max_answer_len=30)
    # original spacing (two spaces) and the accent survive, though the vocabulary is uncased
    assert predictions == {"accent": "Café  w26", "plain": "w14 w15 w16 w17"}
    short = postprocess(examples, f, starts, ends, max_answer_len=1)
    assert short["plain"] != "w14 w15 w16 w17"


def test_answer_window_uses_max_context(tokenizer):
    # token 25 is in windows 16..31 and 24..39; it has more context on both sides in the first
    ex = _example("q", "Café")
    f = make_features([ex], tokenizer, max_seq_len=MAX_SEQ_LEN, doc_stride=STRIDE)
    assert f.max_context[2][PREFIX + 25 - 16] and not f.max_context[3][PREFIX + 25 - 24]
    starts, ends = np.zeros((len(f), MAX_SEQ_LEN)), np.zeros((len(f), MAX_SEQ_LEN))
    starts[3, PREFIX + 1], ends[3, PREFIX + 1] = 9.0, 9.0  # the same token seen from window 24
    starts[2, PREFIX + 9], ends[2, PREFIX + 9] = 1.0, 1.0
    assert postprocess([ex], f, starts, ends) == {"q": "Café"}


def test_read_squad_and_split_by_article(tmp_path):
    examples = read_squad(shared_path("squad", "dev-v1.1.json"))
    assert len(examples) == 10570 and len({e.title for e in examples}) == 48
    train, dev = split_articles(examples, 10, seed=0)
    assert len(train) + len(dev) == 10570
    assert len({e.title for e in train}) == 10 and not {e.title for e in train} & {e.title for e in dev}
    assert split_articles(examples, 10, seed=0)[0] == train
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "abc", "qas": [
        {"id": "1", "question": "?", "answers": [{"text": "xyz", "answer_start": 0}]}]}]}]}))
    with pytest.raises(UserError, match="answer 'xyz' is not at character 0"):
        read_squad(bad)
    bad.write_text('{"data": [')
    with pytest.raises(UserError, match=re.escape("bad.json:1: not valid JSON")):
        read_squad(bad)


def test_score_squad_gold_answers_get_100(tmp_path):
    gold = shared_path("squad", "dev-v1.1.json")
    data = json.loads(gold.read_text(encoding="utf-8"))
    answers = {qa["id"]: qa["answers"][0]["text"] for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]}
    pred = tmp_path / "predictions.json"
    pred.write_text(json.dumps(answers), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "bertkit.cli", "score", "--task", "squad",
                           "--gold", str(gold), "--pred", str(pred)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"exact_match": 100.0, "f1": 100.0, "count": 10570, "missing": 0}
