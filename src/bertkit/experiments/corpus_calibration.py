"""The `corpus` experiment's calibration: each rate of its plan timed on this machine, small, in
work/calibration/ (its own passages, exports and index; nothing a cell keeps).

An embedding rate is its cell's own measured process run once on a few hundred passages: seconds
per passage from the process's own clock (bertkit: between its first and last shard, so Ray's
start and the model's loading are not counted per passage; the peers and the reference: their
`encode` with the model loaded), and the rest of its wall time fixed (the process, the model's
loading, Ray's start). Without the peers' environment, their rates are transformers' reference's
(torch fp32, the same model: what sentence-transformers' torch backend runs), so the plan still
says about how long a run with them takes; their cells themselves stop with the line that says
how to make it. The index: the vectors' generation per vector, the build per n log2 n (its
process's start fixed), the search's exact scan per query x vector (its start and its graph
queries fixed).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from bertkit.experiments import corpus_embed as emb
from bertkit.experiments import corpus_index as idx
from bertkit.experiments.core import Cell, Context

EMBEDDING = ("throughput", "scaling")
INDEXING = ("index-vectors", "index-build", "index-search")


def _split(measured: dict, n: int) -> tuple[float, float]:
    """(fixed, per passage) of one measured run on n passages (`corpus_embed.run_measured`'s dict)."""
    steady = measured.get("steady_passages_per_s")
    per = 1.0 / steady if steady else measured["seconds"] / n
    return max(0.0, measured["wall_s"] - per * n), per


class _Calibration:
    def __init__(self, scale, ctx: Context, measure):
        self.scale, self.measure = scale, measure
        self.ctx = dataclasses.replace(ctx, work=ctx.work / "calibration")
        self.folder = self.ctx.work
        self.n = scale.calibration_passages
        self._reference = None

    def passages(self, n: int) -> Path:
        return self.folder / "inputs" / f"passages-{n}.txt"

    def inputs(self) -> tuple[float, float]:
        started = time.perf_counter()
        emb.write_passages(self.passages(self.n), self.n, self.ctx.env["data_dir"])
        return 0.0, (time.perf_counter() - started) / self.n

    def reference(self) -> tuple[float, float]:
        if self._reference is None:
            out = self.folder / "reference"
            out.mkdir(parents=True, exist_ok=True)
            argv = emb.reference_argv(self.passages(self.n), out / "vectors.npy", emb.model_folder(self.ctx.env),
                                      {**emb.EMBED, "passages": self.n}, out / "result.json")
            measured = emb.run_measured(argv, emb.child_env("native", 1), out / "result.json",
                                        self.ctx.log_file("reference"))
            self._reference = _split(measured, self.n)
        return self._reference

    def peers_ready(self) -> bool:
        try:
            emb.peers_python(self.ctx.env)
        except Exception:  # the UserError that says how to make it: the cells will say it
            return False
        return True

    def export(self) -> tuple[float, float]:
        if not self.peers_ready():
            return 0.0, 0.0
        folder = self.ctx.path("peers/export")
        argv = emb.export_argv(emb.peers_python(self.ctx.env), emb.model_folder(self.ctx.env), folder, 256,
                               self.folder / "export.json")
        return emb.run_measured(argv, emb.child_env("native", 1), self.folder / "export.json",
                                self.ctx.log_file("export"))["wall_s"], 0.0

    def embedding(self, cell: Cell) -> tuple[float, float]:
        p = cell.params_json()
        if emb.CONTENDERS[p["contender"]].venv == "peers":
            if not self.peers_ready():
                return self.reference()
            if p["contender"] != "sentence-transformers" and not (self.ctx.path("peers/export") / "onnx").is_dir():
                self.export()
        q = {**p, "passages": self.n, "shard_size": emb.shard_size(self.n)}
        folder = self.folder / cell.rate_key.replace("/", "__")
        measured = self.measure(q, self.ctx, folder, self.passages(self.n), self.ctx.log_file(cell.rate_key),
                                f"calibration/{cell.rate_key}")
        return _split(measured, self.n)

    def index(self, cells: dict[str, Cell]) -> dict[str, tuple[float, float]]:
        n = self.scale.calibration_vectors
        queries = min(200, self.scale.queries)
        folder = self.folder / "index"
        vectors = cells.get("index-vectors") or Cell("v", "index-vectors", ())
        gen = idx.Generator(**{k: vectors.param(k, v) for k, v in dataclasses.asdict(idx.Generator()).items()})
        made = idx.write_vector_shards(folder, n, max(1, n // 4), queries, gen)
        out = {"index-vectors": (0.0, made["seconds"] / n)}
        build = cells.get("index-build")
        p = build.params_json() if build else {"dtype": "fp16", "graph_size": 0, "connectivity": 16, "threads": 1}
        p = {**p, "graph_size": max(1, n // 2) if p["graph_size"] else 0}  # several graphs, as the cell builds
        built = emb.run_measured(idx.build_argv(folder / "shards", folder / "index", p, folder / "build.json"),
                                 emb.child_env("native", p["threads"]), folder / "build.json",
                                 self.ctx.log_file("index"))
        seconds = idx.index_sizes(folder / "index")["build_seconds"]
        out["index-build"] = (max(0.0, built["wall_s"] - seconds), seconds / idx.build_units(n))
        searched = emb.run_measured(idx.search_argv(folder / "index", folder / "queries.npy", 10,
                                                    folder / "search.json"),
                                    emb.child_env("native", 1), folder / "search.json", self.ctx.log_file("index"))
        exact = searched["exact_seconds"]
        out["index-search"] = (max(0.0, searched["wall_s"] - exact), exact / idx.search_units(queries, n))
        return out


def calibrate_corpus(scale, cells: list[Cell], ctx: Context, measure) -> dict[str, tuple[float, float]]:
    """{rate key: (fixed seconds, seconds per unit)} of `cells`, measured here (`measure`: the
    embedding cells' own measurement, `corpus.measure_embedding`)."""
    cal = _Calibration(scale, ctx, measure)
    wanted = {c.rate_key: c for c in cells}
    out = {"inputs": cal.inputs()}
    if "reference" in wanted:
        out["reference"] = cal.reference()
    if "export" in wanted:
        out["export"] = cal.export()
    for key, cell in wanted.items():
        if cell.kind in EMBEDDING:
            out[key] = cal.embedding(cell)
    indexing = {c.kind: c for c in cells if c.kind in INDEXING}
    if indexing:
        out.update(cal.index(indexing))
    return {k: v for k, v in out.items() if k in wanted}
