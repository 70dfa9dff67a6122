"""Inputs longer than the model's tokens: one policy for every command and route that reads text.

BERT reads at most `max_position_embeddings` tokens (512; all-MiniLM-L6-v2 was trained at 256).
An input longer than the limit meets one of two policies:

- "truncate": cut to the limit (the first tokens kept), and said so: a note on stderr, a count in
  the result, the X-Truncated-Inputs header of `bertkit serve`.
- "windows": read whole, in overlapping windows of at most the limit that start `stride` tokens
  apart (half a window unless given), each packed [CLS] window [SEP] (for a pair, [CLS] first
  [SEP] window [SEP]: every window carries the first segment, as SQuAD's windows carry the
  question, cut to half the limit). What the windows give is combined by the consumer:
  classification averages (or takes the max of) the windows' logits (`aggregate`); sentence
  vectors are the windows' vectors averaged by their token counts (`pool_chunks`), or one vector
  per chunk for best-chunk retrieval; a token's label or vector comes from the window where it
  has the most context on both sides (`max_context_window`, BERT's SQuAD rule).

The same window arithmetic serves SQuAD (`data.squad`). A `Plan` keeps each input's token ids as
one numpy array and each window as (input, start, stop), so windows are built only when a batch
is run (`Plan.row`): a 100,000-token input costs its ids and one batch of windows at a time.
Inputs over MAX_INPUT_TOKENS are refused with a UserError saying to split them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bertkit.errors import UserError

POLICIES = ("truncate", "windows")
AGGREGATES = ("mean", "max")
MAX_INPUT_TOKENS = 1_000_000  # tokens of one input read in windows; more is refused


@dataclass(frozen=True)
class Policy:
    """What to do with an input longer than the limit, and how windows are laid and combined."""

    name: str = "truncate"  # "truncate" or "windows"
    stride: int | None = None  # tokens between window starts; None: half a window
    aggregate: str = "mean"  # classification: the windows' logits averaged ("mean") or their maximum ("max")

    def __post_init__(self):
        if self.name not in POLICIES:
            raise UserError(f"long inputs: policy must be one of {', '.join(POLICIES)}, not {self.name!r}")
        if self.aggregate not in AGGREGATES:
            raise UserError(f"long inputs: aggregate must be one of {', '.join(AGGREGATES)}, not {self.aggregate!r}")
        if self.stride is not None and self.stride < 1:
            raise UserError(f"--window-stride must be positive, got {self.stride}")

    @property
    def windows(self) -> bool:
        return self.name == "windows"

    def check_window(self, window: int) -> None:
        """A UserError when windows of `window` tokens would step further than a window."""
        check_stride(self.stride if self.windows else None, window)

    def settings(self) -> dict:
        """What a fine-tuned model saves (finetune.json) so evaluation and serving reproduce it."""
        return {"long_inputs": self.name, "window_stride": self.stride, "aggregate": self.aggregate}

    @classmethod
    def from_settings(cls, settings: dict) -> Policy:
        return cls(settings.get("long_inputs") or "truncate", settings.get("window_stride"),
                   settings.get("aggregate") or "mean")


def check_stride(stride: int | None, window: int) -> None:
    if stride is not None and stride > window:
        raise UserError(f"--window-stride {stride} is longer than a window ({window} tokens): windows would "
                        "skip tokens")


def window_starts(n_tokens: int, window: int, stride: int) -> list[int]:
    """Where each window of `window` tokens starts; the last one reaches the end. A stride longer
    than the window would skip tokens, so windows step by at most the window."""
    step = min(stride, window)
    starts = [0]
    while starts[-1] + window < n_tokens:
        starts.append(starts[-1] + step)
    return starts


def max_context_window(starts: Sequence[int], window: int, n_tokens: int) -> np.ndarray:
    """(n_tokens,) for each token, the index of the window where it has the most context (BERT's
    rule): its score in a window is min(tokens left of it, tokens right of it) + 0.01 * the
    window's length; ties go to the earlier window. One pass per window over its own tokens, so
    memory is O(n_tokens) however many windows there are."""
    best = np.zeros(n_tokens, dtype=np.int64)
    best_score = np.full(n_tokens, -np.inf)
    for w, start in enumerate(starts):
        stop = min(start + window, n_tokens)
        token = np.arange(start, stop)
        score = np.minimum(token - start, stop - 1 - token) + 0.01 * (stop - start)
        better = score > best_score[start:stop]
        best[start:stop][better] = w
        best_score[start:stop][better] = score[better]
    return best


def default_stride(window: int) -> int:
    return max(1, window // 2)


def aggregate(logits: np.ndarray, how: str = "mean") -> np.ndarray:
    """(W, L) one input's window logits -> (L,): their mean, or their maximum per output."""
    if how == "max":
        return logits.max(axis=0)
    return logits.mean(axis=0)


