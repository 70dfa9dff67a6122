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
keep index order. The graph keeps its own copy of the vectors, in `graph_dtype` (default: the
stored vectors' type; int8 a byte a component, which is what a memory-mapped search holds).
With `quantize` (int8 or binary) no graph is built: `quantized.npy`, the
quantised rows, is scanned exactly for k x oversample candidates, rescored from `vectors.npy`
(`search.quantized`).

A passage longer than the model's tokens is cut, or read in windows (`bertkit.long_inputs`):
pooled into one vector, or with `chunks` kept as one vector per window, `owners.npy` naming each
vector's passage; a passage then scores as its best chunk (the graph proposes 4x the candidates,
so that k distinct passages remain after grouping). A first pass counts the chunks, so the vector
file is sized (and its disk space taken) before any is written.

A build records how far it got in progress.json after each chunk (the passages embedded, the
vectors filled, the long-input reports), so a stopped build continues with `resume`: the same
settings (else a UserError naming each that differs), the chunks done skipped, the graph rebuilt
from the stored vectors. The vectors it writes are those of an uninterrupted build.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import UserError
from bertkit.io import WriteError, read_json, write_json
from bertkit.search.passages import PassageStore, read_passages, write_store
from bertkit.search.quantized import OVERSAMPLE, QuantizedRows, check_quantize, row_bytes, write_quantized
from bertkit.search.vectors import DTYPES, SCAN_ROWS, Vectors, VectorWriter, open_rows

META = "meta.json"
PROGRESS = "progress.json"  # while a build runs: how far it got
OWNERS = "owners.npy"  # with chunks: the passage of each vector
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
    chunks: bool = False  # one vector per window of a long passage (the encoder's policy must be windows)
    graph_size: int = 0  # vectors per HNSW graph, several graphs searched and merged (0: one); index --vectors
    quantize: str | None = None  # int8 or binary rows scanned first, rescored from the stored vectors (no graph)
    graph_dtype: str | None = None  # the graph's own copy of the vectors (None: dtype); its candidates are rescored

    @property
    def graph_storage(self) -> str:
        return self.graph_dtype or self.dtype


def _new_graph(dim: int, settings: IndexSettings):
    from usearch.index import Index

    storage = settings.graph_storage
    metric = "cos" if storage == "int8" else "ip"  # unit vectors: the same ranking
    return Index(ndim=dim, metric=metric, dtype=_USEARCH_DTYPE[storage], connectivity=settings.connectivity,
                 expansion_add=settings.expansion_add, expansion_search=settings.expansion_search)


def build_index(docs: str | os.PathLike, out: str | os.PathLike, encoder, settings: IndexSettings = IndexSettings(),
                progress: bool = True, resume: bool = False) -> dict:
    """Embed every passage of `docs` into the folder `out` (which must exist); returns the meta.
    `resume`: continue the build progress.json in `out` records."""
    check_storage(settings)
    if settings.chunks and not encoder.policy.windows:
        raise UserError("chunks need the windows policy (--long-inputs windows)")
    check_quantize(settings.quantize, settings.chunks)
    out, start = Path(out), time.perf_counter()
    dim = encoder.width  # the model's, or its --dimensions
    state = _resumed(out, docs, encoder, settings) if resume else None
    if state is None:
        state = _start(out, docs, encoder, settings)
    rows = state["rows"]
    writer = VectorWriter(out, rows, dim, settings.dtype, filled=state["filled"])
    graph = _new_graph(dim, settings) if rows >= settings.ann_threshold and not settings.quantize else None
    if graph is not None and state["filled"]:  # a continued build: the graph of the vectors written
        graph.add(np.arange(state["filled"]), Vectors(out).rows(0, state["filled"]), threads=settings.threads)
    owners = open_rows(out / OWNERS, np.int64, (rows,), state["filled"]) if settings.chunks else None
    store = PassageStore(out)
    report = _embed_store(store, encoder, settings, _Build(out, state, writer, graph, owners), progress)
    writer.close()
    store.close()
    quantization = write_quantized(out, settings.quantize) if settings.quantize else None
    if owners is not None:
        owners.flush()
    if graph is not None:
        graph.save(str(out / ANN_FILE))
    meta = {"format": FORMAT, "version": 1, "model": str(Path(encoder.model_dir).resolve()),
            "pooling": encoder.pooling, "precision": encoder.precision, "normalized": True,
            "max_length": encoder.max_length, "count": state["count"], "vectors": rows, "chunks": settings.chunks,
            "dim": dim, "dtype": settings.dtype, "cut": 0 if encoder.policy.windows else report.long,
            "long_inputs": encoder.policy.name, "window_stride": encoder.policy.stride,
            "long_inputs_report": report.as_dict(), "source": str(docs),
            "dimensions": encoder.dimensions, "prompt": encoder.prompt, "quantization": quantization,
            "ann": None if graph is None else {"library": "usearch", "file": ANN_FILE, **asdict(settings)},
            "build_seconds": round(state["seconds"] + time.perf_counter() - start, 3)}
    write_json(out / META, meta)
    (out / PROGRESS).unlink()
    return meta


