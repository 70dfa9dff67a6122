"""Quantised first-stage rows of an index (`index --quantize int8|binary`), rescored from the kept vectors.

A quantised index keeps two copies of its vectors: `vectors.npy` (fp32, or `--dtype` fp16/int8), the
full-precision rows, memory-mapped and read only for the few candidates a query rescores, and
`quantized.npy`, the small rows every query scans, read whole into memory (the only rows a search
holds there; `--in-memory` reads the rest too):

- int8 (calibrated, as sentence-transformers' `quantize_embeddings(..., precision="int8",
  calibration_embeddings=...)`): each dimension's [min, max] over every vector of the index
  (`ranges.npy`, float32 (2, D)) cut into 256 buckets; a value's code is floor((v - min) / step) - 128,
  step = (max - min) / 255, clipped to [-128, 127], the codes sentence-transformers gives. D bytes a
  vector, no per-row scale. The stored `--dtype int8` differs: one scale per row (max |v| / 127,
  symmetric about 0, 255 levels), so it keeps a row's own range but spends levels on ranges a
  dimension never reaches; calibrated int8 spends all 256 on the range each dimension uses.
  A code is read back as its bucket's centre, min + (code + 128.5) * step, where sentence-transformers
  reads its lower edge: the same ranking (the half step adds one constant per query), closer scores.
  The first stage is asymmetric: the fp32 query against the dequantised rows, computed as
  (q * step) @ codes + q @ (min + 128.5 * step).
- binary: one sign bit per dimension (v > 0), `np.packbits` rows padded with zero bytes to whole
  64-bit words (48 bytes for 384 dimensions; the first ceil(D / 8) bytes are sentence-transformers'
  "ubinary"); the query's bits meet every row by XOR and popcount (`np.bitwise_count` on uint64
  words), the Hamming distance h, scored 1 - 2h / D (the cosine of the two sign vectors).

Both scan every quantised row exactly (no HNSW graph: a graph's own edges, ~128 bytes a vector at
connectivity 16, would outweigh binary's 48), keep k * `oversample` candidates by (-score, position),
and rescore them with the fp32 query against the kept vectors: the reported score is then the inner
product exact search reports, ties in index order. Without rescoring the first stage's scores and
top k are returned as they are.

The index's vectors are always unit length (`build_index`, `build_from_shards` normalise), so
normalisation never needs checking here: sign bits ignore a row's norm anyway, and calibration sees
rows of one scale.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bertkit.errors import UserError
from bertkit.search.vectors import SCAN_ROWS, Vectors, open_rows, scan_top_k

QUANTIZATIONS = ("int8", "binary")
QUANTIZED = "quantized.npy"
RANGES = "ranges.npy"
OVERSAMPLE = 4  # candidates rescored per hit: sentence-transformers' quantization example rescores 4x
CONVERT_ROWS = 2048  # int8 rows widened to float32 at a time (3 MB at 384 wide: stays in cache)


def check_quantize(quantize: str | None, chunks: bool = False, graph_size: int = 0) -> None:
    """A UserError when `quantize` is unknown or asked with what it cannot go with."""
    if quantize is None:
        return
    if quantize not in QUANTIZATIONS:
        raise UserError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}, not {quantize!r}")
    if chunks:
        raise UserError("--quantize scores one vector per passage; not with --best-chunk")
    if graph_size:
        raise UserError("--graph-size cuts HNSW graphs; a quantised index has none (its rows are scanned)")


def row_bytes(quantize: str, dim: int) -> int:
    """Bytes of one quantised row."""
    return dim if quantize == "int8" else 8 * -(-dim // 64)


def calibrate(vectors: Vectors) -> np.ndarray:
    """float32 (2, D): each dimension's min and max over every stored vector, streamed."""
    lo, hi = None, None
    for start in range(0, len(vectors), SCAN_ROWS):
        rows = vectors.rows(start, min(start + SCAN_ROWS, len(vectors)))
        lo = rows.min(axis=0) if lo is None else np.minimum(lo, rows.min(axis=0))
        hi = rows.max(axis=0) if hi is None else np.maximum(hi, rows.max(axis=0))
    return np.vstack([lo, hi]).astype(np.float32)


def _steps(ranges: np.ndarray) -> np.ndarray:
    """Each dimension's bucket width; 0 where the dimension never varies (every code is then -128)."""
    return ((ranges[1] - ranges[0]) / np.float32(255)).astype(np.float32)