def pool_chunks(vectors: np.ndarray, counts: Sequence[int], normalize: bool) -> np.ndarray:
    """(W, C) one input's chunk vectors -> (C,): averaged with each chunk's token count as its weight,
    then unit length when `normalize` (the chunks are unit vectors too when the model normalises)."""
    weights = np.asarray(counts, dtype=np.float64)[:, None]
    pooled = (vectors.astype(np.float64) * weights).sum(axis=0) / weights.sum()
    if normalize:
        pooled /= max(float(np.linalg.norm(pooled)), 1e-12)
    return pooled.astype(np.float32)


def best_chunk(scores: np.ndarray, owner: np.ndarray, n_docs: int) -> np.ndarray:
    """(Q, R) scores of R chunks, `owner` (R,) ascending (each chunk's document) -> (Q, n_docs), each
    document's best chunk; -inf for a document with no chunk among these."""
    out = np.full((len(scores), n_docs), -np.inf, dtype=np.float32)
    if not owner.size:
        return out
    firsts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])  # each document's first chunk here
    out[:, owner[firsts]] = np.maximum.reduceat(scores, firsts, axis=1)
    return out


class Plan:
    """The windows of several inputs. Input i is `contents[i]` (token ids, no special tokens) and,
    for a pair, `prefixes[i]` (the first segment, carried by each of its windows). Row r covers
    content tokens start[r]:stop[r] of input owner[r]; with `first_only` every input has one row,
    its first window: truncation, with the same ids as the tokenizer's."""

    def __init__(self, contents: Sequence[Sequence[int]], max_length: int, tokenizer,
                 prefixes: Sequence[Sequence[int]] | None = None, stride: int | None = None,
                 first_only: bool = False, max_tokens: int = MAX_INPUT_TOKENS):
        """`tokenizer` gives the special tokens' places (its `template`) and the padding id."""
        self.template, self.pad_id = tokenizer.template, tokenizer.pad_id
        self.max_length = max_length
        self.contents = [np.asarray(c, dtype=np.int64) for c in contents]
        self.prefix_cut = 0  # first segments longer than half the limit, cut to it
        self.prefixes = [self._prefix(p, max_length) for p in prefixes] if prefixes is not None else None
        owner, start, stop, self.sizes, self.strides = [], [], [], [], []
        for i, content in enumerate(self.contents):
            size = self.window(i)
            if size < 1:
                raise UserError(f"a limit of {max_length} tokens leaves no room for a window")
            if not first_only and len(content) > max_tokens:
                raise UserError(f"input {i + 1} has {len(content):,} tokens; windows read at most {max_tokens:,} "
                                "tokens of one input: split it into smaller documents")
            check_stride(None if first_only else stride, size)
            step = stride or default_stride(size)
            starts = [0] if first_only else window_starts(len(content), size, step)
            owner += [i] * len(starts)
            start += starts
            stop += [min(s + size, len(content)) for s in starts]
            self.sizes.append(size)
            self.strides.append(step)
        self.owner, self.start, self.stop = (np.asarray(x, dtype=np.int64) for x in (owner, start, stop))
        self.first_row = np.searchsorted(self.owner, np.arange(len(self.contents)))  # owner ascends

    def _prefix(self, ids: Sequence[int], max_length: int) -> list[int]:
        keep = max(1, (max_length - self.template.pair_count) // 2)
        if len(ids) > keep:
            self.prefix_cut += 1
        return list(ids[:keep])

    def window(self, i: int) -> int:
        """Content tokens per window of input i: the limit less its specials and first segment."""
        if self.prefixes is None:
            return self.max_length - self.template.single_count
        return self.max_length - self.template.pair_count - len(self.prefixes[i])

    def __len__(self) -> int:
        return len(self.owner)

    @property
    def lengths(self) -> np.ndarray:
        """(R,) tokens of each row, specials included."""
        if self.prefixes is None:
            extra = self.template.single_count
        else:
            extra = np.asarray([self.template.pair_count + len(self.prefixes[i]) for i in self.owner])
        return (self.stop - self.start) + extra

    def offset(self, r: int) -> int:
        """Position in row r of its first content token."""
        if self.prefixes is None:
            return len(self.template.single[0])
        return self.template.second_offset(len(self.prefixes[self.owner[r]]))

    def row(self, r: int) -> tuple[list[int], list[int]]:
        """(input ids, token type ids) of row r, laid out as the tokenizer lays out one text or a pair."""
        i, a, b = int(self.owner[r]), int(self.start[r]), int(self.stop[r])
        body = self.contents[i][a:b].tolist()
        if self.prefixes is None:
            return self.template.wrap(body)
        return self.template.wrap(self.prefixes[i], body)

    def rows(self, i: int) -> range:
        """The rows of input i."""
        end = self.first_row[i + 1] if i + 1 < len(self.contents) else len(self.owner)
        return range(int(self.first_row[i]), int(end))

    def long(self, i: int) -> bool:
        """Input i is longer than one window (read in several, or cut)."""
        return len(self.contents[i]) > self.sizes[i]

    def covered(self, i: int) -> int:
        """Content tokens of input i that its rows read: all, or with `first_only` the first window."""
        return int(self.stop[self.rows(i)[-1]])

    def best_rows(self, i: int) -> np.ndarray:
        """(covered,) for each content token of input i that its rows read, the row where it has the
        most context."""
        rows = self.rows(i)
        return rows.start + max_context_window(self.start[rows.start:rows.stop], self.sizes[i], self.covered(i))

    def place(self, r: int, row_out: np.ndarray, out: np.ndarray, best: np.ndarray) -> None:
        """Copy row r's per-token outputs into `out`, its input's (covered + 2, ...) array, where
        they belong: [CLS] from the first row, [SEP] from the last, each content token from the row
        where it has the most context (`best`, from `best_rows`)."""
        i, a, b = int(self.owner[r]), int(self.start[r]), int(self.stop[r])
        rows = self.rows(i)
        if r == rows.start:
            out[0] = row_out[0]
        if r == rows.stop - 1:
            out[-1] = row_out[self.offset(r) + b - a]
        mine = a + np.flatnonzero(best[a:b] == r)
        out[1 + mine] = row_out[self.offset(r) + mine - a]

    def gather(self, i: int, outputs: Sequence[np.ndarray]) -> np.ndarray:
        """(covered + 2, ...) per-token outputs of input i from `outputs[r]`, each row's (see `place`)."""
        rows, best = self.rows(i), self.best_rows(i)
        first = outputs[rows.start]
        out = np.empty((len(best) + 2, *first.shape[1:]), dtype=first.dtype)
        for r in rows:
            self.place(r, outputs[r], out, best)
        return out

    def report(self, policy: str) -> LongReport:
        long = sum(self.long(i) for i in range(len(self.contents)))
        return LongReport(policy, self.max_length, len(self.contents), long, len(self),
                          self.strides[0] if self.strides else None, self.prefix_cut)


@dataclass
class LongReport:
    """What happened to long inputs: the counts a command prints and a result records."""

    policy: str  # "truncate" or "windows"
    limit: int  # tokens per input or window, special tokens included
    inputs: int
    long: int  # inputs longer than the limit: cut ("truncate") or read in several windows ("windows")
    windows: int = 0  # rows run in all (each input's windows)
    stride: int | None = None  # tokens between window starts (the first input's, when they differ)
    prefix_cut: int = 0  # pairs whose first segment was cut to half the limit (windows)

    @classmethod
    def from_dict(cls, d: dict) -> LongReport:
        return cls(d["policy"], d["limit"], d["inputs"], d["long"], d.get("windows", 0), d.get("stride"),
                   d.get("first_segments_cut", 0))

    def as_dict(self) -> dict:
        out = {"policy": self.policy, "limit": self.limit, "inputs": self.inputs, "long": self.long}
        if self.policy == "windows":
            out.update(windows=self.windows, stride=self.stride, first_segments_cut=self.prefix_cut)
        return out

    def note(self, what: str = "") -> str | None:
        """One line for stderr, None when no input was long; `what` says how windows were combined."""
        if not self.long and not self.prefix_cut:
            return None
        head = f"{self.long:,} of {self.inputs:,} inputs were longer than {self.limit} tokens"
        if self.policy == "truncate":
            return f"{head} and were cut to them (--long-inputs windows reads them whole)"
        extra = f"; {self.prefix_cut:,} first segments cut to half the limit" if self.prefix_cut else ""
        how = f", {what}" if what else ""
        return f"{head}: read in {self.windows:,} windows in all (stride {self.stride}){how}{extra}"


def merge_reports(reports: Sequence[LongReport], policy: str, limit: int) -> LongReport:
    """One report for inputs planned in several groups (a corpus read a chunk at a time)."""
    strides = [r.stride for r in reports if r.stride is not None]
    return LongReport(policy, limit, sum(r.inputs for r in reports), sum(r.long for r in reports),
                      sum(r.windows for r in reports), strides[0] if strides else None,
                      sum(r.prefix_cut for r in reports))
