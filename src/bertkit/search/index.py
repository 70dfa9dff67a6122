"""A search index folder: built in one streaming pass, searched exactly or through an HNSW graph.

Layout (no pickles anywhere): `meta.json` (model, pooling, sizes, storage type, ANN settings),
`passages.jsonl` + `offsets.npy` (the passages, seekable), `vectors.npy` (+ `scales.npy` for
int8) and, for corpora of at least `ann_threshold` passages, `ann.usearch` (usearch's HNSW
graph, memory-mapped when searched). Building streams: passages are copied to the store first
(which counts them), then embedded `chunk` at a time into the memory-mapped vector file and the
graph, so memory holds one chunk of text plus the vectors' own size, not the corpus.

Below the threshold a query is scored against every vector (exact; fast at that size). Above it
the graph proposes `max(2k, 32)` candidates, which are rescored exactly against the stored
vectors, so every reported score is the same inner product exact search reports; equal scores
keep index order.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import UserError
from bertkit.io import read_json, write_json
from bertkit.search.passages import PassageStore, read_passages, write_store
from bertkit.search.vectors import DTYPES, Vectors, VectorWriter

META = "meta.json"
ANN_FILE = "ann.usearch"
FORMAT = "bertkit-search-index"
_USEARCH_DTYPE = {"fp32": "f32", "fp16": "f16", "int8": "i8"}


@dataclass(frozen=True)
class IndexSettings:
    """How an index stores its vectors and when it builds a graph."""

    dtype: str = "fp32"  # vector storage: fp32, fp16 or int8 (per-row scale)
    ann_threshold: int = 50_000  # passages from which an HNSW graph is built (0: always)
    chunk: int = 4096  # passages embedded per step of the build
    connectivity: int = 16  # HNSW edges per node (usearch's M)
    expansion_add: int = 128  # HNSW beam width while building
    expansion_search: int = 64  # HNSW beam width while searching
    threads: int = 1  # usearch threads while building


def _new_graph(dim: int, settings: IndexSettings):
    from usearch.index import Index

    metric = "cos" if settings.dtype == "int8" else "ip"  # unit vectors: the same ranking
    return Index(ndim=dim, metric=metric, dtype=_USEARCH_DTYPE[settings.dtype], connectivity=settings.connectivity,
                 expansion_add=settings.expansion_add, expansion_search=settings.expansion_search)


def build_index(docs: str | os.PathLike, out: str | os.PathLike, encoder, settings: IndexSettings = IndexSettings(),
                progress: bool = True) -> dict:
    """Embed every passage of `docs` into the folder `out` (which must exist); returns the meta."""
    from tqdm import tqdm

    if settings.dtype not in DTYPES:
        raise UserError(f"vector storage must be one of {', '.join(DTYPES)}, not {settings.dtype!r}")
    out, start = Path(out), time.perf_counter()
    count = write_store(read_passages(docs), out)
    if count == 0:
        raise UserError("no passages to index", docs)
    dim = encoder.model.config.hidden_size
    store, writer = PassageStore(out), VectorWriter(out, count, dim, settings.dtype)
    graph = _new_graph(dim, settings) if count >= settings.ann_threshold else None
    cut = 0
    with tqdm(total=count, unit="passage", desc="indexing", disable=not progress, smoothing=0.05) as bar:
        for _, texts in store.batches(settings.chunk):
            report: dict = {}
            vectors = encoder.encode(texts, report=report)
            cut += report["cut"]
            if graph is not None:
                graph.add(np.arange(writer.filled, writer.filled + len(vectors)), vectors, threads=settings.threads)
            writer.add(vectors)
            bar.update(len(texts))
    writer.close()
    store.close()
    if graph is not None:
        graph.save(str(out / ANN_FILE))
    meta = {"format": FORMAT, "version": 1, "model": str(Path(encoder.model_dir).resolve()),
            "pooling": encoder.pooling, "precision": encoder.precision, "normalized": True,
            "max_length": encoder.max_length, "count": count,
            "dim": dim, "dtype": settings.dtype, "cut": cut, "source": str(docs),
            "ann": None if graph is None else {"library": "usearch", "file": ANN_FILE, **asdict(settings)},
            "build_seconds": round(time.perf_counter() - start, 3)}
    write_json(out / META, meta)
    return meta


def read_meta(folder: str | os.PathLike) -> dict:
    """An index folder's meta.json, checked: a UserError naming the folder when it is no index."""
    folder = Path(folder)
    if not (folder / META).is_file():
        raise UserError("not a search index (no meta.json); build one with `bertkit index`", folder)
    meta = read_json(folder / META, "an index's meta.json")
    if meta.get("format") != FORMAT:
        raise UserError(f"not a bertkit search index (format {meta.get('format')!r})", folder / META)
    return meta


class SearchIndex:
    """An index folder opened for queries: vectors and graph memory-mapped, passages seeked."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.meta = read_meta(self.folder)
        self.vectors = Vectors(self.folder)
        self.passages = PassageStore(self.folder)
        self.graph = None
        if self.meta.get("ann"):
            from usearch.index import Index

            self.graph = Index.restore(str(self.folder / self.meta["ann"]["file"]), view=True)
            self.graph.expansion_search = self.meta["ann"]["expansion_search"]

    def __len__(self) -> int:
        return len(self.vectors)

    def search(self, queries: np.ndarray, k: int, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(positions (Q, k'), scores (Q, k')) of the best k passages per unit query vector, k' = min(k, N)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self.graph is None or exact:
            return self.vectors.top_k(queries, k)
        want = min(len(self), max(2 * k, 32))
        found = self.graph.search(queries, want)
        if hasattr(found, "counts"):  # several queries: BatchMatches (Q, want) with a count per row
            keys, counts = np.asarray(found.keys, dtype=np.int64), np.asarray(found.counts).reshape(-1)
        else:  # one query: Matches holds only the keys found
            keys, counts = np.asarray(found.keys, dtype=np.int64).reshape(1, -1), [len(found.keys)]
        rows = [self.vectors.rescore(q[None], keys[i, :counts[i]][None], k) for i, q in enumerate(queries)]
        k_out = min(len(r[0][0]) for r in rows)
        return (np.vstack([r[0][:, :k_out] for r in rows]), np.vstack([r[1][:, :k_out] for r in rows]))

    def hits(self, positions: np.ndarray, scores: np.ndarray) -> list[dict]:
        """One query's results as {"rank", "id", "score", "text"}, best first."""
        return [{"rank": rank, **self.passages.get(int(p)), "score": float(s)}
                for rank, (p, s) in enumerate(zip(positions, scores), start=1)]

    def close(self) -> None:
        self.passages.close()
