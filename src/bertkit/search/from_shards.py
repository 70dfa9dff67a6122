"""`bertkit index --vectors DIR`: a search index from the shards `bertkit embed --shards --out DIR` wrote.

Nothing is embedded again: each shard is checked against its SHA-256 (a shard that fails is
refused, naming it, never indexed), its vectors made unit length when the embedding did not
normalise them, and written to the index's vector file and HNSW graph; the passages' texts are
read from the corpus files the manifest names (unchanged since, by size and modification time)
and checked against the shards' ids, so every hit shows its text. The index is the one
`bertkit index --model --input` builds from the same corpus with the same settings: the same
vectors, the same ids, the same top 10.

A corpus past one machine's memory needs a graph past it too: with `graph_size`, the vectors are
cut into several HNSW graphs of that many vectors (`ann-000.usearch`, ...), each built, saved and
dropped in turn, so building holds one graph at a time; a query searches every graph (memory-mapped)
and the union of their candidates is rescored exactly (`SearchIndex`). With `quantize`, no graph:
the stored vectors are quantised once all are written (`search.quantized`).
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bertkit.errors import UserError
from bertkit.io import write_json
from bertkit.search.index import ANN_FILE, FORMAT, META, IndexSettings, _new_graph, check_storage
from bertkit.search.passages import write_store
from bertkit.search.quantized import check_quantize, write_quantized
from bertkit.search.vectors import VectorWriter


def check_shards(manifest: dict, folder: Path) -> None:
    """A UserError unless the shards are complete, and made the way search embeds queries."""
    if not manifest.get("complete"):
        raise UserError("the embedding is not complete: rerun its `bertkit embed` command to finish it, then index",
                        folder)
    settings = manifest["settings"]
    if list(settings["layers"]) != [-1]:
        raise UserError(f"the vectors pool layers {settings['layers']}; search embeds queries from the last layer "
                        "(embed with --layers -1)", folder)


def _corpus_texts(manifest: dict):
    """(id, text) of every passage of the corpus the shards were made from, in order."""
    from bertkit.corpus.sources import Source, current_fingerprint, records

    sources = [Source(**s) for s in manifest["sources"]]
    for s in sources:
        if current_fingerprint(s) != s.fingerprint():
            gone = not Path(s.path).is_file()
            raise UserError("is gone; the index reads the passages' texts from the corpus the shards were made from"
                            if gone else "has changed since it was embedded (size or modification time): embed it "
                            "again", s.path)
    several = len(sources) > 1
    return itertools.chain.from_iterable(records(Path(s.path), s.kind, f"{s.name}:" if several else "")
                                         for s in sources)


class _Graphs:
    """The HNSW graph(s) of an index: `per_graph` vectors each, saved and dropped as each fills."""

    def __init__(self, out: Path, rows: int, dim: int, settings: IndexSettings):
        self.out, self.dim, self.settings = out, dim, settings
        self.per_graph = settings.graph_size or rows
        self.single = self.per_graph >= rows
        self.files: list[str] = []
        self.graph, self.filled = None, 0

    def add(self, vectors: np.ndarray) -> None:
        done = 0
        while done < len(vectors):
            if self.graph is None:
                self.graph = _new_graph(self.dim, self.settings)
            take = min(self.per_graph - len(self.graph), len(vectors) - done)
            self.graph.add(np.arange(self.filled, self.filled + take), vectors[done:done + take],
                           threads=self.settings.threads)
            done, self.filled = done + take, self.filled + take
            if len(self.graph) == self.per_graph:
                self.save()

    def save(self) -> None:
        if self.graph is None:
            return
        name = ANN_FILE if self.single else f"ann-{len(self.files):03d}.usearch"
        self.graph.save(str(self.out / name))
        self.files.append(name)
        self.graph = None


def build_from_shards(vectors: str | os.PathLike, out: str | os.PathLike, settings: IndexSettings | None = None,
                      progress: bool = True) -> dict:
    """Index the shard folder `vectors` into the folder `out` (which must exist); returns the meta."""
    from tqdm import tqdm

    from bertkit.corpus.shards import check_shard, read_manifest, read_shard, specs_of, stem

    settings = settings or IndexSettings()
    check_storage(settings)
    check_quantize(settings.quantize, graph_size=settings.graph_size)
    folder, out, start = Path(vectors), Path(out), time.perf_counter()
    manifest = read_manifest(folder)
    check_shards(manifest, folder)
    rows, dim, fmt = manifest["count"], manifest["dim"], manifest["shard_format"]
    writer = VectorWriter(out, rows, dim, settings.dtype)
    graphs = _Graphs(out, rows, dim, settings) if rows >= settings.ann_threshold and not settings.quantize else None
    texts = _corpus_texts(manifest)

    def passages():
        with tqdm(total=rows, unit="passage", desc="indexing", disable=not progress, smoothing=0.05) as bar:
            for spec in specs_of(manifest):
                record, state = check_shard(folder, spec, fmt)
                if record is None:
                    raise UserError(f"{stem(spec.index)} fails its checksum ({state}): rerun its `bertkit embed` "
                                    "command, which redoes it, then index", folder)
                ids, block = read_shard(folder, record, fmt)
                norms = np.linalg.norm(block, axis=1, keepdims=True)
                block = block / np.where(norms > 0, norms, 1.0)
                for pid, (corpus_id, text) in zip(ids, itertools.islice(texts, len(ids))):
                    if pid != corpus_id:
                        raise UserError(f"{stem(spec.index)} holds id {pid!r} where the corpus has {corpus_id!r}: "
                                        "the corpus changed since it was embedded", folder)
                    yield pid, text
                if graphs is not None:
                    graphs.add(block)
                writer.add(block)
                bar.update(len(ids))

    count = write_store(passages(), out)
    writer.close()
    if graphs is not None:
        graphs.save()
    quantization = write_quantized(out, settings.quantize) if settings.quantize else None
    s = manifest["settings"]
    meta = {"format": FORMAT, "version": 1, "model": s["model"], "pooling": s["pooling"], "precision": s["precision"],
            "normalized": True, "max_length": s["max_length"], "count": count, "vectors": count, "chunks": False,
            "dim": dim, "dtype": settings.dtype, "long_inputs": s["long_inputs"], "window_stride": s["window_stride"],
            "backend": s["backend"], "int8": s["int8"], "cut": None, "long_inputs_report": None,
            "source": str(folder.resolve()), "shards": len(manifest["shards"]), "quantization": quantization,
            "ann": None if graphs is None else {"library": "usearch", "file": graphs.files[0], "files": graphs.files,
                                                **asdict(settings)},
            "build_seconds": round(time.perf_counter() - start, 3)}
    write_json(out / META, meta)
    return meta
