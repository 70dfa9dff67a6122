"""Pretraining instances from the token store: BERT's sentence pairs (NSP) or packed sequences.

`nsp` follows Google's create_pretraining_data: segment A is a run of contiguous sentences, B is
its true continuation half the time (label 0, IsNext) and otherwise a span starting at a random
sentence of another document (label 1, NotNext), the chunk's unused sentences going back for the
next instance. Targets are max_seq_len - 3 tokens, or with probability short_seq_prob a length
drawn from [2, max_seq_len - 3]; an over-long pair is cut one token at a time from the longer
segment, at a randomly chosen end. Two deliberate differences from Google:
- the short target is drawn afresh per instance, not once per document, so the share of short
  instances does not hinge on a few long documents (a Gutenberg book is one document);
- the label is drawn first; when IsNext is drawn for a one-sentence chunk, the next sentence of
  the document joins the chunk as B (Google makes every one-sentence chunk NotNext, which tips
  the labels towards NotNext, 47% IsNext in our tests). A document's last lone sentence still
  has to be NotNext; that IsNext is owed and repaid at the next NotNext draw that could be
  IsNext, so the labels stay balanced.

`sop` is ALBERT's sentence-order prediction (Lan et al. 2020): the same chunks as `nsp`, but B is
always A's true continuation in the same document, and half the time the two are swapped (label
1, swapped; 0, in order), so the model must learn order and coherence rather than topic. A
chunk of one sentence (a one-sentence document) is split in the middle of its tokens.

`packed` is RoBERTa's FULL-SENTENCES: whole sentences back to back, crossing document boundaries
with an extra [SEP] between documents, up to max_seq_len - 2 tokens in [CLS] ... [SEP]; a
sentence longer than that is cut into pieces. No NSP label.

Each of `dupe_factor` passes visits the split's documents in a fresh random order.
"""

from __future__ import annotations

import random

import numpy as np
from tqdm import tqdm

from bertkit.data.shards import InstanceWriter, TokenStore

NO_LABEL = -1  # NSP label of packed instances
IS_NEXT, NOT_NEXT = 0, 1  # transformers' convention for next_sentence_label
IN_ORDER, SWAPPED = 0, 1  # sentence-order labels (transformers' AlbertForPreTraining: sentence_order_label)


class _Corpus:
    """The token store with sentence boundaries in memory: sentence j is tokens[bounds[j]:bounds[j+1]]."""

    def __init__(self, store: TokenStore, documents: np.ndarray):
        self.tokens = store.tokens
        self.bounds = np.concatenate(([0], np.asarray(store.sentence_ends, dtype=np.int64)))
        self.document_ends = np.asarray(store.document_ends, dtype=np.int64)
        self.documents = documents  # the split's document indices

    def sentences_of(self, d: int) -> tuple[int, int]:
        return (int(self.document_ends[d - 1]) if d > 0 else 0), int(self.document_ends[d])


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: random.Random) -> None:
    """Shorten token ranges a=[start, end) and b in place, as Google's truncate_seq_pair: always
    from the longer one, each token from its front or back with probability 1/2."""
    while (a[1] - a[0]) + (b[1] - b[0]) > max_tokens:
        la, lb = a[1] - a[0], b[1] - b[0]
        excess = la + lb - max_tokens
        longer, k = (a, min(excess, la - lb)) if la > lb else (b, max(1, min(excess, lb - la)))
        front = bin(rng.getrandbits(k)).count("1")  # Binomial(k, 1/2) fronts among k removals
        longer[0] += front
        longer[1] -= k - front


def _random_span(corpus: _Corpus, exclude: int, length: int, rng: random.Random) -> list[int]:
    """Tokens from a random sentence of another document on, until `length` or its end."""
    for _ in range(10):
        other = int(corpus.documents[rng.randrange(len(corpus.documents))])
        if other != exclude:
            break
    s0, s1 = corpus.sentences_of(other)
    j = rng.randrange(s0, s1)
    start = int(corpus.bounds[j])
    end_sentence = int(np.searchsorted(corpus.bounds, start + max(length, 1), side="left"))
    end_sentence = min(max(end_sentence, j + 1), s1)
    return [start, int(corpus.bounds[end_sentence])]


class _NspBuilder:
    """Google's create_instances_from_document, one document at a time."""

    def __init__(self, corpus: _Corpus, max_seq_len: int, short_seq_prob: float, rng: random.Random, emit):
        self.corpus, self.rng, self.emit = corpus, rng, emit
        self.max_tokens = max_seq_len - 3
        self.short_seq_prob = short_seq_prob
        self.owed_is_next = 0  # IsNext draws that had to become NotNext, repaid at the next NotNext draw

    def _target(self) -> int:
        if self.rng.random() >= self.short_seq_prob:
            return self.max_tokens
        return self.rng.randint(2, self.max_tokens)

    def _draw_is_next(self, possible: bool) -> bool:
        is_next = self.rng.random() < 0.5
        if is_next and not possible:
            self.owed_is_next += 1
        elif not is_next and possible and self.owed_is_next:
            self.owed_is_next -= 1
            is_next = True
        return is_next and possible

    def document(self, d: int) -> None:
        bounds, rng = self.corpus.bounds, self.rng
        s0, s1 = self.corpus.sentences_of(d)
        target = self._target()
        chunk_start, i = s0, s0
        while i < s1:
            if i < s1 - 1 and bounds[i + 1] - bounds[chunk_start] < target:
                i += 1
                continue
            is_next = self._draw_is_next(possible=i > chunk_start or i + 1 < s1)
            if is_next and i == chunk_start:
                i += 1  # a lone sentence takes the next one as its B
            if is_next:
                a_end = rng.randint(chunk_start + 1, i)  # first sentence of B
                a, b = [int(bounds[chunk_start]), int(bounds[a_end])], [int(bounds[a_end]), int(bounds[i + 1])]
            else:
                a_end = chunk_start + 1 if i == chunk_start else rng.randint(chunk_start + 1, i)
                a = [int(bounds[chunk_start]), int(bounds[a_end])]
                b = _random_span(self.corpus, d, target - (a[1] - a[0]), rng)
                i = a_end - 1  # the chunk's unused sentences go back
            _truncate_pair(a, b, self.max_tokens, rng)
            self.emit(a, b, IS_NEXT if is_next else NOT_NEXT)
            chunk_start = i = i + 1
            target = self._target()


