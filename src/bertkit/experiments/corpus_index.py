"""The `corpus` experiment's index at scale: generated vectors written as embedding shards, the
index `bertkit index --vectors` builds from them, and a memory-mapped search of it.

The vectors are generated, not embedded (embedding 1,000,000 passages takes about half a day of
this machine's cores): unit vectors with the clustered, low-dimensional structure sentence
embeddings have. Each is a cluster's centre (one of `clusters` random unit vectors), plus a
Gaussian spread of norm about `spread` inside one shared random `rank`-dimensional subspace, plus
isotropic noise of norm about `noise`, normalised. The queries are drawn the same way from another
random stream, so none is in the index. The shards are the ones `bertkit embed --shards` writes
(`corpus.shards.write_shard`, a manifest with every checksum) over a corpus file of one line per
vector, so `bertkit index --vectors` reads them as it reads any.

The search runs in its own process: the index opened memory-mapped (as `bertkit search` and
`serve --index` open it), every query asked alone and timed, then the process's peak resident set
(VmHWM) read, before the exact scan that recall@10 is measured against touches every vector.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bertkit.io import write_json

HNSW = (("", "fp16", "int8"), ("-fp32", "fp32", "fp32"))  # (cell suffix, vectors, the graphs' copies): ours, the usual
EXACT_BATCH = 250  # queries per exact scan: (250, 65536) float32 scores at a time


@dataclass(frozen=True)
class Generator:
    """Clustered unit vectors (see the module docstring)."""

    dim: int = 384
    clusters: int = 1024
    rank: int = 24
    spread: float = 0.6  # norm of the low-rank part, against the centre's 1
    noise: float = 0.2  # norm of the isotropic part
    seed: int = 0

    def _frame(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        centres = rng.standard_normal((self.clusters, self.dim), dtype=np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        basis, _ = np.linalg.qr(rng.standard_normal((self.dim, self.rank)))  # (dim, rank), orthonormal columns
        return centres, basis.T.astype(np.float32)

    def block(self, index: int, n: int, stream: int = 0) -> np.ndarray:
        """n vectors of block `index` of a stream (0: the index's, 1: the queries'), float32 (n, dim)."""
        centres, basis = self._frame()
        rng = np.random.default_rng([self.seed, stream, index])
        cluster = rng.integers(self.clusters, size=n)
        spread = rng.standard_normal((n, self.rank), dtype=np.float32) * np.float32(self.spread / math.sqrt(self.rank))
        noise = rng.standard_normal((n, self.dim), dtype=np.float32) * np.float32(self.noise / math.sqrt(self.dim))
        v = centres[cluster] + spread @ basis + noise
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    def describe(self) -> str:
        return (f"clustered unit vectors: {self.clusters:,} random centres, a rank-{self.rank} Gaussian spread of "
                f"norm ~{self.spread:g} and isotropic noise of norm ~{self.noise:g}, normalised (seed {self.seed})")


def write_vector_shards(folder: Path, count: int, shard_size: int, queries: int, gen: Generator) -> dict:
    """`folder`/passages.txt (a line per vector), shards/ (embedding shards with their manifest) and
    queries.npy; what was written."""
    from bertkit.corpus.embedder import EmbedSettings
    from bertkit.corpus.shards import FORMAT, write_manifest, write_shard
    from bertkit.corpus.sources import make_sources, plan_shards

    started = time.perf_counter()
    shards = folder / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    corpus = folder / "passages.txt"
    with open(corpus, "w", encoding="utf-8") as f:
        for start in range(0, count, 100_000):
            f.write("".join(f"generated vector {i + 1}\n" for i in range(start, min(count, start + 100_000))))
    sources = make_sources([corpus], progress=False)
    specs = plan_shards(sources, shard_size)
    records = [write_shard(shards, s, [str(s.first + j + 1) for j in range(s.count)], gen.block(s.index, s.count),
                           "npy") for s in specs]
    settings = EmbedSettings(f"generated: {gen.describe()}", "mean", True, 256)
    seconds = time.perf_counter() - started
    write_manifest(shards, {
        "format": FORMAT, "version": 1, "settings": settings.as_dict(), "shard_size": shard_size,
        "shard_format": "npy", "complete": True, "count": count, "sources": [s.as_dict() for s in sources],
        "shards": [{**s.as_dict(), "files": sorted(r["sha256"]), "sha256": r["sha256"]}
                   for s, r in zip(specs, records)],
        "dim": gen.dim, "last_run": {"engine": "generated", "shards": len(specs), "seconds": round(seconds, 3),
                                     "passages": count, "long_inputs_report": None}})
    np.save(folder / "queries.npy", gen.block(0, queries, stream=1))
    return {"vectors": count, "dim": gen.dim, "shards": len(specs), "queries": queries, "seconds": seconds,
            "generator": {**asdict(gen), "how": gen.describe()}, "vector_bytes_fp32": count * gen.dim * 4}


def build_argv(shards: Path, out: Path, p: dict, result: Path) -> list[str]:
    """`bertkit index --vectors` as the measured process runs it (p: the cell's params; with "quantize",
    quantised rows and no graph)."""
    how = ["--quantize", p["quantize"]] if "quantize" in p else [
        "--ann-threshold", "0", "--graph-size", str(p["graph_size"]), "--connectivity", str(p["connectivity"]),
        "--graph-dtype", p["graph_dtype"]]
    return [sys.executable, "-m", "bertkit.experiments.corpus_index", "build", "--result", str(result), "index",
            "--vectors", str(shards), "--out", str(out), "--dtype", p["dtype"], *how, "--threads",
            str(p["threads"]), "--no-progress", "--overwrite"]


def search_argv(index: Path, queries: Path, k: int, result: Path) -> list[str]:
    return [sys.executable, "-m", "bertkit.experiments.corpus_index", "search", "--result", str(result), "--index",
            str(index), "--queries", str(queries), "--k", str(k)]


def build_units(vectors: int) -> float:
    """A build's cost in units of n log2 n / 1e6 (an HNSW graph's construction grows so)."""
    return vectors * math.log2(max(vectors, 2)) / 1e6


def search_units(queries: int, vectors: int) -> float:
    """A search cell's cost: queries x vectors / 1e6 (its exact scan dominates)."""
    return queries * vectors / 1e6


