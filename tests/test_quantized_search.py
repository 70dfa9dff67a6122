"""`index --quantize int8|binary` and `search --oversample/--rescore`: what the quantised rows hold and find.

Binary search must return the brute-force Hamming top k (ties in index order, across scan blocks);
rescoring must order its candidates as exact fp32 search does; calibrated int8 must give the codes
of a hand computation (and sentence-transformers'); an index built with --quantize (from a corpus,
continued after a stop, or from shards) must reload and search through the CLI and serve, and
refuse what it cannot do.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from bertkit.errors import UserError
from bertkit.search import quantized
from bertkit.search.index import SearchIndex
from bertkit.search.quantized import QuantizedRows, dequantize, int8_codes, write_quantized
from bertkit.search.vectors import Vectors, VectorWriter

ROOT = Path(__file__).resolve().parents[1]
WORDS = "good great fine bad awful movie film plot actor scene the a and of 1 2 3 x y z".split()


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _quantized_folder(tmp: Path, rows: np.ndarray, kind: str) -> tuple[QuantizedRows, Vectors]:
    """An index folder's vector files alone: fp32 rows, then their quantised rows."""
    tmp.mkdir()
    writer = VectorWriter(tmp, len(rows), rows.shape[1], "fp32")
    writer.add(rows)
    writer.close()
    meta = write_quantized(tmp, kind)
    return QuantizedRows(tmp, meta, rows.shape[1]), Vectors(tmp)


def test_binary_search_is_the_brute_force_hamming_top_k_with_ties_in_index_order(tmp_path, monkeypatch):
    monkeypatch.setattr(quantized, "SCAN_ROWS", 37)  # many scan blocks: ties must merge across them too
    dim = 70  # not whole bytes nor words: the padding bits must never count
    rows = _unit(500, dim, 0)
    rows[400] = rows[3]  # the same bits twice
    rows[401] = rows[3] * 0.5 + 0.5 * np.abs(rows[3])  # the same signs, another vector
    index, _ = _quantized_folder(tmp_path / "idx", rows, "binary")
    assert index.codes.shape == (500, 16) and index.codes.dtype == np.uint8
    queries = np.vstack([rows[3], _unit(4, dim, 1)])
    distances = ((rows[None] > 0) != (queries[:, None] > 0)).sum(axis=2)  # (Q, N) by counting bits
    want = np.array([sorted(range(500), key=lambda j: (distances[i, j], j))[:25] for i in range(len(queries))])
    pos, scores = index.top_k(queries, 25)
    np.testing.assert_array_equal(pos, want)
    np.testing.assert_array_equal(scores, 1 - 2 * np.take_along_axis(distances, want, 1).astype(np.float32) / dim)
    assert list(pos[0][:3]) == [3, 400, 401]  # distance 0 three times: index order
    assert len(set(np.take_along_axis(distances, want, 1)[1])) < 25  # ties inside the top 25 were exercised


@pytest.mark.parametrize("kind", ["binary", "int8"])
def test_rescoring_orders_the_candidates_as_exact_fp32_search(tmp_path, kind):
    rows = _unit(300, 48, 2)
    near = rows[10] + 0.003 * _unit(12, 48, 5)  # closer to row 10 than the quantised rows can tell apart
    rows[20:32] = near / np.linalg.norm(near, axis=1, keepdims=True)
    rows[250] = rows[10]  # an exact tie after rescoring: index order
    index, vectors = _quantized_folder(tmp_path / "idx", rows, kind)
    queries = np.vstack([rows[10], _unit(3, 48, 3)]).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    candidates, candidate_scores = index.top_k(queries, 5 * 3)
    pos, scores = index.search(queries, 5, vectors, oversample=3)
    exact = queries @ rows.T
    for i, c in enumerate(candidates):
        want = sorted(c.tolist(), key=lambda j: (-exact[i, j], j))[:5]
        assert pos[i].tolist() == want
        np.testing.assert_allclose(scores[i], exact[i, want], atol=1e-6)
    assert pos[0][:2].tolist() == [10, 250]
    first, first_scores = index.search(queries, 5, vectors, rescore=False)
    np.testing.assert_array_equal(first, candidates[:, :5])
    np.testing.assert_array_equal(first_scores, candidate_scores[:, :5])
    assert first[0].tolist() != pos[0].tolist()  # the first stage alone orders the near rows otherwise


