"""Matryoshka widths: the loss against sentence-transformers' MatryoshkaLoss on one tiny batch,
`--dimensions` as the full vector cut and renormalised (embed, index and search), the trained
widths saved in the model, and the mistakes (a width over the model's, or below 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.data.pairs import PairRow
from bertkit.finetune.contrastive import matryoshka
from bertkit.finetune.embedding import EmbeddingTask
from bertkit.matryoshka import trained_dims, truncate_rows
from bertkit.st import write_sentence_transformers_files
from bertkit.tokenizer import Tokenizer

ROWS = [PairRow("a film", "the movie was good ."), PairRow("berlin", "a city in germany"),
        PairRow("john", "he was in paris"), PairRow("the river", "water runs north"),
        PairRow("good", "not bad at all")]
DIMS, WEIGHTS = (32, 16, 8, 4), (1.0, 0.5, 2.0, 1.0)


def _max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


@pytest.fixture(scope="module")
def st_dir(tiny_dir, tmp_path_factory) -> Path:
    """A random transformers BertModel (no dropout) with the tiny vocabulary, saved with
    sentence-transformers' files: mean pooling over 32 tokens, normalised."""
    import transformers

    d = tmp_path_factory.mktemp("st-matryoshka")
    tok = Tokenizer.from_pretrained(tiny_dir)
    config = transformers.BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=37, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    torch.manual_seed(3)
    transformers.BertModel(config).save_pretrained(d)
    for f in Path(tiny_dir).iterdir():  # the tokenizer's files, as bertkit saved them
        if f.is_file() and f.name not in ("config.json", "model.safetensors", "pytorch_model.bin"):
            (d / f.name).write_bytes(f.read_bytes())
    write_sentence_transformers_files(d, "mean", 32, 32, normalize=True)
    return d


def test_the_loss_equals_sentence_transformers_matryoshka_loss(st_dir):
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss, MultipleNegativesRankingLoss

    from bertkit.model import BertModel

    reference = st.SentenceTransformer(str(st_dir), device="cpu")
    loss = MatryoshkaLoss(reference, MultipleNegativesRankingLoss(reference, scale=20.0), list(DIMS), list(WEIGHTS))
    features = [reference.preprocess([getattr(r, column) for r in ROWS]) for column in ("anchor", "positive")]
    want = float(loss(features, None).detach())

    task = EmbeddingTask(Tokenizer.from_pretrained(st_dir), 32, "mean", matryoshka_dims=DIMS,
                         matryoshka_weights=WEIGHTS)
    task.fit_labels(ROWS)
    batch = task.collate(task.prepare(ROWS, train=True).features)
    got = float(task.loss(BertModel.from_pretrained(st_dir).eval(), batch))
    assert got == pytest.approx(want, abs=1e-5), (got, want)
    plain = EmbeddingTask(Tokenizer.from_pretrained(st_dir), 32, "mean")
    plain.fit_labels(ROWS)
    assert abs(float(plain.loss(BertModel.from_pretrained(st_dir).eval(), batch)) - want) > 1e-2  # the widths count


def test_matryoshka_weights_each_width_and_renormalises():
    v = torch.tensor([[3.0, 4.0, 12.0], [1.0, 0.0, 0.0]])
    seen = []

    def record(x):
        seen.append(x)
        return x.sum()

    total = matryoshka(record, v, (2, 3), (0.5, 2.0))
    assert [x.shape[1] for x in seen] == [3, 2]  # the widest first, as sentence-transformers sums them
    torch.testing.assert_close(seen[1], torch.tensor([[0.6, 0.8], [1.0, 0.0]]))
    assert total.item() == pytest.approx(2.0 * float(seen[0].sum()) + 0.5 * 2.4, abs=1e-6)
    assert matryoshka(record, v, ()).item() == pytest.approx(float(v.sum()))


