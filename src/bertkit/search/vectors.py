"""An index's vectors on disk: fp32, fp16 or int8 rows in one .npy file, scored exactly.

Vectors are written chunk by chunk into a memory-mapped .npy (`np.lib.format.open_memmap`), so
building never holds the corpus in memory, and read back memory-mapped with `allow_pickle=False`. A
memory-mapped index reads the few rows a query rescores with `os.pread`, not through the mapping: a
page fault maps its neighbours too (the kernel's fault-around), so rescoring through the map would
make most of the file resident after a few thousand queries, where reads leave it in the page
cache, shared and reclaimable, outside the process.

int8 keeps one float32 scale per row (`scales.npy`): a row is round(v / max|v| * 127), so a
384-wide unit vector keeps ~0.4% relative error per component where a fixed scale would waste most
of the int8 range. Scores are inner products of the float32 query with the stored rows
(dequantised), which for unit vectors is the cosine.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

DTYPES = {"fp32": np.float32, "fp16": np.float16, "int8": np.int8}
VECTORS = "vectors.npy"
SCALES = "scales.npy"
SCAN_ROWS = 65_536  # rows scored per step of an exact scan: (Q, 65536) float32 scores at a time


def quantize(rows: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray | None]:
    """float32 (N, D) -> (stored rows, per-row scales or None)."""
    if dtype == "int8":
        peak = np.abs(rows).max(axis=1)
        scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)  # (N,)
        return np.rint(rows / scales[:, None]).clip(-127, 127).astype(np.int8), scales
    return rows.astype(DTYPES[dtype]), None


def open_rows(path: Path, dtype, shape: tuple[int, ...], filled: int = 0) -> np.memmap:
    """A memory-mapped .npy to fill: new, with its disk space taken now (a full disk is an OSError
    here, not a SIGBUS when a page is first written), or, when `filled` rows are already written,
    the existing file reopened."""
    if filled:
        return np.lib.format.open_memmap(path, mode="r+")
    rows = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    with open(path, "r+b") as f:
        os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
    return rows


class VectorWriter:
    """Fill an (N, D) vector file chunk by chunk, in order; `filled` rows already written continue
    a stopped build."""

    def __init__(self, folder: Path, count: int, dim: int, dtype: str, filled: int = 0):
        self.dtype = dtype
        self.rows = open_rows(folder / VECTORS, DTYPES[dtype], (count, dim), filled)
        self.scales = open_rows(folder / SCALES, np.float32, (count,), filled) if dtype == "int8" else None
        self.filled = filled

    def add(self, chunk: np.ndarray) -> None:
        stored, scales = quantize(chunk, self.dtype)
        end = self.filled + len(chunk)
        self.rows[self.filled:end] = stored
        if scales is not None:
            self.scales[self.filled:end] = scales
        self.filled = end

    def flush(self) -> None:
        self.rows.flush()
        if self.scales is not None:
            self.scales.flush()

    def close(self) -> None:
        self.flush()
        del self.rows, self.scales


class Vectors:
    """An index's stored vectors, memory-mapped; `rows` dequantises, `top_k` scans exactly."""

    def __init__(self, folder: str | os.PathLike, in_memory: bool = False):
        folder = Path(folder)
        mode = None if in_memory else "r"  # in memory: read whole, else paged in from disk as scored
        self.data = np.load(folder / VECTORS, mmap_mode=mode, allow_pickle=False)
        self.scales = (np.load(folder / SCALES, mmap_mode=mode, allow_pickle=False)
                       if (folder / SCALES).is_file() else None)
        self._file = None  # the rows rescoring reads, held open as long as the vectors (closed by `close` or the GC)
        if not in_memory and hasattr(os, "pread"):
            self._file = open(folder / VECTORS, "rb", buffering=0)  # noqa: SIM115

    def __len__(self) -> int:
        return self.data.shape[0]

    def rows(self, start: int, end: int) -> np.ndarray:
        return self._dequantize(self.data[start:end], None if self.scales is None else self.scales[start:end])

    def take(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        rows = self.data[positions] if self._file is None else self._read(positions)
        return self._dequantize(rows, None if self.scales is None else self.scales[positions])

    def _read(self, positions: np.ndarray) -> np.ndarray:
        """The rows at `positions` read from the file, each distinct row once."""
        wanted, back = np.unique(positions, return_inverse=True)
        if len(wanted) and (wanted[0] < 0 or wanted[-1] >= len(self)):
            raise IndexError(f"row {wanted[0] if wanted[0] < 0 else wanted[-1]} of {len(self)} vectors")
        width = self.data.dtype.itemsize * self.data.shape[1]
        fd, start = self._file.fileno(), self.data.offset
        raw = b"".join(os.pread(fd, width, start + int(p) * width) for p in wanted)
        return np.frombuffer(raw, dtype=self.data.dtype).reshape(len(wanted), -1)[back.reshape(-1)]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    @staticmethod
    def _dequantize(rows: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
        out = np.asarray(rows, dtype=np.float32)
        return out * scales[:, None] if scales is not None else out

    def top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact (positions (Q, k), scores (Q, k)), best first; equal scores keep index order."""
        return scan_top_k(len(self), len(queries), k, lambda start, end: queries @ self.rows(start, end).T)

    def rescore(self, queries: np.ndarray, candidates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(positions, scores) of the best k of each query's candidate positions (Q, C), exact."""
        scores = np.einsum("qd,qcd->qc", queries, self.take(candidates.reshape(-1)).reshape(
            *candidates.shape, -1))
        return merge_top_k(candidates, scores.astype(np.float32), min(k, candidates.shape[1]))


def scan_top_k(n: int, n_queries: int, k: int, scores_of) -> tuple[np.ndarray, np.ndarray]:
    """The best k of n rows for each query, (positions (Q, k), scores (Q, k)) best first, ties in
    index order: `scores_of(start, end)` scores rows [start, end) (Q, end - start), SCAN_ROWS at a time."""
    k = min(k, n)
    best_pos = np.zeros((n_queries, 0), dtype=np.int64)
    best_score = np.zeros((n_queries, 0), dtype=np.float32)
    for start in range(0, n, SCAN_ROWS):
        scores = scores_of(start, min(start + SCAN_ROWS, n))
        pos = np.broadcast_to(np.arange(start, start + scores.shape[1]), scores.shape)
        best_pos, best_score = merge_top_k(np.hstack([best_pos, pos]), np.hstack([best_score, scores]), k)
    return best_pos, best_score


def merge_top_k(positions: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of each row by (-score, position), sorted."""
    out_pos = np.empty((len(scores), k), dtype=np.int64)
    out_score = np.empty((len(scores), k), dtype=np.float32)
    for row in range(len(scores)):
        s, p = scores[row], positions[row]
        if k < len(s):  # keep the k best and every score tied with the k-th, then order those
            keep = s >= np.partition(s, len(s) - k)[len(s) - k]
            s, p = s[keep], p[keep]
        order = np.lexsort((p, -s))[:k]
        out_pos[row], out_score[row] = p[order], s[order]
    return out_pos, out_score
