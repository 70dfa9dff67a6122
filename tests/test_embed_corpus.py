"""`bertkit embed --shards --out DIR` over a corpus, and `bertkit index --vectors DIR` from its shards.

A tiny random BERT (hidden 32) embeds a corpus of three files (text with a blank line, JSONL with
titles and its own ids, Parquet without ids). The shards must hold every passage's id in corpus
order and the vectors `embed_texts` gives the same texts; a rerun must keep intact shards and
redo missing, unfinished and corrupted ones (a flipped byte is caught by the SHA-256, never kept);
a run whose driver is SIGKILLed mid-way must resume to the same shards; Ray (a local instance with
2 CPUs, started once for the module) must write the same ids and vectors as the in-process engine,
also after its driver or one of its model actors is killed; an index built from shards must give
the top 10 an index built from the corpus gives, through one graph, several, or exact search.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.corpus.embedder import EmbedSettings, model_fingerprint
from bertkit.corpus.run import Engine, embed_corpus
from bertkit.corpus.shards import check_shard, read_manifest, read_shard, specs_of
from bertkit.embed import embed_texts, load_encoder
from bertkit.errors import UserError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parents[1]
WORDS = "good great fine bad awful movie film plot actor scene the a and of 1 2 3 x y z".split()
FLAGS = ["--shards", "--pooling", "mean", "--max-length", "64", "--precision", "fp32", "--no-progress"]


def _texts(n: int, seed: int) -> list[str]:
    """n different texts (a text twice would tie, and ties may fall either way between two builds)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out[" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14)))] = None
    return list(out)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """Three files (47 passages) and what they hold: ids and texts in corpus order."""
    root = tmp_path_factory.mktemp("corpus")
    lines = _texts(20, 1)
    (root / "a.txt").write_text("\n".join(lines[:5] + [""] + lines[5:]) + "\n", encoding="utf-8")
    rows = [{"_id": f"doc{i}", "title": "t" if i % 2 else "", "text": t} for i, t in enumerate(_texts(15, 2))]
    (root / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    parquet = _texts(12, 3)
    pq.write_table(pa.table({"text": parquet}), root / "c.parquet")
    ids = [f"a.txt:{n}" for n in [*range(1, 6), *range(7, 22)]] + [r["_id"] for r in rows] + \
        [f"c.parquet:{n}" for n in range(1, 13)]
    texts = lines + [f"{r['title']} {r['text']}".strip() for r in rows] + parquet
    return {"dir": root, "ids": ids, "texts": texts}


def _settings(model: Path) -> EmbedSettings:
    return EmbedSettings(str(model.resolve()), "mean", False, 64, fingerprint=model_fingerprint(str(model.resolve())))


@pytest.fixture(scope="module")
def reference(tiny_dir, corpus) -> np.ndarray:
    model, tok = load_encoder(tiny_dir)
    return embed_texts(model, tok, corpus["texts"], pooling="mean", max_length=64, progress=False)


def _read_all(folder: Path) -> tuple[list[str], np.ndarray]:
    manifest = read_manifest(folder)
    ids, vectors = [], []
    for spec in specs_of(manifest):
        record, state = check_shard(folder, spec, manifest["shard_format"])
        assert state == "ok", (spec, state)
        got = read_shard(folder, record, manifest["shard_format"])
        ids += got[0]
        vectors.append(got[1])
    return ids, np.concatenate(vectors)


def _assert_close(got: np.ndarray, want: np.ndarray, atol: float = 1e-6) -> None:
    diff = np.abs(got - want)
    assert got.shape == want.shape and diff.max() <= atol, f"max {diff.max():.2e}, mean {diff.mean():.2e}"


def _embed(args: list[str], capsys=None) -> tuple[int, str]:
    status = main(["embed", *args])
    return status, capsys.readouterr().err if capsys else ""


@pytest.fixture(scope="module")
def local_shards(tiny_dir, corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local") / "shards"
    embed_corpus([str(corpus["dir"])], out, _settings(tiny_dir), shard_size=6, fmt="parquet", progress=False)
    return out


def test_shards_hold_every_passage_in_corpus_order_with_its_id_checksum_and_vector(local_shards, corpus, reference,
                                                                                  tiny_dir, tmp_path):
    manifest = read_manifest(local_shards)
    assert manifest["complete"] and manifest["count"] == 47 and manifest["dim"] == 32
    covered = [(s["source"], s["first"], s["count"]) for s in manifest["shards"]]
    assert covered == [(0, 0, 6), (0, 6, 6), (0, 12, 6), (0, 18, 2), (1, 0, 6), (1, 6, 6), (1, 12, 3),
                       (2, 0, 6), (2, 6, 6)]  # no shard spans two files
    ids, vectors = _read_all(local_shards)
    assert ids == corpus["ids"]
    _assert_close(vectors, reference)
    npy = tmp_path / "npy"
    embed_corpus([str(corpus["dir"] / "*")], npy, _settings(tiny_dir), shard_size=6, fmt="npy", progress=False)
    assert sorted(p.name for p in npy.glob("shard-000000*")) == ["shard-000000.ids.json", "shard-000000.json",
                                                                  "shard-000000.npy"]
    npy_ids, npy_vectors = _read_all(npy)
    assert npy_ids == ids and np.array_equal(npy_vectors, vectors)


def test_a_rerun_keeps_intact_shards_and_redoes_missing_unfinished_and_corrupt_ones(local_shards, reference, corpus,
                                                                                   tiny_dir, tmp_path, capsys):
    import shutil

    out = tmp_path / "shards"
    shutil.copytree(local_shards, out)
    (out / "shard-000001.parquet").unlink()  # lost
    (out / "shard-000004.json").unlink()  # its record never written: unfinished
    data = bytearray((out / "shard-000007.parquet").read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit flipped: same size, same names
    (out / "shard-000007.parquet").write_bytes(bytes(data))
    (out / f".shard-000002.parquet.{2**22 + 7}.abcdefgh.tmp").write_bytes(b"half")  # a dead writer's leftover
    untouched = (out / "shard-000003.parquet").stat().st_mtime_ns
    argv = ["--model", str(tiny_dir), "--input", str(corpus["dir"]), "--out", str(out), "--shard-size", "6", *FLAGS]
    status, err = _embed(argv, capsys)
    assert status == 0, err
    assert "kept 6 of 9 shards (29 passages) from an earlier run; embedding 3 (1 failed its checksum)" in err, err
    ids, vectors = _read_all(out)
    assert ids == corpus["ids"]
    _assert_close(vectors, reference)
    assert (out / "shard-000003.parquet").stat().st_mtime_ns == untouched
    assert not list(out.glob(".*.tmp"))
    status, err = _embed(argv, capsys)
    assert status == 0 and "all 9 shards (47 passages) are complete and intact" in err, err


def test_other_settings_or_a_changed_corpus_are_refused_and_overwrite_replaces_only_shards(local_shards, corpus,
                                                                                          tiny_dir, tmp_path, capsys):
    import shutil

    out = tmp_path / "shards"
    shutil.copytree(local_shards, out)
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    argv = ["--model", str(tiny_dir), "--input", str(corpus["dir"]), "--out", str(out), "--shard-size", "6", *FLAGS]
    status, err = _embed([*argv, "--pooling", "cls"], capsys)
    assert status == 2 and "made with other settings (pooling); pass --overwrite" in err, err
    status, err = _embed([*argv[:-len(FLAGS)], "--shard-size", "5", *FLAGS], capsys)
    assert status == 2 and "of 6 passages in parquet (not 5 in parquet)" in err, err
    changed = tmp_path / "corpus"
    shutil.copytree(corpus["dir"], changed)
    status, err = _embed([*argv[:3], str(changed), *argv[4:]], capsys)
    assert status == 2 and "of other corpus files" in err, err
    before = sorted(p.name for p in out.iterdir())
    status, err = _embed([*argv, "--pooling", "cls", "--overwrite"], capsys)
    assert status == 0, err
    assert sorted(p.name for p in out.iterdir()) == before and (out / "notes.txt").read_text() == "mine"
    assert read_manifest(out)["settings"]["pooling"] == "cls"


def _kill_after_first_shard(process: subprocess.Popen, out: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not list(out.glob("shard-*[0-9].json")):  # a record, not an .ids.json
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no shard was written"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()


def _cli(argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "bertkit.cli", *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def big(tiny_dir, tmp_path_factory) -> dict:
    """A corpus slow enough to stop mid-way (one text per forward pass), and its shards made in one run."""
    root = tmp_path_factory.mktemp("big")
    (root / "big.txt").write_text("\n".join(_texts(1200, 4)) + "\n", encoding="utf-8")
    whole = root / "whole"
    embed_corpus([str(root / "big.txt")], whole, _settings(tiny_dir), shard_size=40, progress=False)
    argv = ["--model", str(tiny_dir), "--input", str(root / "big.txt"), "--shard-size", "40", "--batch-size", "1",
            "--threads", "1", *FLAGS]
    return {"root": root, "whole": _read_all(whole), "argv": argv}


def test_a_run_killed_with_sigkill_resumes_to_the_same_shards(big, tmp_path, capsys):
    out = tmp_path / "shards"
    _kill_after_first_shard(_cli(["embed", *big["argv"], "--out", str(out)]), out)
    status, err = _embed([*big["argv"], "--out", str(out)], capsys)
    kept = int(err.split("kept ")[1].split(" of")[0]) if "kept " in err else 0
    assert status == 0 and 0 < kept < 30, err
    ids, vectors = _read_all(out)
    assert ids == big["whole"][0]
    _assert_close(vectors, big["whole"][1])


def test_engine_ray_without_ray_says_how_to_install_it(tiny_dir, corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    status, err = _embed(["--model", str(tiny_dir), "--input", str(corpus["dir"]), "--out", str(tmp_path / "s"),
                          "--engine", "ray", *FLAGS], capsys)
    assert status == 2 and err.strip().endswith("--engine ray needs Ray: pip install 'bertkit[ray]'"), err
    assert not (tmp_path / "s").exists()


# ---- Ray: one local instance with 2 CPUs for the module ----

@pytest.fixture(scope="module")
def ray_address():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def test_ray_shards_hold_the_in_process_ids_and_vectors(ray_address, local_shards, corpus, tiny_dir, tmp_path):
    out = tmp_path / "ray"
    manifest = embed_corpus([str(corpus["dir"])], out, _settings(tiny_dir), shard_size=6,
                            engine=Engine("ray", threads=1, workers=2), progress=False)
    assert manifest["last_run"]["engine"] == "ray" and manifest["last_run"]["shards"] == 9
    ids, vectors = _read_all(out)
    local_ids, local_vectors = _read_all(local_shards)
    assert ids == local_ids
    _assert_close(vectors, local_vectors)


def _actors(before: frozenset = frozenset()) -> list:
    """The model actors of this module's Ray (by their process title), but those in `before`."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if "ray::" in cmdline and "ShardEmbedder" in cmdline and p.pid not in before:
            found.append(p)
    return found


def test_ray_resumes_after_its_driver_and_one_of_its_actors_are_killed(ray_address, big, tmp_path, capsys):
    out = tmp_path / "shards"
    argv = [*big["argv"], "--out", str(out), "--engine", "ray", "--workers", "2", "--ray-address", ray_address]
    _kill_after_first_shard(_cli(["embed", *argv]), out, timeout=240)
    first = len(list(out.glob("shard-*[0-9].json")))
    result: dict = {}
    before = frozenset(p.pid for p in _actors())  # the killed driver's, on their way out
    thread = threading.Thread(target=lambda: result.setdefault("status", main(["embed", *argv])))
    thread.start()
    deadline = time.monotonic() + 240
    while len(list(out.glob("shard-*[0-9].json"))) < first + 1 or not _actors(before):
        assert thread.is_alive() and time.monotonic() < deadline, "the resumed run wrote no shard"
        time.sleep(0.02)
    victim = _actors(before)[0]
    alive = frozenset(p.pid for p in _actors(before))
    victim.send_signal(signal.SIGKILL)  # an actor this module's Ray started, by its pid
    killed_at = len(list(out.glob("shard-*[0-9].json")))
    restarted = set()
    while thread.is_alive() and time.monotonic() < deadline + 300:  # docs/embeddings.md: the actor restarts
        restarted |= {p.pid for p in _actors(before | alive)}
        time.sleep(0.02)
    thread.join(timeout=1)
    err = capsys.readouterr().err
    assert f"kept {first} of 30 shards" in err, err
    assert result.get("status") == 0, err  # the same run ends with every shard: no rerun
    assert restarted and not victim.is_running() and killed_at < 30
    ids, vectors = _read_all(out)
    assert ids == big["whole"][0]
    _assert_close(vectors, big["whole"][1])


# ---- index --vectors ----

@pytest.fixture(scope="module")
def passages(tiny_dir, tmp_path_factory) -> dict:
    """One JSONL corpus (300 passages) embedded into shards of 64, without normalising."""
    root = tmp_path_factory.mktemp("passages")
    docs = root / "docs.jsonl"
    docs.write_text("".join(json.dumps({"_id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(_texts(300, 5))),
                    encoding="utf-8")
    embed_corpus([str(docs)], root / "shards", _settings(tiny_dir), shard_size=64, fmt="parquet", progress=False)
    return {"docs": docs, "shards": root / "shards", "root": root}


def _index_pair(tiny_dir, passages, tmp_path, **settings):
    from bertkit.search.encoder import Encoder
    from bertkit.search.from_shards import build_from_shards
    from bertkit.search.index import IndexSettings, SearchIndex, build_index

    (tmp_path / "corpus").mkdir()
    (tmp_path / "shards").mkdir()
    build_index(passages["docs"], tmp_path / "corpus", Encoder.load(tiny_dir, "mean", 64),
                IndexSettings(**{k: v for k, v in settings.items() if k != "graph_size"}), progress=False)
    build_from_shards(passages["shards"], tmp_path / "shards", IndexSettings(**settings), progress=False)
    queries = Encoder.load(tiny_dir, "mean", 64).encode(["good movie", "the plot of a film", "x y z", "bad actor"])
    return SearchIndex(tmp_path / "corpus"), tmp_path / "shards", queries


@pytest.mark.parametrize("graphs,graph_dtype", [(0, None), (1, None), (3, None), (3, "int8")])
def test_an_index_from_shards_returns_the_top_10_of_one_built_from_the_corpus(graphs, graph_dtype, tiny_dir, passages,
                                                                               tmp_path):
    from bertkit.search.index import SearchIndex

    settings = {"ann_threshold": 0 if graphs else 50_000, "graph_size": 100 if graphs == 3 else 0,
                "graph_dtype": graph_dtype}
    from_corpus, folder, queries = _index_pair(tiny_dir, passages, tmp_path, **settings)
    want_pos, want_scores = from_corpus.search(queries, 10)
    for in_memory in (False, True):
        index = SearchIndex(folder, in_memory=in_memory)
        assert len(index.graphs) == graphs
        assert {g.dtype.name for g in index.graphs} <= {"I8" if graph_dtype else "F32"}
        pos, scores = index.search(queries, 10)
        np.testing.assert_array_equal(pos, want_pos)
        np.testing.assert_allclose(scores, want_scores, atol=1e-5)
        assert [h["id"] for h in index.hits(pos[0], scores[0])] == [h["id"] for h in from_corpus.hits(pos[0],
                                                                                                       scores[0])]
        exact = index.search(queries, 10, exact=True)
        assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact[0], pos)]) >= 0.9


def test_index_from_shards_refuses_a_corrupt_shard_and_an_unfinished_run(tiny_dir, passages, tmp_path):
    import shutil

    from bertkit.search.from_shards import build_from_shards

    shards = tmp_path / "shards"
    shutil.copytree(passages["shards"], shards)
    data = bytearray((shards / "shard-000002.parquet").read_bytes())
    data[-100] ^= 0x80
    (shards / "shard-000002.parquet").write_bytes(bytes(data))
    (tmp_path / "idx").mkdir()
    with pytest.raises(UserError, match="shard-000002 fails its checksum"):
        build_from_shards(shards, tmp_path / "idx", progress=False)
    manifest = json.loads((shards / "manifest.json").read_text())
    (shards / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))
    assert main(["index", "--vectors", str(shards), "--out", str(tmp_path / "idx2")]) == 2
    assert not (tmp_path / "idx2").exists()


def test_index_vectors_and_search_as_a_user_types_them(passages, tmp_path):
    out = tmp_path / "idx"
    assert main(["index", "--vectors", str(passages["shards"]), "--out", str(out), "--ann-threshold", "0",
                 "--graph-size", "128", "--no-progress"]) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "bertkit.cli", "search", "--index", str(out), "good movie", "-k",
                           "3", "--json", "--in-memory", "--threads", "1"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)["hits"]
    assert [h["rank"] for h in hits] == [1, 2, 3] and all(h["id"].startswith("p") and h["text"] for h in hits)
    assert json.loads((out / "meta.json").read_text())["ann"]["files"] == ["ann-000.usearch", "ann-001.usearch",
                                                                           "ann-002.usearch"]


def test_serve_answers_search_from_the_memory_mapped_index(tiny_dir, passages, tmp_path):
    pytest.importorskip("starlette")
    import httpx

    from bertkit.search.encoder import Encoder
    from bertkit.search.index import SearchIndex
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe
    from bertkit.serve.search import attach_index
    from serve_helpers import serving

    out = tmp_path / "idx"
    assert main(["index", "--vectors", str(passages["shards"]), "--out", str(out), "--no-progress"]) == 0
    specs = [describe("enc", tiny_dir)]
    with pytest.raises(UserError, match="no served model is named 'other'"):
        attach_index(specs, ("other", str(out)))
    attach_index(specs, (None, str(out)))
    want = SearchIndex(out)
    queries = ["good movie", "bad actor"]
    pos, scores = want.search(Encoder.load(tiny_dir, "mean", 64).encode(queries), 4)
    with serving(Service(specs, log=lambda line: None)) as base:
        one = httpx.post(base + "/search", json={"query": "good movie", "top_k": 4}).json()
        both = httpx.post(base + "/search", json={"query": queries, "top_k": 4, "exact": True}).json()
        bad = httpx.post(base + "/search", json={"query": "x", "top_k": 0})
    assert [h["id"] for h in one["hits"]] == [h["id"] for h in want.hits(pos[0], scores[0])]
    assert [[h["id"] for h in r["hits"]] for r in both] == [[h["id"] for h in want.hits(p, s)]
                                                           for p, s in zip(pos, scores)]
    np.testing.assert_allclose([h["score"] for h in one["hits"]], scores[0], atol=1e-5)
    assert bad.status_code == 422 and "top_k" in bad.json()["error"]