def test_calibrated_int8_matches_a_hand_computation(tmp_path):
    s = 2.0 ** -7  # a range of 255 / 128 makes each step exactly 1/128
    rows = np.array([[-1.0, 0.5], [-1 + 255 * s, 0.5], [0.25, 0.5]], dtype=np.float32)
    index, _ = _quantized_folder(tmp_path / "idx", rows, "int8")
    np.testing.assert_array_equal(index.ranges, [[-1.0, 0.5], [-1 + 255 * s, 0.5]])
    # column 0: (v + 1) / s = 0, 255, 160 -> -128, 127, 32; column 1 has no range: every code -128, read as 0.5
    np.testing.assert_array_equal(index.codes, [[-128, -128], [127, -128], [32, -128]])
    centres = np.array([[-1 + 0.5 * s, 0.5], [-1 + 255.5 * s, 0.5], [-1 + 160.5 * s, 0.5]], dtype=np.float32)
    np.testing.assert_allclose(dequantize(index.codes, index.ranges), centres, atol=1e-7)
    q = np.array([[0.6, -0.8]], dtype=np.float32)
    np.testing.assert_allclose(index.top_k(q, 3)[1], [np.sort(q @ centres.T)[0][::-1]], atol=1e-6)
    st = pytest.importorskip("sentence_transformers.quantization")
    wide = _unit(200, 16, 4)
    theirs = st.quantize_embeddings(wide, precision="int8", calibration_embeddings=wide)
    np.testing.assert_array_equal(int8_codes(wide, quantized.calibrate(_vectors(tmp_path / "wide", wide))), theirs)


def _vectors(folder: Path, rows: np.ndarray) -> Vectors:
    folder.mkdir()
    writer = VectorWriter(folder, len(rows), rows.shape[1], "fp32")
    writer.add(rows)
    writer.close()
    return Vectors(folder)


def _passages(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(n)]


def _bertkit(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "bertkit.cli", *argv], check=False, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("kind", ["binary", "int8"])
def test_a_quantized_index_reloads_and_searches_through_the_command_line(tiny_dir, tmp_path, kind):
    texts = _passages(30, seed=6)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    done = _bertkit(tmp_path, "index", "--model", str(tiny_dir), "--input", str(corpus), "--out", "idx",
                    "--quantize", kind, "--ann-threshold", "0", "--no-progress")
    assert done.returncode == 0, done.stderr
    width = {"binary": 8, "int8": 32}[kind]
    assert f"{kind} rows of {width} bytes scanned, rescored from the fp32 vectors" in done.stdout
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["quantization"]["kind"] == kind and meta["ann"] is None  # no graph, despite --ann-threshold 0
    assert np.load(tmp_path / "idx" / "quantized.npy", allow_pickle=False).shape == (30, width)

    def hits(*flags: str) -> list[tuple[str, float]]:
        out = _bertkit(tmp_path, "search", "--index", "idx", texts[3], "-k", "3", "--json", *flags)
        assert out.returncode == 0, out.stderr
        return [(h["id"], h["score"]) for h in json.loads(out.stdout)["hits"]]

    exact, every = hits("--exact"), hits("--oversample", "10")  # 3 x 10: every passage rescored
    assert [h[0] for h in every] == [h[0] for h in exact] and exact[0][0] == "d3"
    np.testing.assert_allclose([h[1] for h in every], [h[1] for h in exact], atol=1e-6)
    first = hits("--no-rescore")
    assert first[0][0] == "d3" and (kind == "int8" or first[0][1] == 1.0)  # its own sign bits: distance 0


