"""Learning a WordPiece vocabulary that is the same on every run: read the files and count words
(`read_pieces`), then merge pairs.

The `tokenizers` WordPieceTrainer (BPE merges over word counts) numbers the "##" continuation
pieces in the order it walks a hash map of the words, whose seed is random per process, and
breaks equal pair counts by those numbers (huggingface/tokenizers#1794); it also drops the
rarest characters past `limit_alphabet` in hash order. So one corpus gave a different vocab.txt
on every run. This is the same algorithm with every order defined:

- alphabet: the `limit_alphabet` most frequent characters (equal counts: lower code point
  kept), numbered in code-point order right after the special tokens, as the trainer does;
- continuation pieces "##c": numbered in code-point order of c;
- merges: the pair of highest count first, equal counts by the pair's two strings in
  code-point order; a merged piece joins the vocabulary when it is new.

Words are cut by the pipeline's own normalizer and pre-tokenizer (BERT's), so training sees the
words encoding will see. Where this differs from the tokenizers trainer: a word that can only
encode as [UNK] (over `max_word_chars` characters, or holding a character left out of the
alphabet) takes no part in merges, rather than merging across the missing character.
"""

from __future__ import annotations

import heapq
import itertools
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

PREFIX = "##"
LINES_PER_CHUNK = 4096  # lines joined before one split and count: fewer, larger calls into C
STATUS_EVERY_S = 15.0


def count_pieces(lines: Iterable[str]) -> Counter:
    """How often each piece between ASCII spaces occurs (empty pieces of repeated spaces left out)."""
    pieces: Counter = Counter()
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == LINES_PER_CHUNK:
            pieces.update(" ".join(chunk).split(" "))
            chunk.clear()
    pieces.update(" ".join(chunk).split(" "))
    pieces.pop("", None)
    return pieces


def words_from_pieces(pieces: Mapping[str, int], normalizer, pre_tokenizer) -> Counter:
    """How often each word occurs, words as `pre_tokenizer(normalizer(text))` cuts the text.

    Each distinct piece goes through the pipeline once, weighted by its count. That is exact:
    BERT's normalizer and pre-tokenizer act on each character alone, a space splits words in
    both, and a space is a starter, so accent stripping (NFD) never reorders marks across it.
    A piece of ASCII letters and digits alone is one word as it stands (lower-cased when the
    pipeline lower-cases), which spares the pipeline most pieces: it is the slow part.
    """
    lowercase = normalizer.normalize_str("A") == "a"
    words: Counter = Counter()
    for piece, count in pieces.items():
        if piece.isascii() and piece.isalnum():
            words[piece.lower() if lowercase else piece] += count
        else:
            for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(piece)):
                words[word] += count
    return words


def alphabet(word_counts: Mapping[str, int], limit: int) -> list[str]:
    """The `limit` most frequent characters (weighted by word count), in code-point order."""
    chars: dict[str, int] = defaultdict(int)
    for word, count in word_counts.items():
        for ch in word:
            chars[ch] += count
    kept = sorted(chars, key=lambda ch: (-chars[ch], ch))[:limit]
    return sorted(kept)


def learn_vocabulary(word_counts: Mapping[str, int], vocab_size: int, specials: Sequence[str],
                     min_frequency: int = 2, limit_alphabet: int = 1000, max_word_chars: int = 100,
                     status: bool = False) -> list[str]:
    """The vocabulary in id order: specials, alphabet, "##" pieces, then merged pieces until
    `vocab_size` entries or no pair occurs `min_frequency` times. Never fewer entries than
    specials + alphabet + "##" pieces, even when that exceeds `vocab_size` (as the trainer)."""
    vocab = list(dict.fromkeys(specials))
    vocab += [ch for ch in alphabet(word_counts, limit_alphabet) if ch not in vocab]
    allowed = set(vocab)
    # words encoding can split into known pieces; single characters have no pair to merge
    kept = [(w, c) for w, c in word_counts.items()
            if 1 < len(w) <= max_word_chars and allowed.issuperset(w)]
    continuing = sorted({ch for w, _ in kept for ch in w[1:]})
    vocab += [PREFIX + ch for ch in continuing]
    index = {token: i for i, token in enumerate(vocab)}
    words = [[index[w[0]]] + [index[PREFIX + ch] for ch in w[1:]] for w, _ in kept]
    counts = [c for _, c in kept]
    _merge(words, counts, vocab, index, vocab_size, min_frequency, status)
    return vocab