def check_storage(settings: IndexSettings) -> None:
    for what, dtype in (("vector storage", settings.dtype), ("the graph's vectors", settings.graph_storage)):
        if dtype not in DTYPES:
            raise UserError(f"{what} must be one of {', '.join(DTYPES)}, not {dtype!r}")


def _identity(docs, encoder, settings: IndexSettings) -> dict:
    """What a continued build must share with the one it continues."""
    return {"docs": str(Path(docs).resolve()), "model": str(Path(encoder.model_dir).resolve()),
            "pooling": encoder.pooling, "max_length": encoder.max_length, "precision": encoder.precision,
            "batch_size": encoder.batch_size, "dimensions": encoder.dimensions, "prompt": encoder.prompt,
            "long_inputs": encoder.policy.name, "window_stride": encoder.policy.stride,
            **{k: v for k, v in asdict(settings).items() if k != "threads"}}


def _start(out: Path, docs, encoder, settings: IndexSettings) -> dict:
    """A new build: the passage store, the number of vectors, the disk space they need."""
    from bertkit.io import check_free_space, size_text

    count = write_store(read_passages(docs), out)
    if count == 0:
        raise UserError("no passages to index", docs)
    rows = count
    if settings.chunks:
        store = PassageStore(out)
        rows = sum(int(encoder.count_chunks(texts).sum()) for _, texts in store.batches(settings.chunk))
        store.close()
    dim, width = encoder.width, np.dtype(DTYPES[settings.dtype]).itemsize
    needed = rows * (dim * width + 8 * settings.chunks + 4 * (settings.dtype == "int8"))
    if settings.quantize:
        needed += rows * row_bytes(settings.quantize, dim)
    elif rows >= settings.ann_threshold:  # the graph: its copy and its edges
        needed += rows * (dim * np.dtype(DTYPES[settings.graph_storage]).itemsize + 16 * settings.connectivity)
    check_free_space(out, needed, f"{rows:,} vectors of {dim} {settings.dtype} ({size_text(needed)} with the graph)")
    state = {"identity": _identity(docs, encoder, settings), "count": count, "rows": rows, "done": 0, "filled": 0,
             "reports": [], "seconds": 0.0}
    write_json(out / PROGRESS, state)  # from here on the build can be continued
    return state


def _resumed(out: Path, docs, encoder, settings: IndexSettings) -> dict | None:
    """The recorded progress of a stopped build in `out`, checked against this one; None without one."""
    if not (out / PROGRESS).is_file():
        return None
    from bertkit.finetune.resume import differences

    state = read_json(out / PROGRESS, "an index build's progress")
    changed = differences(state.get("identity", {}), _identity(docs, encoder, settings),
                          {"docs": "--input", "chunks": "--best-chunk"})
    if changed:
        raise UserError(f"--resume with settings that differ from the build it continues: {'; '.join(changed)} "
                        f"(give its own settings, or --overwrite to start again)", out)
    return state