def test_a_stopped_quantized_build_resumes_to_the_rows_of_an_uninterrupted_one(tiny_dir, tmp_path, monkeypatch):
    from bertkit.cli import main
    from bertkit.search import index as index_module

    docs = tmp_path / "docs.txt"
    docs.write_text("".join(t + "\n" for t in _passages(200, seed=4)), encoding="utf-8")
    argv = ["index", "--model", str(tiny_dir), "--input", str(docs), "--chunk", "64", "--no-progress", "--threads",
            "1", "--quantize", "int8"]
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    real_done = index_module._Build.chunk_done

    def stop_after_two(self, *args):
        real_done(self, *args)
        if self.state["done"] == 128:
            raise KeyboardInterrupt

    monkeypatch.setattr(index_module._Build, "chunk_done", stop_after_two)
    assert main([*argv, "--out", str(tmp_path / "idx")]) == 130
    assert not (tmp_path / ".idx.partial" / "quantized.npy").exists()  # calibrated once every vector is in
    monkeypatch.setattr(index_module._Build, "chunk_done", real_done)
    assert main([*argv, "--out", str(tmp_path / "idx")]) == 2  # without --resume: refused, kept
    assert main([*argv, "--out", str(tmp_path / "idx"), "--resume"]) == 0
    for name in ("vectors.npy", "quantized.npy", "ranges.npy"):
        assert (tmp_path / "idx" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_an_index_from_shards_quantizes_the_shards_vectors(tmp_path):
    from bertkit.cli import main
    from bertkit.experiments.corpus_index import Generator, write_vector_shards
    from bertkit.search.from_shards import build_from_shards
    from bertkit.search.index import IndexSettings

    write_vector_shards(tmp_path / "gen", 3_000, 1_000, 20, Generator(dim=64, clusters=32, rank=8))
    queries = np.load(tmp_path / "gen" / "queries.npy")
    for kind in ("binary", "int8"):
        assert main(["index", "--vectors", str(tmp_path / "gen" / "shards"), "--out", str(tmp_path / kind),
                     "--quantize", kind, "--no-progress", "--threads", "1"]) == 0
        index = SearchIndex(tmp_path / kind)
        assert index.graph is None and index.meta["quantization"]["kind"] == kind
        pos, scores = index.search(queries, 10)
        exact_pos, exact_scores = index.search(queries, 10, exact=True)
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(pos, exact_pos)])
        assert recall >= (0.9 if kind == "binary" else 0.99), (kind, recall)
        np.testing.assert_allclose(scores[:, 0], exact_scores[:, 0], atol=1e-6)  # rescored exactly
    with pytest.raises(UserError, match="a quantised index has none"):
        build_from_shards(tmp_path / "gen" / "shards", tmp_path, IndexSettings(quantize="binary", graph_size=100))


def test_serve_answers_search_from_a_quantized_index(tiny_dir, tmp_path):
    from bertkit.search.encoder import Encoder
    from bertkit.search.index import IndexSettings, build_index
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe
    from bertkit.serve.requests import Limits
    from bertkit.serve.search import attach_index
    from serve_helpers import make_model_dirs, serving

    dirs = make_model_dirs(tiny_dir, tmp_path)
    texts = _passages(40, seed=7)
    (tmp_path / "docs.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    (tmp_path / "index").mkdir()
    build_index(tmp_path / "docs.txt", tmp_path / "index", Encoder.load(dirs["enc"]), IndexSettings(quantize="binary"),
                progress=False)
    specs = [describe("enc", dirs["enc"])]
    attach_index(specs, ("enc", str(tmp_path / "index")))
    limits = Limits(max_body_bytes=100_000, max_inputs=16, max_input_chars=2_000, body_timeout=5)
    with serving(Service(specs, limits, log=lambda line: None)) as base:
        got = httpx.post(base + "/search", json={"query": texts[5], "top_k": 3}).json()
        exact = httpx.post(base + "/search", json={"query": texts[5], "top_k": 3, "exact": True}).json()
    assert got["hits"][0]["text"] == texts[5] and len(got["hits"]) == 3
    assert got["hits"][0]["score"] == pytest.approx(exact["hits"][0]["score"], abs=1e-6)


def test_bad_quantize_settings_are_user_errors():
    from bertkit.search.quantized import check_quantize

    for args, message in ((("int4",), "--quantize must be one of int8, binary, not 'int4'"),
                          (("binary", True), "not with --best-chunk"),
                          (("int8", False, 4), "--graph-size cuts HNSW graphs")):
        with pytest.raises(UserError, match=message):
            check_quantize(*args)
    check_quantize(None, True, 4)  # no quantisation: nothing to refuse


def test_a_graph_dtype_with_quantize_is_refused_by_name(tiny_dir, tmp_path, capsys):
    from bertkit.cli import main

    corpus = tmp_path / "docs.txt"
    corpus.write_text("a good movie\na bad film\n")
    assert main(["index", "--model", str(tiny_dir), "--input", str(corpus), "--out", str(tmp_path / "idx"),
                 "--quantize", "int8", "--graph-dtype", "int8", "--no-progress"]) == 2
    assert "--graph-dtype applies to an HNSW graph; --quantize builds none" in capsys.readouterr().err
    assert not (tmp_path / "idx").exists()
