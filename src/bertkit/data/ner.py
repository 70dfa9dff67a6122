"""Named-entity data: CoNLL-style files, tag schemes, and word labels on WordPiece tokens.

A CoNLL file has one token per line, the token first and its tag last (CoNLL-2003 has POS and
chunk columns between; WNUT-17 has none), `-DOCSTART-` lines between documents, and a blank
line between sentences; WNUT-17 marks some breaks with lines of only white space, which count
as blank here.

As in the BERT paper (section 5.3), each word is labelled on its first WordPiece only; the
other pieces, [CLS] and [SEP] get -100 so the loss ignores them, and a word's prediction is read
from its first piece. Words cut off by `max_length`, or that tokenize to nothing (a lone
zero-width character), get no prediction and count as "O" when mapped back to words.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bertkit.config import IGNORE_INDEX
from bertkit.errors import UserError
from bertkit.io import read_lines
from bertkit.long_inputs import Plan, Policy


@dataclass
class Sentence:
    tokens: list[str]
    tags: list[str]


def _check_tag(tag: str, path, line: int) -> None:
    if tag != "O" and not (len(tag) > 2 and tag[0] in "BIES" and tag[1] == "-"):
        raise UserError(f"tag {tag!r} is not O or B-/I-/E-/S- followed by a type", path, line)


def read_conll(path: str | os.PathLike) -> list[Sentence]:
    """Sentences of a CoNLL file: first column the token, last column the tag."""
    path = Path(path)
    sentences: list[Sentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    width = None
    for number, text in enumerate(read_lines(path), start=1):
        fields = text.split()
        if not fields or fields[0] == "-DOCSTART-":
            if tokens:
                sentences.append(Sentence(tokens, tags))
                tokens, tags = [], []
            continue
        if len(fields) < 2:
            raise UserError(f"expected a token and a tag, found {text.strip()!r}", path, number)
        if width is None:
            width = len(fields)
        elif len(fields) != width:
            raise UserError(f"expected {width} columns like the first token line, found {len(fields)}", path, number)
        _check_tag(fields[-1], path, number)
        tokens.append(fields[0])
        tags.append(fields[-1])
    if tokens:
        sentences.append(Sentence(tokens, tags))
    if not sentences:
        raise UserError("no sentences in file", path)
    return sentences


def to_iob2(tags: list[str]) -> list[str]:
    """IOB1 -> IOB2: an I- that opens an entity (after O or another type) becomes B-.

    IOB2 input comes back unchanged, so this is safe to apply to any B/I/O sequence.
    """
    out = []
    previous = "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
        previous = tag
    return out


def tag_list(sentences: list[Sentence]) -> list[str]:
    """The tag set of a corpus in a stable order: "O" first, then by type, B before I."""
    tags = {t for s in sentences for t in s.tags} | {"O"}
    return sorted(tags, key=lambda t: (t != "O", t[2:], t[:2]))


def align_labels(word_ids: list[int | None], word_labels: list[int]) -> list[int]:
    """A label per token: the word's label on its first piece, -100 on later pieces and specials."""
    labels = []
    previous = None
    for word in word_ids:
        if word is None or word == previous:
            labels.append(IGNORE_INDEX)
        else:
            labels.append(word_labels[word])
        previous = word
    return labels


def _check_tags(sentences: list[Sentence], label2id: dict[str, int]) -> None:
    for number, sentence in enumerate(sentences):
        unknown = [t for t in sentence.tags if t not in label2id]
        if unknown:
            raise UserError(f"sentence {number + 1} has tag {unknown[0]!r}, unknown to the model "
                            f"(knows {', '.join(label2id)})")


def encode_sentences(tokenizer, sentences: list[Sentence], label2id: dict[str, int],
                     max_length: int) -> list[dict]:
    """Encode sentences for token classification.

    Each item holds input_ids, token_type_ids, attention_mask (unpadded lists), labels (aligned
    as above) and word_ids (to map predictions back with `word_predictions`).
    """
    _check_tags(sentences, label2id)
    items = []
    for sentence in sentences:
        encoding = tokenizer.encode_words(sentence.tokens, max_length=max_length)
        word_labels = [label2id[t] for t in sentence.tags]
        items.append({
            "input_ids": encoding.ids,
            "token_type_ids": encoding.type_ids,
            "attention_mask": encoding.attention_mask,
            "labels": align_labels(encoding.word_ids, word_labels),
            "word_ids": encoding.word_ids,
            "truncated": encoding.truncated,  # words past max_length get no prediction
        })
    return items


def word_predictions(word_ids: list[int | None], token_predictions, n_words: int,
                     id2label: dict[int, str], default: str = "O") -> list[str]:
    """A tag per word from per-token predicted ids: the prediction on each word's first piece."""
    tags = [default] * n_words
    seen = set()
    for word, prediction in zip(word_ids, token_predictions):
        if word is not None and word not in seen:
            seen.add(word)
            tags[word] = id2label[int(prediction)]
    return tags


@dataclass
class Windowed:
    """Sentences (or whole documents) as the rows of a `long_inputs.Plan`: the model's features,
    and what maps the rows' predictions back to words."""

    features: list[dict]  # input_ids, token_type_ids, labels (unpadded), one per row
    plan: Plan
    word_ids: list[list[int | None]]  # per sentence, the word of each content token

    def row_words(self, r: int) -> list[int | None]:
        """The word of each token of row r, None for [CLS], [SEP] and a pair's first segment."""
        plan = self.plan
        i, a, b = int(plan.owner[r]), int(plan.start[r]), int(plan.stop[r])
        return [None] * plan.offset(r) + list(self.word_ids[i][a:b]) + [None]


def encode_windows(tokenizer, sentences: list[Sentence], label2id: dict[str, int], max_length: int,
                   policy: Policy) -> Windowed:
    """Features of sentences under a long-input policy: each cut to `max_length` tokens
    ("truncate": the same rows as `encode_sentences`), or read whole in windows. A word's label sits
    on its first piece in every window that holds that piece; a window that starts inside a word
    leaves its later pieces unlabelled, as everywhere else."""
    _check_tags(sentences, label2id)
    encodings = [tokenizer.encode_words(s.tokens) for s in sentences]
    word_ids = [e.word_ids[1:-1] for e in encodings]
    plan = Plan([e.ids[1:-1] for e in encodings], max_length, tokenizer, stride=policy.stride,
                first_only=not policy.windows)
    features = []
    for r in range(len(plan)):
        i, a, b = int(plan.owner[r]), int(plan.start[r]), int(plan.stop[r])
        words, tags = word_ids[i], sentences[i].tags
        labels = [label2id[tags[words[t]]] if words[t] is not None and (t == 0 or words[t - 1] != words[t])
                  else IGNORE_INDEX for t in range(a, b)]
        ids, types = plan.row(r)
        features.append({"input_ids": ids, "token_type_ids": types, "labels": [IGNORE_INDEX, *labels, IGNORE_INDEX]})
    return Windowed(features, plan, word_ids)


def window_word_predictions(windowed: Windowed, row_predictions: list, n_words: list[int],
                            id2label: dict[int, str]) -> list[list[str]]:
    """A tag per word of each sentence from each row's (T,) predicted ids: each token's from the
    row where it has the most context, then each word's from its first piece."""
    plan = windowed.plan
    tags = []
    for i, n in enumerate(n_words):
        tokens = plan.gather(i, row_predictions)[1:-1]  # (covered,) content tokens
        tags.append(word_predictions(windowed.word_ids[i][: len(tokens)], tokens.tolist(), n, id2label))
    return tags
