"""`corpus`: embedding a corpus and searching an index at scale, through the experiment runner.

Throughput: passages per second per core on the scale's Wikipedia paragraphs (of 200+ characters,
each after its article's title) for bertkit in-process and on Ray (`bertkit embed --shards`,
`--engine ray --workers 1`), sentence-transformers with its torch and its ONNX backend, and
fastembed: every contender the same model (all-MiniLM-L6-v2, mean pooling, normalised, 256
tokens), one thread, batches of 32, fp32, each repetition a cell in a process of its own, with the
lowest cosine of any passage to transformers' fp32 vectors (the `reference` cell). bertkit's
seconds are its whole command (the model's loading, Ray's start); the peers' are `encode`/`embed`
with the model loaded and warmed up. Two conditions: this CPU's own kernels, and PyTorch, oneDNN
and MKL held to AVX2 (their environment variables, set for that cell's process); only the torch
contenders are held, as ONNX Runtime has no such switch. Ray scaling: 2 workers against 1 on
twice the passages. The index: generated vectors (`corpus_index`) written as shards, indexed by
`bertkit index --vectors` in graphs of `graph_size` (fp16 vectors, the graphs' own copies int8;
and fp32 throughout, the HNSW index most use), searched memory-mapped; and the same vectors
with `--quantize int8` and `--quantize binary` (no graph: the quantised rows scanned, rescored from fp32).

A cell that needs the machine's two cores (Ray, whose driver and services share them; the index
build on two threads) takes them alone: cells hold a shared lock on work/cores.lock and those take
it exclusively, so a second process sharing the folder waits instead of running beside them;
every record names the cells that ran beside it. Scales: `cpu` (2 cores, about 2 hours) and `tiny`
(bertkit in-process on a few dozen passages and an index of 3,000 vectors: seconds; CI).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import UserError
from bertkit.experiments import corpus_embed as emb
from bertkit.experiments import corpus_index as idx
from bertkit.experiments.core import Cell, Context, Experiment, shared_data
from bertkit.experiments.corpus_embed import CONTENDERS, EMBED, HELD_TO_AVX2, shard_size
from bertkit.io import alive


@dataclass(frozen=True)
class Scale:
    passages: int  # the throughput cells'
    reps: int
    contenders: tuple[str, ...]
    avx2: tuple[str, ...]  # contenders also run held to AVX2
    scaling_passages: int  # Ray 2 workers against 1 (0: no such cells)
    vectors: int  # the index's
    graph_size: int
    vector_shard: int  # vectors per shard
    queries: int
    build_threads: int
    calibration_passages: int  # each embedding rate timed on this many
    calibration_vectors: int


SCALES = {
    "cpu": Scale(10_000, 3, tuple(CONTENDERS), HELD_TO_AVX2, 20_000, 1_000_000, 250_000, 50_000, 1_000, 2,
                 320, 20_000),
    "tiny": Scale(40, 1, ("bertkit",), (), 0, 3_000, 1_000, 1_000, 100, 1, 24, 2_000),
}
INDEX = {"connectivity": 16, "k": 10}
QUANTIZED = ("int8", "binary")  # `index --quantize` of the same vectors, no graph, rescored from fp32 rows


def _embed_cell(cid: str, kind: str, contender: str, isa: str, n: int, rep: int, workers: int, needs) -> Cell:
    params = {"contender": contender, "isa": isa, "passages": n, "rep": rep, **EMBED, "shard_size": shard_size(n),
              "workers": workers}
    rate = contender if not workers else f"bertkit-ray-{workers}"
    return Cell(cid, kind, tuple(params.items()), tuple(needs), rate=f"embed/{rate}/{isa}", units=float(n))


def plan(scale: str, env: dict) -> list[Cell]:
    """bertkit's cells first, then the index, then the peers (a run without their environment stops
    there with everything else done)."""
    s = SCALES[scale]
    model = emb.model_name(env)
    sizes = tuple(sorted({s.passages, s.scaling_passages} - {0}))
    cells = [Cell("inputs", "inputs", (("sizes", sizes), ("shortest", emb.SHORTEST), ("model", model)), keeps=True,
                  units=float(max(sizes))),
             Cell("reference", "reference", (("passages", s.passages), ("model", model), *EMBED.items()), ("inputs",),
                  keeps=True, units=float(s.passages))]
    throughput = [(c, isa) for isa in ("native", "avx2") for c in s.contenders if isa == "native" or c in s.avx2]
    needs = ("inputs", "reference")
    for contender, isa in throughput:
        if CONTENDERS[contender].venv == "main":
            cells += [_embed_cell(f"throughput/{isa}/{contender}/{r}", "throughput", contender, isa, s.passages, r,
                                  CONTENDERS[contender].workers, needs) for r in range(1, s.reps + 1)]
    if s.scaling_passages:
        cells += [_embed_cell(f"scaling/ray-{w}", "scaling", "bertkit-ray", "native", s.scaling_passages, 1, w,
                              ("inputs",)) for w in (1, 2)]
    gen = {"count": s.vectors, "shard": s.vector_shard, "queries": s.queries, **asdict(idx.Generator())}
    cells.append(Cell("index/vectors", "index-vectors", tuple(gen.items()), keeps=True, units=float(s.vectors)))
    for name, dtype, graph_dtype in idx.HNSW:
        build = "index/build" + name
        cells += [Cell(build, "index-build", (("graph_size", s.graph_size), ("threads", s.build_threads),
                                              ("dtype", dtype), ("graph_dtype", graph_dtype),
                                              ("connectivity", INDEX["connectivity"])),
                       ("index/vectors",), keeps=True, rate="index-build", units=idx.build_units(s.vectors)),
                  Cell("index/search" + name, "index-search",
                       (("queries", s.queries), ("k", INDEX["k"]), ("build", build)),
                       (build,), rate="index-search", units=idx.search_units(s.queries, s.vectors))]
    for kind in QUANTIZED:  # rates: writing the vectors (per vector) and the exact scan of the search cell
        cells += [Cell(f"index/build-{kind}", "index-quantize", (("quantize", kind), ("dtype", "fp32"), ("threads", 1)),
                       ("index/vectors",), keeps=True, rate="index-vectors", units=float(s.vectors)),
                  Cell(f"index/search-{kind}", "index-search-quantized",
                       (("queries", s.queries), ("k", INDEX["k"]), ("build", f"index/build-{kind}")),
                       (f"index/build-{kind}",), rate="index-search", units=idx.search_units(s.queries, s.vectors))]
    peers = [(c, isa) for c, isa in throughput if CONTENDERS[c].venv == "peers"]
    if peers:
        cells.append(Cell("peers/export", "export", (("model", model), ("max_length", EMBED["max_length"])),
                          ("inputs",), keeps=True))
    for r in range(1, s.reps + 1):
        cells += [_embed_cell(f"throughput/{isa}/{c}/{r}", "throughput", c, isa, s.passages, r, 0,
                              needs + (("peers/export",) if c != "sentence-transformers" else ()))
                  for c, isa in peers]
    return cells


# ---- the cores a cell holds ----

def _running(folder: Path, mine: Path) -> set[str]:
    out = set()
    for p in folder.glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            if p != mine and alive(int(p.read_text())):
                out.add(p.stem.replace("__", "/"))
    return out


@contextlib.contextmanager
def cores(ctx: Context, cell_id: str, alone: bool):
    """Hold the machine's cores for a cell: shared, or `alone` (exclusively); yields the set of the
    other cells running beside it, filled at its start and its end."""
    import fcntl

    running = ctx.work / "running"
    running.mkdir(parents=True, exist_ok=True)
    mine = running / ctx.file_name(cell_id, ".pid")
    with open(ctx.work / "cores.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        mine.write_text(str(os.getpid()))
        beside = _running(running, mine)
        try:
            yield beside
        finally:
            beside |= _running(running, mine)
            mine.unlink(missing_ok=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


def _conditions(isa: str, beside: set[str]) -> dict:
    kernels = ("this CPU's own" if isa == "native" else "PyTorch, oneDNN and MKL held to AVX2 (" +
               " ".join(f"{k}={v}" for k, v in emb.AVX2.items()) + ")")
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {"kernels": kernels, "beside": sorted(beside), "load_after": load}


# ---- the cells ----

def _passages(ctx: Context, n: int) -> Path:
    return ctx.path("inputs") / f"passages-{n}.txt"


def run_inputs(cell: Cell, ctx: Context) -> dict:
    sizes = sorted(cell.param("sizes"))
    folder = ctx.path(cell.id)
    got = emb.write_passages(_passages(ctx, sizes[-1]), sizes[-1], ctx.env["data_dir"])
    if got < sizes[-1]:
        raise UserError(f"the corpus gives {got:,} paragraphs of {emb.SHORTEST}+ characters, not {sizes[-1]:,}",
                        ctx.env["data_dir"])
    for n in sizes[:-1]:
        emb.head(_passages(ctx, sizes[-1]), _passages(ctx, n), n)
    from bertkit.corpus.embedder import model_fingerprint

    model = emb.model_folder(ctx.env)
    chars = [len(line) for line in _passages(ctx, sizes[0]).read_text(encoding="utf-8").splitlines()]
    return {"files": sorted(p.name for p in folder.iterdir()), "model": model,
            "model_fingerprint": model_fingerprint(model), "mean_chars": float(np.mean(chars))}


def run_reference(cell: Cell, ctx: Context) -> dict:
    p, folder = cell.params_json(), ctx.path(cell.id)
    folder.mkdir(parents=True, exist_ok=True)
    argv = emb.reference_argv(_passages(ctx, p["passages"]), folder / "vectors.npy", emb.model_folder(ctx.env), p,
                              folder / "result.json")
    with cores(ctx, cell.id, False) as beside:
        out = emb.run_measured(argv, emb.child_env("native", p["threads"]), folder / "result.json",
                               ctx.log_file(cell.id))
    return {**out, **_conditions("native", beside)}


def run_export(cell: Cell, ctx: Context) -> dict:
    python = emb.peers_python(ctx.env)
    folder = ctx.path(cell.id)
    folder.mkdir(parents=True, exist_ok=True)
    argv = emb.export_argv(python, emb.model_folder(ctx.env), folder, cell.param("max_length"), folder / "result.json")
    return emb.run_measured(argv, emb.child_env("native", 1), folder / "result.json", ctx.log_file(cell.id))


def measure_embedding(p: dict, ctx: Context, folder: Path, passages: Path, log: Path, cell_id: str) -> dict:
    """One contender on `passages` in its own process, its vectors left in `folder`; the measurement."""
    c = CONTENDERS[p["contender"]]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    result, model = folder / "result.json", emb.model_folder(ctx.env)
    if c.venv == "peers":
        argv = emb.peer_argv(emb.peers_python(ctx.env), p["contender"], passages, folder / "vectors.npy", model,
                             ctx.path("peers/export"), p, result)
    else:
        argv = emb.bertkit_argv(passages, folder / "shards", model, p, result)
    workers = p["workers"] or 0
    with cores(ctx, cell_id, workers > 0 or p["threads"] > 1) as beside:
        out = emb.run_measured(argv, emb.child_env(p["isa"], p["threads"]), result, log)
    cores_used = max(1, workers) * p["threads"]
    rate = p["passages"] / out["seconds"]
    return {"what": c.what.format(workers=workers), **out,
            "cores": cores_used, "passages_per_s": rate, "passages_per_s_per_core": rate / cores_used,
            "precision": p["precision"], **_conditions(p["isa"], beside)}


def run_embedding(cell: Cell, ctx: Context) -> dict:
    p, folder = cell.params_json(), ctx.path(cell.id)
    out = measure_embedding(p, ctx, folder, _passages(ctx, p["passages"]), ctx.log_file(cell.id), cell.id)
    if "reference" in cell.needs:
        got = np.load(folder / "vectors.npy") if (folder / "vectors.npy").is_file() else \
            emb.shard_vectors(folder / "shards")
        out.update(emb.cosine_to(np.load(ctx.path("reference") / "vectors.npy"), got))
    shutil.rmtree(folder, ignore_errors=True)  # the vectors: measured, not kept
    return out


def run_index_vectors(cell: Cell, ctx: Context) -> dict:
    p = cell.params_json()
    gen = idx.Generator(**{k: p[k] for k in asdict(idx.Generator())})
    shutil.rmtree(ctx.path(cell.id), ignore_errors=True)
    return idx.write_vector_shards(ctx.path(cell.id), p["count"], p["shard"], p["queries"], gen)


def run_index_build(cell: Cell, ctx: Context) -> dict:
    p, folder = cell.params_json(), ctx.path(cell.id)
    folder.mkdir(parents=True, exist_ok=True)
    argv = idx.build_argv(ctx.path("index/vectors") / "shards", folder / "index", p, folder / "result.json")
    with cores(ctx, cell.id, p["threads"] > 1) as beside:
        out = emb.run_measured(argv, emb.child_env("native", p["threads"]), folder / "result.json",
                               ctx.log_file(cell.id))
    return {**out, **idx.index_sizes(folder / "index"), **_conditions("native", beside)}


def run_index_search(cell: Cell, ctx: Context) -> dict:
    p, folder = cell.params_json(), ctx.path(cell.id)
    folder.mkdir(parents=True, exist_ok=True)
    index = ctx.path(p.get("build", "index/build")) / "index"
    argv = idx.search_argv(index, ctx.path("index/vectors") / "queries.npy", p["k"], folder / "result.json")
    with cores(ctx, cell.id, False) as beside:
        out = emb.run_measured(argv, emb.child_env("native", 1), folder / "result.json", ctx.log_file(cell.id))
    sizes = idx.index_sizes(index)
    dim = int(np.load(ctx.path("index/vectors") / "queries.npy", mmap_mode="r").shape[1])
    return {**out, "vectors": sizes["vectors"], "vector_bytes_fp32": sizes["vectors"] * dim * 4,
            "vector_file_bytes": sizes["vector_file_bytes"], "graph_bytes": sizes["graph_bytes"],
            "quantized_bytes": sizes["quantized_bytes"], **_conditions("native", beside)}


EXECUTORS = {"inputs": run_inputs, "reference": run_reference, "export": run_export, "throughput": run_embedding,
             "scaling": run_embedding, "index-vectors": run_index_vectors, "index-build": run_index_build,
             "index-search": run_index_search, "index-quantize": run_index_build,
             "index-search-quantized": run_index_search}


def execute(cell: Cell, ctx: Context) -> dict:
    return EXECUTORS[cell.kind](cell, ctx)


def calibrate(scale: str, cells: list[Cell], ctx: Context) -> dict[str, tuple[float, float]]:
    from bertkit.experiments.corpus_calibration import calibrate_corpus

    return calibrate_corpus(SCALES[scale], cells, ctx, measure_embedding)


def report(cells: list[Cell], records: dict, ctx: Context):
    from bertkit.experiments.corpus_report import corpus_report

    return corpus_report(cells, records, ctx)


EXPERIMENT = Experiment(
    name="corpus", title="Embedding a corpus and searching an index at scale", scales=tuple(SCALES),
    plan=plan, execute=execute, report=report, calibrate=calibrate,
    cost="21 throughput cells of 10,000 passages, Ray 1 and 2 workers on 20,000, an index of 1,000,000 generated "
         "vectors: about 2 hours with two processes on 2 cores (the peers need .venv-peers)",
    env_defaults={"data_dir": shared_data(), "model": "",
                  "peers": str(Path(__file__).resolve().parents[3] / ".venv-peers" / "bin" / "python")})
