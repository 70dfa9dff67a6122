"""sentence-transformers' prompts: `embed --prompt-name/--prompt`, index's passage prompt, search's
query prompt and serve's `prompt_name` give sentence-transformers' `encode(..., prompt_name=...)`
vectors on the same directory; fine-tuning trains with them and saves them; the mistakes (an
unknown name, both flags, a Pooling that leaves the prompt out) are one line and exit 2, or a 422."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.st import write_sentence_transformers_files
from serve_helpers import post_json, serving

PROMPTS = {"query": "john - ", "passage": "berlin , "}  # words of the tiny vocabulary
TEXTS = ["the movie was good .", "a film", "paris river"]


def _max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


def _with_prompts(tiny_dir: Path, d: Path, default: str | None = None) -> Path:
    shutil.copytree(tiny_dir, d)
    write_sentence_transformers_files(d, "mean", 32, 32, normalize=True, prompts=PROMPTS)
    if default:
        config = json.loads((d / "config_sentence_transformers.json").read_text())
        (d / "config_sentence_transformers.json").write_text(json.dumps({**config, "default_prompt_name": default}))
    return d


@pytest.fixture(scope="module")
def dirs(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("prompts")
    return {"plain": _with_prompts(tiny_dir, root / "plain"),
            "default": _with_prompts(tiny_dir, root / "dflt", "query")}


@pytest.fixture(scope="module")
def st_encode(dirs):
    st = pytest.importorskip("sentence_transformers")
    models = {name: st.SentenceTransformer(str(d), device="cpu") for name, d in dirs.items()}
    return lambda name, texts, **kw: models[name].encode(texts, **kw)


def _embed(model: Path, tmp_path: Path, *flags: str) -> np.ndarray:
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    out.unlink(missing_ok=True)
    assert main(["embed", "--model", str(model), "--input", str(tmp_path / "in.txt"), "--out", str(out),
                 "--no-progress", *flags]) == 0
    return np.load(out)


def test_embed_with_a_prompt_equals_sentence_transformers(dirs, st_encode, tmp_path):
    plain = _embed(dirs["plain"], tmp_path)
    assert _max_diff(plain, st_encode("plain", TEXTS)) < 1e-5
    for name in PROMPTS:
        got = _embed(dirs["plain"], tmp_path, "--prompt-name", name)
        assert _max_diff(got, st_encode("plain", TEXTS, prompt_name=name)) < 1e-5, name
        assert _max_diff(got, plain) > 1e-2  # the prompt changed the vectors
    given = _embed(dirs["plain"], tmp_path, "--prompt", "good film ")
    assert _max_diff(given, st_encode("plain", TEXTS, prompt="good film ")) < 1e-5
    # default_prompt_name applies when nothing is asked; --prompt "" asks for none
    assert _max_diff(_embed(dirs["default"], tmp_path), st_encode("default", TEXTS)) < 1e-5
    assert _max_diff(_embed(dirs["default"], tmp_path), st_encode("plain", TEXTS, prompt_name="query")) < 1e-5
    assert _max_diff(_embed(dirs["default"], tmp_path, "--prompt", ""), plain) < 1e-6


def test_index_takes_the_passage_prompt_and_search_the_query_prompt(dirs, st_encode, tmp_path, capsys):
    passages = ["the movie was good .", "berlin is a city", "john was in paris", "a film"]
    (tmp_path / "docs.txt").write_text("\n".join(passages) + "\n", encoding="utf-8")
    assert main(["index", "--model", str(dirs["plain"]), "--input", str(tmp_path / "docs.txt"), "--out",
                 str(tmp_path / "idx"), "--no-progress"]) == 0
    docs = st_encode("plain", passages, prompt_name="passage")
    assert _max_diff(np.load(tmp_path / "idx" / "vectors.npy"), docs) < 1e-5
    assert json.loads((tmp_path / "idx" / "meta.json").read_text())["prompt"] == PROMPTS["passage"]
    capsys.readouterr()
    assert main(["search", "--index", str(tmp_path / "idx"), "a film", "--json", "-k", "4"]) == 0
    want = docs @ st_encode("plain", ["a film"], prompt_name="query")[0]
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert len(hits) == 4 and hits[0]["score"] == pytest.approx(float(want.max()), abs=1e-5)
    for h in hits:
        assert h["score"] == pytest.approx(float(want[int(h["id"]) - 1]), abs=1e-5)


def test_serve_applies_prompt_name_and_refuses_an_unknown_one(dirs, st_encode):
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe
    from bertkit.serve.requests import Limits

    service = Service([describe("enc", dirs["plain"])], Limits(), log=lambda line: None)
    with serving(service) as url:
        for name in PROMPTS:
            got = post_json(url, "/embed", {"inputs": TEXTS, "prompt_name": name})
            assert got.status_code == 200, got.text
            assert _max_diff(got.json(), st_encode("plain", TEXTS, prompt_name=name)) < 1e-5
        openai = post_json(url, "/v1/embeddings", {"input": TEXTS, "prompt_name": "query", "dimensions": 8})
        want = st_encode("plain", TEXTS, prompt_name="query")[:, :8]
        want /= np.linalg.norm(want, axis=1, keepdims=True)
        assert _max_diff([d["embedding"] for d in openai.json()["data"]], want) < 1e-5
        plain = post_json(url, "/embed", {"inputs": TEXTS})
        assert _max_diff(plain.json(), st_encode("plain", TEXTS)) < 1e-5
        unknown = post_json(url, "/embed", {"inputs": TEXTS, "prompt_name": "title"})
        assert unknown.status_code == 422 and "'title' is not one of the model's prompts" in unknown.json()["error"]
        assert "'query', 'passage'" in unknown.json()["error"]
        bad = post_json(url, "/v1/embeddings", {"input": "a", "prompt_name": "nope"})
        assert bad.status_code == 422 and bad.json()["error"]["param"] == "prompt_name"


def test_finetune_trains_with_the_prompts_and_saves_them(tiny_dir, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from bertkit.data.pairs import PairRow
    from bertkit.finetune.embedding import EmbeddingTask
    from bertkit.tokenizer import Tokenizer

    task = EmbeddingTask(Tokenizer.from_pretrained(tiny_dir), 32, query_prompt="john - ", passage_prompt="paris , ")
    data = task.prepare([PairRow("a film", "the movie", ("berlin",))], train=True)
    assert data.decoding == ["john - a film", "paris , the movie", "paris , berlin"]
    (tmp_path / "p.tsv").write_text("anchor\tpositive\na film\tthe movie\nberlin\ta city\njohn\tparis\n",
                                    encoding="utf-8")
    assert main(["finetune", "--model", str(tiny_dir), "--task", "embedding", "--train", str(tmp_path / "p.tsv"),
                 "--dev", str(tmp_path / "p.tsv"), "--out", str(tmp_path / "out"), "--epochs", "1", "--seeds", "1",
                 "--no-progress", "--query-prompt", "john - ", "--passage-prompt", "paris , "]) == 0
    config = json.loads((tmp_path / "out" / "model" / "config_sentence_transformers.json").read_text())
    assert config["prompts"] == {"query": "john - ", "passage": "paris , "}
    model = st.SentenceTransformer(str(tmp_path / "out" / "model"), device="cpu")
    assert model.prompts["query"] == "john - " and model.prompts["passage"] == "paris , "


def _refused(argv: list[str], expect: str, out: Path) -> None:
    got = subprocess.run([sys.executable, "-m", "bertkit.cli", *argv], capture_output=True, text=True)
    lines = [line for line in got.stderr.splitlines() if line.strip() and "threads" not in line]
    assert got.returncode == 2 and len(lines) == 1 and expect in lines[0], got.stderr
    assert not out.exists()


def test_prompt_mistakes_are_one_line_and_exit_2(dirs, tiny_dir, tmp_path):
    (tmp_path / "in.txt").write_text("a film\n", encoding="utf-8")
    embed = ["embed", "--model", str(dirs["plain"]), "--input", str(tmp_path / "in.txt"), "--out",
             str(tmp_path / "v.npy")]
    _refused([*embed, "--prompt-name", "title"], "--prompt-name 'title' is not one of the model's prompts "
                                                 "('query', 'passage')", tmp_path / "v.npy")
    _refused([*embed, "--prompt-name", "query", "--prompt", "x"], "--prompt-name and --prompt ask for different",
             tmp_path / "v.npy")
    _refused([*embed[:2], str(tiny_dir), *embed[3:], "--pooling", "mean", "--prompt-name", "query"],
             "is not one of the model's prompts (none)", tmp_path / "v.npy")
    _refused(["index", "--model", str(dirs["plain"]), "--input", str(tmp_path / "in.txt"), "--out",
              str(tmp_path / "idx"), "--prompt-name", "doc"], "--prompt-name 'doc' is not one", tmp_path / "idx")
    excluded = tmp_path / "instructor"
    shutil.copytree(dirs["plain"], excluded)
    pooling = json.loads((excluded / "1_Pooling" / "config.json").read_text())
    (excluded / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "include_prompt": False}))
    _refused([*embed[:2], str(excluded), *embed[3:], "--prompt-name", "query"], "include_prompt false",
             tmp_path / "v.npy")