def index_sizes(folder: Path) -> dict:
    from bertkit.io import read_json

    meta = read_json(folder / "meta.json", "an index's meta.json")
    files = meta["ann"]["files"] if meta.get("ann") else []
    quantized = meta.get("quantization") or {}
    return {"graphs": len(files), "vectors": meta["count"], "dtype": meta["dtype"],
            "graph_dtype": (meta["ann"].get("graph_dtype") or meta["dtype"]) if meta.get("ann") else None,
            "quantize": quantized.get("kind"),
            "quantized_bytes": quantized["bytes_per_vector"] * meta["count"] if quantized else 0,  # rows, no header
            "build_seconds": meta["build_seconds"], "expansion_search": (meta.get("ann") or {}).get("expansion_search"),
            "vector_file_bytes": (folder / "vectors.npy").stat().st_size,
            "graph_bytes": sum((folder / f).stat().st_size for f in files),
            "bytes_on_disk": sum(p.stat().st_size for p in folder.iterdir() if p.is_file())}


# ---- the measured processes ----

def _status_mb(field: str) -> float:
    """A field of /proc/self/status (VmRSS, VmHWM, RssAnon, RssFile) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _search(args) -> dict:
    from bertkit.search.index import SearchIndex

    before = _status_mb("VmRSS")
    index = SearchIndex(args.index)  # memory-mapped
    opened = _status_mb("VmRSS")
    queries = np.load(args.queries)
    times, found = [], []
    started_all = time.perf_counter()
    for q in queries:
        started = time.perf_counter()
        found.append(index.search(q[None], args.k)[0][0])
        times.append(1000 * (time.perf_counter() - started))
    out = {"queries": len(queries), "k": args.k, "rss_before_open_mb": before, "rss_open_mb": opened,
           "rss_after_queries_mb": _status_mb("VmRSS"), "rss_anon_mb": _status_mb("RssAnon"),
           "rss_file_mb": _status_mb("RssFile"), "peak_rss_queries_mb": _status_mb("VmHWM"),
           "p50_ms": float(np.percentile(times, 50)), "p99_ms": float(np.percentile(times, 99)),
           "mean_ms": float(np.mean(times)), "ann_seconds": time.perf_counter() - started_all}
    started_exact = time.perf_counter()
    exact = np.concatenate([index.search(queries[i:i + EXACT_BATCH], args.k, exact=True)[0]
                            for i in range(0, len(queries), EXACT_BATCH)])
    out["recall_at_10"] = float(np.mean([len(set(a.tolist()) & set(b.tolist())) / args.k
                                         for a, b in zip(found, exact)]))
    out["exact_seconds"] = time.perf_counter() - started_exact
    return out


def main(argv: list[str] | None = None) -> int:
    """`build --result FILE INDEX-ARGS...` (the `bertkit index` command, timed) or
    `search --result FILE --index DIR --queries Q.npy --k 10`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["build"] and argv[1:2] == ["--result"]:
        from bertkit.cli import main as cli

        started = time.perf_counter()
        status = cli(argv[3:])
        if status:
            return status
        write_json(argv[2], {"seconds": time.perf_counter() - started})
        return 0
    p = argparse.ArgumentParser(description="a memory-mapped search of the corpus experiment's index")
    p.add_argument("kind", choices=("search",))
    for flag in ("--result", "--index", "--queries"):
        p.add_argument(flag, required=True)
    p.add_argument("--k", type=int, default=10)
    args = p.parse_args(argv)
    write_json(args.result, _search(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