@dataclass
class _Build:
    """Where the vectors go, and the progress record written after each chunk."""

    out: Path
    state: dict
    writer: VectorWriter
    graph: object
    owners: np.ndarray | None

    def chunk_done(self, passages: int, report: dict, seconds: float) -> None:
        if not (self.out / PROGRESS).is_file():  # writing on would recreate the folder without its vectors
            raise WriteError(errno.ENOENT, "the index folder was deleted while it was built", self.out,
                             kept="nothing of this build (its folder is gone)")
        self.writer.flush()
        if self.owners is not None:
            self.owners.flush()
        self.state.update(done=self.state["done"] + passages, filled=self.writer.filled,
                          reports=[*self.state["reports"], report], seconds=self.state["seconds"] + seconds)
        write_json(self.out / PROGRESS, self.state)


def _embed_store(store: PassageStore, encoder, settings: IndexSettings, build: _Build, progress: bool):
    """Embed the store chunk by chunk, after the ones a stopped build did, into the build's vectors
    (and graph, and owners with chunks); the long-input report of all of it."""
    from tqdm import tqdm

    from bertkit.long_inputs import LongReport, merge_reports

    done, writer, owners = 0, build.writer, build.owners
    with tqdm(total=len(store), initial=build.state["done"], unit="passage", desc="indexing", disable=not progress,
              smoothing=0.05) as bar:
        for _, texts in store.batches(settings.chunk):
            done += len(texts)
            if done <= build.state["done"]:
                continue
            began, report = time.perf_counter(), {}
            if owners is not None:
                vectors, owner = encoder.encode(texts, report=report, chunks=True)
                owners[writer.filled:writer.filled + len(vectors)] = owner + done - len(texts)
            else:
                vectors = encoder.encode(texts, report=report)
            if build.graph is not None:
                build.graph.add(np.arange(writer.filled, writer.filled + len(vectors)), vectors,
                                threads=settings.threads)
            writer.add(vectors)
            build.chunk_done(len(texts), LongReport.from_dict(report).as_dict(), time.perf_counter() - began)
            bar.update(len(texts))
    reports = [LongReport.from_dict(r) for r in build.state["reports"]]
    return merge_reports(reports, encoder.policy.name, reports[0].limit)


def describe_partial(out: str | os.PathLike) -> str | None:
    """What a stopped build of `out` left for --resume, for a message; None when there is none."""
    from bertkit.io import partial_dir

    path = partial_dir(out)
    if not (path / PROGRESS).is_file():
        return None
    try:
        state = read_json(path / PROGRESS, "an index build's progress")
        return f"an unfinished index ({state['done']:,} of {state['count']:,} passages embedded) is kept in {path}"
    except (UserError, KeyError):
        return f"an unfinished index is kept in {path}"


def read_meta(folder: str | os.PathLike) -> dict:
    """An index folder's meta.json, checked: a UserError naming the folder when it is no index."""
    folder = Path(folder)
    if not (folder / META).is_file():
        raise UserError("not a search index (no meta.json); build one with `bertkit index`", folder)
    meta = read_json(folder / META, "an index's meta.json")
    if meta.get("format") != FORMAT:
        raise UserError(f"not a bertkit search index (format {meta.get('format')!r})", folder / META)
    return meta


def precision_mismatch(meta: dict, precision: str) -> str | None:
    """The line saying that queries encoded at `precision` meet vectors made at another (meta.json's
    "precision"); None when they match or the index does not say."""
    made = meta.get("precision")
    if made is None or made == precision:
        return None
    return (f"the index's vectors were made in {made}, the queries are encoded in {precision} (scores differ a little "
            f"from {made} queries'; --precision {made} matches them)")