def int8_codes(rows: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """float32 (N, D) -> int8 (N, D), sentence-transformers' calibrated int8 codes."""
    steps = _steps(ranges)
    buckets = np.floor((rows - ranges[0]) / np.where(steps == 0, np.float32(1), steps))
    return (np.clip(buckets, 0, 255) - 128).astype(np.int8)


def dequantize(codes: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """int8 codes (N, D) -> float32 bucket centres (N, D) (a dimension that never varies: its one value)."""
    return ranges[0] + (codes.astype(np.float32) + np.float32(128.5)) * _steps(ranges)


def binary_codes(rows: np.ndarray) -> np.ndarray:
    """float32 (N, D) -> uint8 (N, 8 * ceil(D / 64)): sign bits packed, padded to whole uint64 words."""
    bits = np.packbits(rows > 0, axis=1)  # (N, ceil(D / 8))
    width = row_bytes("binary", rows.shape[1])
    return np.pad(bits, ((0, 0), (0, width - bits.shape[1]))) if width > bits.shape[1] else bits


def write_quantized(folder: str | os.PathLike, quantize: str) -> dict:
    """Quantise the index's stored vectors into `folder`/quantized.npy (and ranges.npy for int8),
    streamed; meta.json's "quantization"."""
    folder = Path(folder)
    vectors = Vectors(folder)
    n, dim = vectors.data.shape
    ranges = None
    if quantize == "int8":
        ranges = calibrate(vectors)
        np.save(folder / RANGES, ranges, allow_pickle=False)
    dtype = np.int8 if quantize == "int8" else np.uint8
    out = open_rows(folder / QUANTIZED, dtype, (n, row_bytes(quantize, dim)))
    for start in range(0, n, SCAN_ROWS):
        rows = vectors.rows(start, min(start + SCAN_ROWS, n))
        out[start:start + len(rows)] = int8_codes(rows, ranges) if ranges is not None else binary_codes(rows)
    out.flush()
    del out
    return {"kind": quantize, "file": QUANTIZED, "ranges": RANGES if ranges is not None else None,
            "bytes_per_vector": row_bytes(quantize, dim), "calibration": f"min and max of {n:,} vectors"
            if ranges is not None else None}


class QuantizedRows:
    """An index's quantised rows, scanned exactly; `search` adds the rescoring."""

    def __init__(self, folder: str | os.PathLike, quantization: dict, dim: int):
        folder = Path(folder)
        self.kind, self.dim = quantization["kind"], dim
        self.codes = np.load(folder / quantization["file"], allow_pickle=False)  # in memory: every query reads all
        self.ranges = np.load(folder / RANGES, allow_pickle=False) if self.kind == "int8" else None

    def __len__(self) -> int:
        return self.codes.shape[0]

    def _scores(self, queries: np.ndarray, start: int, end: int) -> np.ndarray:
        """First-stage scores (Q, end - start) of rows start:end."""
        if self.kind == "binary":
            return 1 - np.float32(2 / self.dim) * self._hamming(queries, start, end).astype(np.float32)
        steps = _steps(self.ranges)
        scaled = (queries * steps).T.astype(np.float32)  # (D, Q)
        offset = queries @ (self.ranges[0] + np.float32(128.5) * steps)  # (Q,)
        out = np.empty((len(queries), end - start), dtype=np.float32)
        wide = np.empty((min(CONVERT_ROWS, end - start), self.dim), dtype=np.float32)
        for a in range(start, end, CONVERT_ROWS):
            b = min(a + CONVERT_ROWS, end)
            np.copyto(wide[:b - a], self.codes[a:b], casting="unsafe")
            out[:, a - start:b - start] = (wide[:b - a] @ scaled).T
        return out + offset[:, None]

    def _hamming(self, queries: np.ndarray, start: int, end: int) -> np.ndarray:
        """Hamming distances (Q, end - start) between the queries' sign bits and rows start:end."""
        words = np.ascontiguousarray(self.codes[start:end]).view(np.uint64)  # (n, W)
        query_words = binary_codes(queries).view(np.uint64)  # (Q, W)
        out = np.empty((len(queries), end - start), dtype=np.uint16)
        for i, q in enumerate(query_words):
            counts = np.bitwise_count(words ^ q)  # (n, W) uint8, at most 64 each
            total = counts[:, 0].astype(np.uint16)
            for w in range(1, counts.shape[1]):  # column by column: faster than sum(axis=1) over a few words
                total += counts[:, w]
            out[i] = total
        return out

    def top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact first-stage (positions (Q, k), scores (Q, k)), best first; ties in index order."""
        return scan_top_k(len(self), len(queries), k, lambda start, end: self._scores(queries, start, end))

    def search(self, queries: np.ndarray, k: int, vectors: Vectors, oversample: int = OVERSAMPLE,
               rescore: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The best k: k * oversample first-stage candidates rescored exactly from `vectors`
        (`rescore`), or the first stage's own top k."""
        if not rescore:
            return self.top_k(queries, k)
        candidates, _ = self.top_k(queries, k * oversample)
        return vectors.rescore(queries, candidates, k)