def _merge(words: list[list[int]], counts: list[int], vocab: list[str], index: dict[str, int],
           vocab_size: int, min_frequency: int, status: bool) -> None:
    """Merge the most frequent pair in every word until the vocabulary is full; grows `vocab`
    and `index` and rewrites `words` in place.

    Pair counts are kept up to date incrementally and a heap holds (-count, left, right): an
    entry whose count went stale since it was pushed is pushed again with the current count
    when it surfaces, and every pair whose count grew is pushed anew, so the top entry that is
    not stale is the true maximum, equal counts ordered by the strings."""
    pair_counts: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], list[int]] = defaultdict(list)  # words that held the pair
    for i, (word, count) in enumerate(zip(words, counts)):
        for pair in itertools.pairwise(word):
            pair_counts[pair] += count
            where[pair].append(i)
    heap = [(-n, vocab[a], vocab[b], a, b) for (a, b), n in pair_counts.items()]
    heapq.heapify(heap)
    start = last = time.perf_counter()
    while len(vocab) < vocab_size and heap:
        negative, left, right, a, b = heapq.heappop(heap)
        n = pair_counts.get((a, b), 0)
        if n != -negative:
            if n > 0:
                heapq.heappush(heap, (-n, left, right, a, b))
            continue
        if n < min_frequency:
            break
        token = left + right[len(PREFIX):]  # the right part is never first, so always "##..."
        new = index.setdefault(token, len(vocab))
        if new == len(vocab):
            vocab.append(token)
        for pair in _apply(a, b, new, where.pop((a, b)), words, counts, pair_counts, where):
            if pair_counts[pair] > 0:
                heapq.heappush(heap, (-pair_counts[pair], vocab[pair[0]], vocab[pair[1]], *pair))
        now = time.perf_counter()
        if status and now - last >= STATUS_EVERY_S:
            last = now
            print(f"merging: {len(vocab):,}/{vocab_size:,} entries, {now - start:.0f} s", file=sys.stderr, flush=True)


def _apply(a: int, b: int, new: int, held: list[int], words: list[list[int]], counts: list[int],
           pair_counts: dict, where: dict) -> set[tuple[int, int]]:
    """Replace each `a b` by `new`, left to right, in the words listed in `held` (some no
    longer hold the pair; that is cheaper than keeping the lists exact). Returns the pairs
    whose counts grew."""
    grown: set[tuple[int, int]] = set()
    for i in set(held):
        word, count = words[i], counts[i]
        j = 0
        while True:
            try:
                j = word.index(a, j)
            except ValueError:
                break
            if j + 1 == len(word):
                break
            if word[j + 1] != b:
                j += 1
                continue
            # the neighbours lose their pair with a or b and gain one with new; working on the
            # already rewritten word keeps runs such as "a b a b" right
            pair_counts[(a, b)] -= count
            if j > 0:
                pair_counts[(word[j - 1], a)] -= count
                grown.add(pair := (word[j - 1], new))
                pair_counts[pair] += count
                where[pair].append(i)
            if j + 2 < len(word):
                pair_counts[(b, word[j + 2])] -= count
                grown.add(pair := (new, word[j + 2]))
                pair_counts[pair] += count
                where[pair].append(i)
            word[j:j + 2] = [new]
            j += 1
    return grown


def read_pieces(paths: list[Path], status: bool = False, every_s: float = 15.0) -> Counter:
    """The space-separated pieces of every file, counted (`count_pieces`).

    A file `read_lines` refuses (not valid UTF-8, as a binary file is, or a broken .gz/.xz) is
    skipped whole with a warning on stderr naming file and line, as `bertkit prepare` skips it,
    so the vocabulary comes from the text prepare will use. When no file is left, the error
    itself is raised: one line.
    With `status`, a line on stderr every `every_s` seconds says how far reading has got."""
    from bertkit.errors import UserError
    from bertkit.io import read_lines

    pieces: Counter = Counter()
    skipped: list = []  # UserErrors
    chars = 0

    def tally(lines: Iterator[str]) -> Iterator[str]:
        nonlocal chars
        for line in lines:
            chars += len(line) + 1
            yield line

    start = last = time.perf_counter()
    for n, p in enumerate(paths, start=1):
        try:
            # added only once read whole: a skipped file leaves nothing behind, as in prepare
            pieces.update(count_pieces(tally(read_lines(p))))
        except UserError as e:
            skipped.append(e)
        now = time.perf_counter()
        # a closing total too, once reading has been long enough to need status lines
        if status and (now - last >= every_s or (n == len(paths) and now - start >= every_s)):
            last = now
            print(f"read {n}/{len(paths)} files, {chars / 1e6:.1f} M characters, "
                  f"{chars / 1e6 / (now - start):.2f} M/s", file=sys.stderr, flush=True)
    if skipped and not pieces:
        if len(skipped) == 1:
            raise skipped[0]
        raise UserError(f"no text to learn a vocabulary from: {len(skipped)} files skipped, the first {skipped[0]}")
    for e in skipped:
        print(f"warning: {e}; skipped this file", file=sys.stderr, flush=True)
    return pieces