class SearchIndex:
    """An index folder opened for queries: vectors and graph(s) memory-mapped (`in_memory`: read
    whole into memory instead), passages seeked. An index of several graphs (`graph_size`) asks
    each for candidates and rescores their union."""

    def __init__(self, folder: str | os.PathLike, in_memory: bool = False):
        self.folder = Path(folder)
        self.meta = read_meta(self.folder)
        self.vectors = Vectors(self.folder, in_memory)
        self.passages = PassageStore(self.folder)
        self.owners = np.load(self.folder / OWNERS, mmap_mode="r") if self.meta.get("chunks") else None
        quantization = self.meta.get("quantization")
        self.quantized = QuantizedRows(self.folder, quantization, self.meta["dim"]) if quantization else None
        self.graphs = []
        if self.meta.get("ann"):
            from usearch.index import Index

            for name in self.meta["ann"].get("files") or [self.meta["ann"]["file"]]:
                graph = Index.restore(str(self.folder / name), view=not in_memory)
                graph.expansion_search = self.meta["ann"]["expansion_search"]
                self.graphs.append(graph)
        self.graph = self.graphs[0] if self.graphs else None

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, queries: np.ndarray, k: int, exact: bool = False, oversample: int = OVERSAMPLE,
               rescore: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(positions (Q, k'), scores (Q, k')) of the best k passages per unit query vector, k' = min(k, N).
        A quantised index scans its quantised rows for k * `oversample` candidates and rescores them
        (`rescore`); `exact` scores every stored vector instead, whatever the index holds."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self.quantized is not None and not exact:
            return self.quantized.search(queries, k, self.vectors, oversample, rescore)
        if self.owners is not None:
            return self._best_chunks(queries, k, exact)
        if self.graph is None or exact:
            return self.vectors.top_k(queries, k)
        return self._graph_search(queries, k)

    def _best_chunks(self, queries: np.ndarray, k: int, exact: bool) -> tuple[np.ndarray, np.ndarray]:
        """Each passage scored by its best chunk: every chunk exactly, or the graph's candidates."""
        from bertkit.long_inputs import best_chunk
        from bertkit.search.vectors import merge_top_k

        k = min(k, len(self))
        if self.graph is None or exact:
            scores = np.full((len(queries), len(self)), -np.inf, dtype=np.float32)
            for start in range(0, len(self.vectors), SCAN_ROWS):
                stop = min(start + SCAN_ROWS, len(self.vectors))
                block = best_chunk(queries @ self.vectors.rows(start, stop).T, np.asarray(self.owners[start:stop]),
                                   len(self))
                np.maximum(scores, block, out=scores)
            return merge_top_k(np.broadcast_to(np.arange(len(self)), scores.shape), scores, k)
        rows, chunk_scores = self._graph_search(queries, 4 * k)
        owners = np.asarray(self.owners)[rows]  # (Q, 4k) passages of the candidate chunks
        out_pos, out_score = [], []
        for q in range(len(queries)):
            best: dict[int, float] = {}
            for p, sc in zip(owners[q].tolist(), chunk_scores[q].tolist()):
                best.setdefault(p, sc)  # candidates come best first
            top = list(best.items())[:k]
            out_pos.append([p for p, _ in top])
            out_score.append([sc for _, sc in top])
        width = min(map(len, out_pos))
        return (np.asarray([p[:width] for p in out_pos], dtype=np.int64),
                np.asarray([sc[:width] for sc in out_score], dtype=np.float32))

    def _graph_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the best k stored vectors: the graph's candidates rescored exactly."""
        want = min(len(self.vectors), max(2 * k, 32))
        candidates = [[] for _ in queries]
        for graph in self.graphs:
            found = graph.search(queries, min(want, len(graph)))
            if hasattr(found, "counts"):  # several queries: BatchMatches (Q, want) with a count per row
                keys, counts = np.asarray(found.keys, dtype=np.int64), np.asarray(found.counts).reshape(-1)
            else:  # one query: Matches holds only the keys found
                keys, counts = np.asarray(found.keys, dtype=np.int64).reshape(1, -1), [len(found.keys)]
            for i in range(len(queries)):
                candidates[i].append(keys[i, :counts[i]])
        rows = [self.vectors.rescore(q[None], np.concatenate(candidates[i])[None], k) for i, q in enumerate(queries)]
        k_out = min(len(r[0][0]) for r in rows)
        return (np.vstack([r[0][:, :k_out] for r in rows]), np.vstack([r[1][:, :k_out] for r in rows]))

    def hits(self, positions: np.ndarray, scores: np.ndarray) -> list[dict]:
        """One query's results as {"rank", "id", "score", "text"}, best first."""
        return [{"rank": rank, **self.passages.get(int(p)), "score": float(s)}
                for rank, (p, s) in enumerate(zip(positions, scores), start=1)]

    def close(self) -> None:
        self.passages.close()
        self.vectors.close()
