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


def encode_sentences(tokenizer, sentences: list[Sentence], label2id: dict[str, int],
                     max_length: int) -> list[dict]:
    """Encode sentences for token classification.

    Each item holds input_ids, token_type_ids, attention_mask (unpadded lists), labels (aligned
    as above) and word_ids (to map predictions back with `word_predictions`).
    """
    items = []
    for number, sentence in enumerate(sentences):
        unknown = [t for t in sentence.tags if t not in label2id]
        if unknown:
            raise UserError(f"sentence {number + 1} has tag {unknown[0]!r}, unknown to the model "
                            f"(knows {', '.join(label2id)})")
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
