"""`bertkit index` / `bertkit search`: what is stored, and what a query gets back.

A tiny random BERT (hidden 32) embeds a few hundred generated passages. Exact search must give
the brute-force cosine ranking of `embed_texts`' own mean-pooled unit vectors (ties in index
order); fp16 and int8 storage must score within their rounding; the HNSW graph must find what
exact search finds; a chunked build must store the same vectors as a one-chunk build; pooling
follows the model directory's sentence-transformers files; the reranker must order hits by its
classifier's logits; and nothing is a pickle.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertkit.embed import embed_texts, load_encoder
from bertkit.errors import UserError
from bertkit.search.encoder import Encoder
from bertkit.search.index import IndexSettings, SearchIndex, build_index
from bertkit.search.passages import read_passages
from bertkit.search.rerank import Reranker
from bertkit.st import model_pooling

ROOT = Path(__file__).resolve().parents[1]
WORDS = "good great fine bad awful movie film plot actor scene the a and of 1 2 3 x y z".split()


def _passages(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(n)]


def _write_txt(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    return path


def _build(tmp: Path, model: Path, docs: Path, name: str, **settings) -> SearchIndex:
    out = tmp / name
    out.mkdir()
    build_index(docs, out, Encoder.load(model), IndexSettings(**settings), progress=False)
    return SearchIndex(out)


def _brute_force(model: Path, passages: list[str], queries: list[str], k: int):
    enc, tok = load_encoder(model)
    p = embed_texts(enc, tok, passages, pooling="mean", normalize=True, max_length=256, progress=False)
    q = embed_texts(enc, tok, queries, pooling="mean", normalize=True, max_length=256, progress=False)
    scores = q @ p.T
    order = [sorted(range(len(passages)), key=lambda j: (-scores[i, j], j))[:k] for i in range(len(queries))]
    return np.array(order), np.take_along_axis(scores, np.array(order), axis=1), q


def test_exact_search_is_the_brute_force_cosine_ranking_with_ties_in_index_order(tiny_dir, tmp_path):
    texts = _passages(150)
    texts[40] = texts[7]  # the same text twice: equal vectors, equal scores
    index = _build(tmp_path, tiny_dir, _write_txt(tmp_path / "docs.txt", texts), "idx", chunk=64)
    queries = [texts[7], "good movie", "the plot of the film"]
    want_pos, want_scores, q = _brute_force(tiny_dir, texts, queries, 10)
    pos, scores = index.search(q, 10)
    assert index.graph is None and index.meta["count"] == 150 and index.meta["pooling"] == "mean"
    np.testing.assert_array_equal(pos, want_pos)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)
    assert list(pos[0][:2]) == [7, 40]  # the tie: index order
    hits = index.hits(pos[0], scores[0])
    assert [h["id"] for h in hits[:2]] == ["8", "41"] and hits[0]["text"] == texts[7]  # ids are line numbers


def test_fp16_and_int8_storage_score_within_their_rounding(tiny_dir, tmp_path):
    texts = _passages(120, seed=1)
    docs = _write_txt(tmp_path / "docs.txt", texts)
    full = _build(tmp_path, tiny_dir, docs, "fp32")
    _, _, q = _brute_force(tiny_dir, texts, ["good film", "awful plot"], 1)
    exact = q @ full.vectors.rows(0, 120).T
    for dtype, tol in (("fp16", 2e-3), ("int8", 2e-2)):
        index = _build(tmp_path, tiny_dir, docs, dtype, dtype=dtype)
        assert np.load(index.folder / "vectors.npy", allow_pickle=False).dtype == np.dtype(
            {"fp16": np.float16, "int8": np.int8}[dtype])
        stored = q @ index.vectors.rows(0, 120).T
        assert np.abs(stored - exact).max() < tol, (dtype, np.abs(stored - exact).max())
        pos, _ = index.search(q, 5)
        assert len(set(pos[0]) & set(np.argsort(-exact[0])[:5])) >= 4


def test_hnsw_graph_finds_what_exact_search_finds(tiny_dir, tmp_path):
    texts = _passages(400, seed=2)
    index = _build(tmp_path, tiny_dir, _write_txt(tmp_path / "docs.txt", texts), "ann", ann_threshold=0, chunk=128)
    assert index.graph is not None and (index.folder / "ann.usearch").is_file()
    _, _, q = _brute_force(tiny_dir, texts, ["good movie", "bad actor", "x y z", "the scene"], 1)
    pos, scores = index.search(q, 10)
    exact_pos, exact_scores = index.search(q, 10, exact=True)
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(pos, exact_pos)])
    assert overlap >= 0.9, overlap
    np.testing.assert_allclose(scores[:, 0], exact_scores[:, 0], atol=1e-6)  # rescored exactly
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_an_int8_graph_proposes_the_candidates_and_the_stored_vectors_score_them(tiny_dir, tmp_path):
    texts = _passages(400, seed=2)
    docs = _write_txt(tmp_path / "docs.txt", texts)
    full = _build(tmp_path, tiny_dir, docs, "fp32", ann_threshold=0, chunk=128)
    small = _build(tmp_path, tiny_dir, docs, "int8", ann_threshold=0, chunk=128, dtype="fp32", graph_dtype="int8")
    assert full.graph.dtype.name == "F32" and small.graph.dtype.name == "I8"
    assert small.meta["ann"]["graph_dtype"] == "int8" and small.meta["dtype"] == "fp32"
    saved = (full.folder / "ann.usearch").stat().st_size - (small.folder / "ann.usearch").stat().st_size
    assert saved >= 400 * small.meta["dim"] * 3  # a byte per component instead of four
    _, _, q = _brute_force(tiny_dir, texts, ["good movie", "bad actor", "x y z", "the scene"], 1)
    pos, scores = small.search(q, 10)
    exact_pos, _ = small.search(q, 10, exact=True)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(pos, exact_pos)]) >= 0.9
    np.testing.assert_allclose(scores, np.take_along_axis(q @ small.vectors.rows(0, 400).T, pos, axis=1), atol=1e-6)


def _rss_file_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    pytest.skip("no RssFile in /proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads Linux's /proc/self/status")
@pytest.mark.parametrize("dtype", [np.float16, np.int8])
def test_rescored_rows_are_read_from_the_file_so_the_mapping_stays_unresident(tmp_path, dtype):
    from bertkit.search.vectors import Vectors

    rows = np.random.default_rng(0).standard_normal((40_000, 384)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", (rows * 50).astype(dtype) if dtype == np.int8 else rows.astype(dtype))
    if dtype == np.int8:
        np.save(tmp_path / "scales.npy", np.full(40_000, 0.02, dtype=np.float32))
    positions = np.random.default_rng(1).integers(40_000, size=(600, 5))
    mapped, in_memory = Vectors(tmp_path), Vectors(tmp_path, in_memory=True)
    before = _rss_file_kb()
    got = mapped.take(positions.reshape(-1))
    read_kb = _rss_file_kb() - before
    np.testing.assert_array_equal(got, in_memory.take(positions.reshape(-1)))
    np.testing.assert_array_equal(mapped.rescore(rows[:600], positions, 3)[1],
                                  in_memory.rescore(rows[:600], positions, 3)[1])
    before = _rss_file_kb()
    np.asarray(mapped.data[np.sort(positions.reshape(-1))])  # the same rows through the mapping: the control
    assert read_kb < 2_000 < _rss_file_kb() - before, (read_kb, _rss_file_kb() - before)
    mapped.close()


def test_a_chunked_build_stores_the_vectors_of_a_one_chunk_build(tiny_dir, tmp_path):
    docs = _write_txt(tmp_path / "docs.txt", _passages(200, seed=3))
    small = _build(tmp_path, tiny_dir, docs, "small", chunk=64)
    whole = _build(tmp_path, tiny_dir, docs, "whole", chunk=4096)
    np.testing.assert_allclose(small.vectors.rows(0, 200), whole.vectors.rows(0, 200), atol=1e-6)
    assert np.allclose(np.linalg.norm(whole.vectors.rows(0, 200), axis=1), 1.0, atol=1e-5)


def test_a_stopped_build_resumes_after_its_last_chunk_and_embeds_only_the_rest(tiny_dir, tmp_path, monkeypatch):
    """`index --resume` continues from progress.json: the passages it embeds are the ones the stopped
    build had not (a restart at passage 0 would store the same vectors, so the count is what tells)."""
    from bertkit.cli import main
    from bertkit.search import index as index_module

    docs = _write_txt(tmp_path / "docs.txt", _passages(300, seed=4))
    argv = ["index", "--model", str(tiny_dir), "--input", str(docs), "--chunk", "64", "--no-progress", "--threads", "1"]
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    real_done, real_encode, encoded = index_module._Build.chunk_done, Encoder.encode, []

    def stop_after_two(self, *args):
        real_done(self, *args)
        if self.state["done"] == 128:
            raise KeyboardInterrupt  # as Ctrl-C after the second chunk's progress is written

    monkeypatch.setattr(index_module._Build, "chunk_done", stop_after_two)
    assert main([*argv, "--out", str(tmp_path / "idx")]) == 130
    monkeypatch.setattr(index_module._Build, "chunk_done", real_done)
    monkeypatch.setattr(Encoder, "encode", lambda self, texts, **kw: encoded.append(len(texts)) or
                        real_encode(self, texts, **kw))
    assert main([*argv, "--out", str(tmp_path / "idx"), "--resume"]) == 0
    assert encoded == [64, 64, 44]  # passages 129-300, chunk by chunk
    for name in ("vectors.npy", "passages.jsonl", "offsets.npy"):
        assert (tmp_path / "idx" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_beir_jsonl_puts_the_title_first_and_refuses_bad_rows(tmp_path):
    good = tmp_path / "corpus.jsonl"
    good.write_text('{"_id": "d1", "title": "Paris", "text": "is in France."}\n\n{"id": 7, "text": "plain"}\n',
                    encoding="utf-8")
    assert list(read_passages(good)) == [("d1", "Paris is in France."), ("7", "plain")]
    for body, message in (('{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', ":2: id 'a' appears twice"),
                          ('{"_id": "a"}\n', ':1: expected an object with "_id"'),
                          ('[1, 2]\n', ":1: expected a JSON object"),
                          ('{"_id": "a", "text": " "}\n', ":1: passage has no")):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(body, encoding="utf-8")
        with pytest.raises(UserError, match=message):
            list(read_passages(bad))


def test_pooling_follows_the_sentence_transformers_files(tiny_dir, tmp_path):
    model = tmp_path / "st"
    shutil.copytree(tiny_dir, model)
    (model / "1_Pooling").mkdir()
    (model / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (model / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    (model / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64}))
    assert model_pooling(model) == ("cls", 64) and model_pooling(tiny_dir) == ("mean", 256)
    texts = _passages(20, seed=4)
    index = _build(tmp_path, model, _write_txt(tmp_path / "docs.txt", texts), "idx")
    enc, tok = load_encoder(model)
    want = embed_texts(enc, tok, texts, pooling="cls", normalize=True, max_length=64, progress=False)
    np.testing.assert_allclose(index.vectors.rows(0, 20), want, atol=1e-6)
    assert index.meta["pooling"] == "cls" and index.meta["max_length"] == 64


@pytest.fixture(scope="module")
def reranker_dir(tiny_dir, tmp_path_factory) -> Path:
    import torch

    from bertkit import BertForSequenceClassification, Tokenizer
    from bertkit.hf import load_config

    d = tmp_path_factory.mktemp("reranker")
    torch.manual_seed(1)
    model = BertForSequenceClassification(load_config(tiny_dir).replace(id2label={0: "LABEL_0"}))
    model.save_pretrained(d, tokenizer=Tokenizer.from_pretrained(tiny_dir))
    return d


def test_reranker_orders_hits_by_its_logits(reranker_dir, tiny_dir):
    import torch

    from bertkit import BertForSequenceClassification, Tokenizer

    texts = _passages(12, seed=5)
    hits = [{"rank": i + 1, "id": str(i), "text": t, "score": 1.0 - i / 100} for i, t in enumerate(texts)]
    got = Reranker(reranker_dir, batch_size=5).rerank("good movie", hits)
    model = BertForSequenceClassification.from_pretrained(reranker_dir).eval()
    tok = Tokenizer.from_pretrained(reranker_dir)
    logits = []
    for t in texts:  # one pair at a time: no padding at all
        e = tok.encode("good movie", t)
        with torch.no_grad():
            logits.append(model(torch.tensor([e.ids]), token_type_ids=torch.tensor([e.type_ids])).logits[0, 0].item())
    assert [h["id"] for h in got] == [str(i) for i in np.argsort(-np.array(logits), kind="stable")]
    np.testing.assert_allclose([h["rerank_score"] for h in got], 1 / (1 + np.exp(-np.sort(logits)[::-1])), atol=1e-5)
    assert [h["rank"] for h in got] == list(range(1, 13)) and {h["score"] for h in got} == {h["score"] for h in hits}
    with pytest.raises(UserError, match="no trained one-label classifier head"):
        Reranker(_no_head(tiny_dir, reranker_dir))


def _no_head(tiny_dir: Path, reranker_dir: Path) -> Path:
    """A one-label config over weights without a classifier (a pretraining checkpoint)."""
    d = reranker_dir.parent / "no-head"
    if not d.exists():
        shutil.copytree(tiny_dir, d)
        config = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**config, "id2label": {"0": "LABEL_0"}}))
    return d


def test_index_and_search_from_the_command_line(tiny_dir, reranker_dir, tmp_path):
    texts = _passages(30, seed=6)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(texts)))
    env = {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}

    def bertkit(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bertkit.cli", *argv], check=False, cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    done = bertkit("index", "--model", str(tiny_dir), "--input", str(corpus), "--out", "idx", "--dtype", "fp16",
                   "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "indexed 30 passages (32-wide fp16 vectors, mean pooling, exact search)" in done.stdout
    done = bertkit("search", "--index", "idx", texts[3], "-k", "3", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["query"] == texts[3] and result["hits"][0]["id"] == "d3" and len(result["hits"]) == 3
    done = bertkit("search", "--index", "idx", texts[3], "good", "-k", "2", "--rerank", str(reranker_dir),
                   "--candidates", "5", "--json")
    assert done.returncode == 0, done.stderr
    both = json.loads(done.stdout)
    assert len(both) == 2 and all(len(r["hits"]) == 2 and "rerank_score" in r["hits"][0] for r in both)
    assert not [p for p in (tmp_path / "idx").iterdir() if p.suffix in (".pkl", ".pickle", ".bin")]


@pytest.mark.parametrize("config, want", [
    ({"embedding_dimension": 32, "pooling_mode": "max", "include_prompt": True}, "max"),  # sentence-transformers >= 6
    ({"pooling_mode": ["cls"]}, "cls"),
    ({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}, "mean"),  # earlier versions
])
def test_both_pooling_config_layouts_read(tmp_path, config, want):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps([{"idx": 1, "name": "1", "path": "1_Pooling",
                                                        "type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(config))
    assert model_pooling(tmp_path)[0] == want


@pytest.mark.parametrize("config", [{"pooling_mode": "weightedmean"}, {"pooling_mode": ["cls", "mean"]}, {}])
def test_pooling_bertkit_cannot_give_is_a_user_error(tmp_path, config):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps([{"path": "1_Pooling", "type": "Pooling"}]))
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(config))
    expected = "1_Pooling/config.json: pooling must be exactly one of cls, mean or max"
    with pytest.raises(UserError, match=re.escape(expected)):
        model_pooling(tmp_path)


def test_a_directory_saved_by_sentence_transformers_embeds_as_it_does(tiny_dir, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from bertkit.search.encoder import Encoder
    from bertkit.st import write_sentence_transformers_files

    shutil.copytree(tiny_dir, tmp_path / "ours")
    write_sentence_transformers_files(tmp_path / "ours", "max", 64, width=32)
    ours = st.SentenceTransformer(str(tmp_path / "ours"), device="cpu")
    ours.save(str(tmp_path / "saved"))  # the installed version's own layout
    texts = _passages(6, seed=2)
    want = ours.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
    got = Encoder.load(tmp_path / "saved").encode(texts)
    np.testing.assert_allclose(got, want, atol=1e-5)