def test_embed_dimensions_is_the_full_vector_cut_and_renormalised(st_dir, tmp_path):
    from bertkit.embed import embed_texts, load_encoder

    model, tok = load_encoder(st_dir)
    texts = ["the movie was good .", "berlin", "a " * 80 + "film"]  # the last one past 32 tokens
    full = embed_texts(model, tok, texts, pooling="mean", normalize=True, max_length=32, progress=False)
    for d in DIMS:
        cut = embed_texts(model, tok, texts, pooling="mean", normalize=True, max_length=32, progress=False,
                          dimensions=d)
        want = full[:, :d] / np.linalg.norm(full[:, :d], axis=1, keepdims=True)
        assert cut.shape == (3, d) and _max_diff(cut, want) < 1e-6, d
        np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-6)
        assert _max_diff(truncate_rows(full, d), want) < 1e-6
    raw = embed_texts(model, tok, texts, pooling="mean", normalize=False, progress=False, dimensions=8)
    unit = embed_texts(model, tok, texts, pooling="mean", normalize=False, progress=False)
    assert _max_diff(raw, unit[:, :8]) < 1e-6  # not unit vectors: cut, not renormalised
    (tmp_path / "in.txt").write_text("\n".join(texts[:2]) + "\n", encoding="utf-8")
    assert main(["embed", "--model", str(st_dir), "--input", str(tmp_path / "in.txt"), "--out",
                 str(tmp_path / "v.npy"), "--dimensions", "8", "--no-progress"]) == 0
    assert _max_diff(np.load(tmp_path / "v.npy"), full[:2, :8] / np.linalg.norm(full[:2, :8], axis=1,
                                                                                 keepdims=True)) < 1e-5


def test_index_and_search_at_a_width(st_dir, tmp_path, capsys):
    from bertkit.embed import embed_texts, load_encoder

    passages = ["the movie was good .", "berlin is a city", "john was in paris", "water runs north"]
    (tmp_path / "docs.txt").write_text("\n".join(passages) + "\n", encoding="utf-8")
    assert main(["index", "--model", str(st_dir), "--input", str(tmp_path / "docs.txt"), "--out",
                 str(tmp_path / "idx"), "--dimensions", "8", "--no-progress"]) == 0
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["dim"] == 8 and meta["dimensions"] == 8
    model, tok = load_encoder(st_dir)
    docs = embed_texts(model, tok, passages, pooling="mean", normalize=True, max_length=32, progress=False,
                       dimensions=8)
    assert _max_diff(np.load(tmp_path / "idx" / "vectors.npy"), docs) < 1e-5
    capsys.readouterr()
    assert main(["search", "--index", str(tmp_path / "idx"), "a film", "--json", "-k", "4"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    query = embed_texts(model, tok, ["a film"], pooling="mean", normalize=True, max_length=32, progress=False,
                        dimensions=8)[0]
    want = docs @ query
    assert [h["rank"] for h in hits] == [1, 2, 3, 4]
    for h in hits:
        assert h["score"] == pytest.approx(float(want[int(h["id"]) - 1]), abs=1e-5)


def test_the_saved_model_records_its_widths_and_loads_in_sentence_transformers(st_dir, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from bertkit.model import BertModel

    task = EmbeddingTask(Tokenizer.from_pretrained(st_dir), 32, "mean", matryoshka_dims=(8, 32, 16), normalize=True)
    task.save_model(BertModel.from_pretrained(st_dir), tmp_path / "m", Tokenizer.from_pretrained(st_dir))
    assert trained_dims(tmp_path / "m") == [32, 16, 8]
    assert task.settings()["matryoshka_dims"] == [8, 32, 16]
    vectors = st.SentenceTransformer(str(tmp_path / "m"), device="cpu").encode(["a film"], truncate_dim=8)
    assert vectors.shape == (1, 8)


@pytest.mark.parametrize("flag, expect", [
    ("--dimensions 33", "--dimensions 33 must be between 1 and the vectors' width 32"),
    ("--dimensions 0", "argument --dimensions"),
    ("--matryoshka-weights 1,2", "--matryoshka-weights names 2 weights for 1 --matryoshka-dims"),
])
def test_a_bad_width_is_one_line_and_exit_2(st_dir, tmp_path, flag, expect):
    (tmp_path / "in.txt").write_text("a film\n", encoding="utf-8")
    (tmp_path / "p.tsv").write_text("anchor\tpositive\na film\tthe movie\nberlin\ta city\n", encoding="utf-8")
    if flag.startswith("--matryoshka"):
        argv = ["finetune", "--model", str(st_dir), "--task", "embedding", "--train", str(tmp_path / "p.tsv"), "--dev",
                str(tmp_path / "p.tsv"), "--out", str(tmp_path / "out"), "--matryoshka-dims", "16", *flag.split()]
    else:
        argv = ["embed", "--model", str(st_dir), "--input", str(tmp_path / "in.txt"), "--out",
                str(tmp_path / "v.npy"), *flag.split()]
    got = subprocess.run([sys.executable, "-m", "bertkit.cli", *argv], capture_output=True, text=True)
    lines = [line for line in got.stderr.splitlines() if line.strip() and "threads" not in line]
    assert got.returncode == 2 and len(lines) == 1 and expect in lines[0], got.stderr
    assert not (tmp_path / "v.npy").exists() and not (tmp_path / "out").exists()