def build_nsp(store: TokenStore, documents: np.ndarray, writer: InstanceWriter, *, max_seq_len: int,
              short_seq_prob: float, dupe_factor: int, seed: int, cls_id: int, sep_id: int,
              desc: str = "instances") -> None:
    """Sentence-pair instances with NSP labels for `documents`, written to `writer`."""
    _pairs(_NspBuilder, store, documents, writer, max_seq_len, short_seq_prob, dupe_factor, seed, cls_id, sep_id,
           desc)


class _SopBuilder(_NspBuilder):
    """ALBERT's pairs: consecutive spans of one document, swapped half the time."""

    def document(self, d: int) -> None:
        bounds, rng = self.corpus.bounds, self.rng
        s0, s1 = self.corpus.sentences_of(d)
        target = self._target()
        chunk_start, i = s0, s0
        while i < s1:
            if i < s1 - 1 and bounds[i + 1] - bounds[chunk_start] < target:
                i += 1
                continue
            start, end = int(bounds[chunk_start]), int(bounds[i + 1])
            if i > chunk_start:  # split between sentences
                cut = int(bounds[rng.randint(chunk_start + 1, i)])
            elif end - start >= 2:  # one sentence: split inside it
                cut = (start + end) // 2
            else:
                chunk_start = i = i + 1
                continue
            a, b = [start, cut], [cut, end]
            _truncate_pair(a, b, self.max_tokens, rng)
            swapped = rng.random() < 0.5
            self.emit(b, a, SWAPPED) if swapped else self.emit(a, b, IN_ORDER)
            chunk_start = i = i + 1
            target = self._target()


def build_sop(store: TokenStore, documents: np.ndarray, writer: InstanceWriter, *, max_seq_len: int,
              short_seq_prob: float, dupe_factor: int, seed: int, cls_id: int, sep_id: int,
              desc: str = "instances") -> None:
    """Sentence-order instances for `documents`: [CLS] A [SEP] B [SEP], B A's continuation, swapped
    half the time (label SWAPPED), written to `writer`."""
    _pairs(_SopBuilder, store, documents, writer, max_seq_len, short_seq_prob, dupe_factor, seed, cls_id, sep_id,
           desc)


def _pairs(builder_class, store, documents, writer, max_seq_len, short_seq_prob, dupe_factor, seed, cls_id, sep_id,
           desc) -> None:
    corpus = _Corpus(store, documents)
    order_rng = np.random.default_rng(seed)
    tokens = corpus.tokens
    cls, sep = np.array([cls_id]), np.array([sep_id])

    def emit(a, b, label):
        ids = np.concatenate((cls, tokens[a[0]:a[1]], sep, tokens[b[0]:b[1]], sep))
        writer.add(ids, a_length=a[1] - a[0] + 2, label=label)

    builder = builder_class(corpus, max_seq_len, short_seq_prob, random.Random(seed), emit)
    with tqdm(total=len(documents) * dupe_factor, desc=desc, unit="doc", mininterval=2.0) as bar:
        for _ in range(dupe_factor):
            for d in order_rng.permutation(documents):
                builder.document(int(d))
                bar.update(1)


def build_packed(store: TokenStore, documents: np.ndarray, writer: InstanceWriter, *, max_seq_len: int,
                 dupe_factor: int, seed: int, cls_id: int, sep_id: int, desc: str = "instances") -> None:
    """Packed full-sentence instances (no NSP) for `documents`, written to `writer`."""
    corpus = _Corpus(store, documents)
    order_rng = np.random.default_rng(seed)
    limit = max_seq_len - 2
    pieces: list[tuple[int, int]] = []  # token ranges; (-1, -1) is a document separator
    length = 0

    def flush():
        nonlocal pieces, length
        while pieces and pieces[-1][0] < 0:
            pieces.pop()  # no separator right before the closing [SEP]
        if pieces:
            parts = [np.array([sep_id]) if s < 0 else corpus.tokens[s:e] for s, e in pieces]
            ids = np.concatenate([np.array([cls_id]), *parts, np.array([sep_id])])
            writer.add(ids, a_length=len(ids), label=NO_LABEL)
        pieces, length = [], 0

    def add(start: int, end: int):
        nonlocal length
        if length + (end - start) > limit:
            flush()
            if start < 0:
                return  # a separator never opens an instance
        pieces.append((start, end))
        length += end - start

    with tqdm(total=len(documents) * dupe_factor, desc=desc, unit="doc", mininterval=2.0) as bar:
        for _ in range(dupe_factor):
            for d in order_rng.permutation(documents):
                s0, s1 = corpus.sentences_of(int(d))
                if pieces:
                    add(-1, 0)  # (-1, 0) has length 1: the separator token
                for j in range(s0, s1):
                    start, end = int(corpus.bounds[j]), int(corpus.bounds[j + 1])
                    for cut in range(start, end, limit):  # an over-long sentence in pieces
                        add(cut, min(cut + limit, end))
                bar.update(1)
        flush()
