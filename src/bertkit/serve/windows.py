"""A request's texts as model rows under a long-input policy, and the rows' outputs put back together.

`encode_cut` gives one row per input (cut to the model's tokens, or refused with a 422 naming the
limit); `encode_windows` one row per window (`bertkit.long_inputs.Plan`), the first text of a pair
carried by each window of its second. `Encoded` remembers which input each row belongs to, so a
route's `finish` can group the outputs (`Encoded.group`) and combine them, and it writes the
headers that say what happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bertkit.long_inputs import Plan, pool_chunks
from bertkit.serve.models import ModelSpec
from bertkit.serve.requests import ApiError, Limits

TRUNCATED_HEADER = "X-Truncated-Inputs"  # the indices of inputs that were cut to the model's tokens
TRUNCATED_AT_HEADER = "X-Truncated-At"  # for each of those, the characters kept (of a pair's second text)
WINDOWED_HEADER = "X-Windowed-Inputs"  # index:windows of each input read in several windows


@dataclass
class Encoded:
    """Rows for the model, and what maps their outputs back to the inputs."""

    rows: list[tuple[list[int], list[int]]]  # (ids, type ids)
    encodings: list  # per input: its tokenizer encoding (cut: with special tokens; windows: the content only)
    plan: Plan | None = None  # windows: which input and tokens each row holds
    cut: list[int] = field(default_factory=list)  # inputs cut to the model's tokens
    kept: list[int] = field(default_factory=list)  # for each of those, the characters kept

    @property
    def windows(self) -> bool:
        return self.plan is not None

    def group(self, out: list) -> list[list]:
        """Per input, the outputs of its rows (one each unless read in windows)."""
        if self.plan is None:
            return [[o] for o in out]
        return [[out[r] for r in self.plan.rows(i)] for i in range(len(self.encodings))]

    def marks(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """((input, characters kept) of each cut input, (input, windows) of each read in several)."""
        windowed = []
        if self.plan is not None:
            counts = np.bincount(self.plan.owner, minlength=len(self.encodings)).tolist()
            windowed = [(i, n) for i, n in enumerate(counts) if n > 1]
        return list(zip(self.cut, self.kept)), windowed

    def headers(self) -> dict[str, str]:
        return headers(*self.marks())

    def tokens(self, i: int, outputs: list) -> np.ndarray:
        """(n + 2, ...) per-token outputs of input i, [CLS] and [SEP] included: its one row's, or each
        token's from the window where it has the most context."""
        if self.plan is None:
            return outputs[0]
        rows = self.plan.rows(i)
        return self.plan.gather(i, dict(zip(rows, outputs)))


def _kept(encoding) -> int:
    """The characters of the (last) text a cut encoding still covers."""
    last = max((s for s in encoding.sequence_ids if s is not None), default=0)
    ends = [b for (_, b), s in zip(encoding.offsets, encoding.sequence_ids) if s == last]
    return max(ends, default=0)


def encode_cut(spec: ModelSpec, inputs: list[str], policy: str, field: str, pairs: list[str] | None) -> Encoded:
    """One row per input, cut to the model's tokens ("truncate") or refused with a 422 ("refuse")."""
    encodings = spec.tokenizer.encode_batch(inputs, pairs=pairs, max_length=spec.max_length, truncation=True)
    cut = [i for i, e in enumerate(encodings) if e.truncated]
    if cut and policy == "refuse":
        where = field if len(encodings) == 1 else f"{field}[{cut[0]}]"
        raise ApiError(422, f"{where} is longer than the model's {spec.max_length} tokens; send "
                            '"truncate": true to cut it, or "long_inputs": "windows" to read it whole', param=field)
    return Encoded([(e.ids, e.type_ids) for e in encodings], encodings, None, cut, [_kept(encodings[i]) for i in cut])


def encode_windows(spec: ModelSpec, inputs: list[str], pairs: list[str] | None, stride: int | None,
                   limits: Limits) -> Encoded:
    """One row per window of each input (of each pair's second text, the first carried by every
    window); at most `limits.max_windows` rows in all (413 beyond)."""
    tok = spec.tokenizer
    whole = tok.encode_batch(inputs if pairs is None else pairs, truncation=False, add_special_tokens=False)
    prefixes = None if pairs is None else tok.encode_ids_batch(inputs)
    plan = Plan([e.ids for e in whole], spec.max_length, tok, prefixes, stride)
    if len(plan) > limits.max_windows:
        raise ApiError(413, f"the inputs make {len(plan):,} windows of {spec.max_length} tokens; the limit is "
                            f"{limits.max_windows:,} per request")
    return Encoded([plan.row(r) for r in range(len(plan))], whole, plan)


def shape_vector(v: np.ndarray, size: int | None, normalize: bool) -> np.ndarray:
    """The first `size` components (Matryoshka), then unit length when `normalize`."""
    v = v[:size] if size else v
    return v / max(float(np.linalg.norm(v)), 1e-12) if normalize else v


def pooled(encoded: Encoded, out: list, size: int | None, normalize: bool) -> list[np.ndarray]:
    """One vector per input: its row's, or its chunks' averaged by their token counts (each chunk
    cut to `size` components and unit length first when `normalize`, as the result is)."""
    result = []
    for i, vectors in enumerate(encoded.group(out)):
        chunks = np.stack([shape_vector(v, size, normalize) for v in vectors])
        if len(vectors) == 1:
            result.append(chunks[0])
        else:
            result.append(pool_chunks(chunks, encoded.plan.lengths[encoded.plan.rows(i)], normalize))
    return result


def headers(cut: list[tuple[int, int]], windowed: list[tuple[int, int]]) -> dict[str, str]:
    """The response headers that say what happened to long inputs (none when nothing did)."""
    out = {}
    if cut:
        out[TRUNCATED_HEADER] = ",".join(str(i) for i, _ in sorted(cut))
        out[TRUNCATED_AT_HEADER] = ",".join(str(k) for _, k in sorted(cut))
    if windowed:
        out[WINDOWED_HEADER] = ",".join(f"{i}:{n}" for i, n in sorted(windowed))
    return out


def combine(groups: list[tuple[list[int], Encoded]], n: int):
    """Several `Encoded` of one request, each holding the inputs `chosen`, as one: (rows, a function
    from the rows' outputs to each input's outputs in request order, the headers)."""
    rows = [row for _, encoded in groups for row in encoded.rows]

    def group(out: list) -> list[list]:
        per_input: list = [None] * n
        at = 0
        for chosen, encoded in groups:
            for i, outputs in zip(chosen, encoded.group(out[at:at + len(encoded.rows)])):
                per_input[i] = outputs
            at += len(encoded.rows)
        return per_input

    cut, windowed = [], []
    for chosen, encoded in groups:
        marks = encoded.marks()
        cut += [(chosen[i], k) for i, k in marks[0]]
        windowed += [(chosen[i], w) for i, w in marks[1]]
    return rows, group, headers(cut, windowed)
