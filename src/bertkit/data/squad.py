"""SQuAD v1.1: reading, and the feature conversion: windows over long contexts with offsets.

Features follow the BERT paper's recipe (section 4.2 and its run_squad.py): the question is cut
to `max_query_len` tokens; the context is cut into windows of at most
`max_seq_len - len(question) - 3` tokens that start `doc_stride` tokens apart, each packed as
[CLS] question [SEP] window [SEP]. A training answer that lies wholly inside a window is labelled
with its first and last token; otherwise the window's label is [CLS] (position 0).

The context is tokenized on its own, so every context token keeps its character span in the
ORIGINAL context: an answer is sliced from the original string, keeping its spacing, case and
accents even when the vocabulary is uncased. Within one example, each token is only a candidate
start in the window where it has the most context on both sides ("max context", as BERT does;
the window arithmetic is `bertkit.long_inputs`, which every other long input uses too).

Windows stay unpadded lists until a batch is collated. Decoding the predicted spans back to
answer text is in `bertkit.eval.squad`. Only the dev file exists offline, so `split_articles`
makes a training set out of some of its articles and keeps the others for evaluation.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bertkit.errors import UserError
from bertkit.long_inputs import max_context_window, window_starts


@dataclass
class SquadExample:
    id: str
    title: str
    context: str
    question: str
    answers: list[tuple[str, int]]  # (text, character start in context); the first is for training


@dataclass
class SquadFeatures:
    """One row per window, unpadded: every list of a window has that window's length n."""

    input_ids: list[list[int]]  # [CLS] question [SEP] window [SEP]
    token_type_ids: list[list[int]]
    example_index: np.ndarray  # (F,) the example each window came from
    offsets: list[list[tuple[int, int] | None]]  # per window: context char span per token, else None
    start_positions: np.ndarray  # (F,) 0 ([CLS]) when the answer is not inside the window
    end_positions: np.ndarray  # (F,)
    max_context: list[list[bool]] = field(default_factory=list)  # per window: token best seen here

    def __len__(self) -> int:
        return len(self.example_index)

    @property
    def lengths(self) -> list[int]:
        return [len(ids) for ids in self.input_ids]


def _fail(message: str, path: Path):
    raise UserError(f"not a SQuAD v1.1 file: {message}", path)


def read_squad(path: str | os.PathLike) -> list[SquadExample]:
    """All questions of a SQuAD v1.1 JSON file, in file order."""
    path = Path(path)
    if not path.is_file():
        raise UserError("no such file", path)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"not valid UTF-8 (byte {e.start})", path) from None
    except json.JSONDecodeError as e:
        raise UserError(f"not valid JSON ({e.msg})", path, e.lineno) from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        _fail('expected {"data": [articles]}', path)
    examples = []
    try:
        for a, article in enumerate(data["data"]):
            title = str(article.get("title", f"article {a}"))
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    answers = [(ans["text"], int(ans["answer_start"])) for ans in qa.get("answers", [])]
                    for text, start in answers:
                        if context[start:start + len(text)] != text:
                            _fail(f"question {qa['id']}: answer {text!r} is not at character {start}", path)
                    examples.append(SquadExample(str(qa["id"]), title, context, qa["question"], answers))
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        _fail(f"missing or malformed field ({type(e).__name__}: {e})", path)
    if not examples:
        _fail("no questions", path)
    return examples


def split_articles(examples: list[SquadExample], k: int, seed: int = 0) -> tuple[list, list]:
    """Split by article: k articles drawn at random (seeded) train, all other articles evaluate.

    Splitting by article (not by question) keeps every context out of the evaluation set's
    training data. A random draw rather than the first k avoids the file's topic order.
    """
    titles = list(dict.fromkeys(e.title for e in examples))
    if not 0 < k < len(titles):
        raise UserError(f"need 0 < k < {len(titles)} articles for a train/eval split, got k={k}")
    chosen = set(random.Random(seed).sample(titles, k))
    train = [e for e in examples if e.title in chosen]
    dev = [e for e in examples if e.title not in chosen]
    return train, dev


def _answer_tokens(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """First and last context token overlapping characters [start, end); None if none do."""
    inside = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
    return (inside[0], inside[-1]) if inside else None


def make_features(examples: list[SquadExample], tokenizer, max_seq_len: int = 384, doc_stride: int = 128,
                  max_query_len: int = 64) -> SquadFeatures:
    """Windows of every example (at most max_seq_len tokens each), with answer token positions."""
    if doc_stride < 1:
        raise UserError(f"doc_stride must be positive, got {doc_stride}")
    contexts = list(dict.fromkeys(e.context for e in examples))
    context_encoding = dict(zip(contexts, tokenizer.encode_batch(contexts, add_special_tokens=False)))
    questions = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    rows: dict[str, list] = {k: [] for k in ("ids", "types", "index", "offsets", "start", "end", "max")}
    for index, (example, question) in enumerate(zip(examples, questions)):
        q_ids = question.ids[:max_query_len]
        if max_seq_len - len(q_ids) - tokenizer.template.pair_count < 1:
            raise UserError(f"max_seq_len {max_seq_len} leaves no room for context after a "
                            f"{len(q_ids)}-token question")
        for row in _windows(example, q_ids, context_encoding[example.context], tokenizer, max_seq_len, doc_stride):
            row["index"] = index
            for key, value in row.items():
                rows[key].append(value)
    return SquadFeatures(
        input_ids=rows["ids"],
        token_type_ids=rows["types"],
        example_index=np.asarray(rows["index"], dtype=np.int64),
        offsets=rows["offsets"],
        start_positions=np.asarray(rows["start"], dtype=np.int64),
        end_positions=np.asarray(rows["end"], dtype=np.int64),
        max_context=rows["max"],
    )


def _windows(example: SquadExample, q_ids: list[int], context, tokenizer, max_seq_len: int, doc_stride: int):
    """One dict per window of one example: [CLS] question [SEP] window [SEP], or the tokenizer's
    own pair layout (RoBERTa: <s> question </s></s> window </s>)."""
    template = tokenizer.template
    window = max_seq_len - len(q_ids) - template.pair_count
    c_ids, c_offsets = context.ids, context.offsets
    answer = None
    if example.answers:
        text, char_start = example.answers[0]
        answer = _answer_tokens(c_offsets, char_start, char_start + len(text))
    starts = window_starts(len(c_ids), window, doc_stride)
    best_window = max_context_window(starts, window, len(c_ids))
    prefix = template.second_offset(len(q_ids))  # [CLS] question [SEP]
    after = len(template.pair[2])
    for w, start in enumerate(starts):
        stop = min(start + window, len(c_ids))
        s = e = 0  # [CLS] unless the whole answer lies inside this window
        if answer is not None and start <= answer[0] and answer[1] < stop:
            s, e = answer[0] - start + prefix, answer[1] - start + prefix
        ids, types = template.wrap(q_ids, c_ids[start:stop])
        yield {
            "ids": ids,
            "types": types,
            "offsets": [None] * prefix + list(c_offsets[start:stop]) + [None] * after,
            "max": [False] * prefix + (best_window[start:stop] == w).tolist() + [False] * after,
            "start": s,
            "end": e,
        }
