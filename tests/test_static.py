"""Static embeddings (`bertkit distill --to static`, `bertkit.static`): the table against a hand
computation from transformers' own forward pass, sentence-transformers loading the directory to the
same vectors, embed / index / search / serve on it, refinement, and the command's mistakes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "dog", "sat", "on", "mat", "ran",
         "fast", "slow", "red", "blue", "big", "small", "house", "tree", ".", ",", "##s", "##ed", "##ing", "and",
         "is", "was", "under", "over", "bird", "sang", "sun", "rain", "cold", "hot", "day", "night", "park", "river"]
TEXTS = ["the cat sat on the mat .", "a big red dog ran fast", "birds sang in the rain , and the sun was hot",
         "night", "the river was cold under the tree", "zebra quokka"]  # the last: [UNK] only


def _max_diff(a, b) -> str:
    d = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return f"max diff {d.max():.2e}, mean diff {d.mean():.2e}"


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A random 2-layer BERT from transformers' own config and class (width 32), with a vocabulary."""
    import transformers

    d = tmp_path_factory.mktemp("teacher")
    config = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=37, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertModel(config).eval().save_pretrained(d)
    (d / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
    return d


def _distill(teacher, out, **options) -> dict:
    from bertkit.distill.static import StaticJob, StaticOptions, distill_static

    return distill_static(StaticJob(str(teacher), str(out), StaticOptions(**options)), log=lambda _: None)


@pytest.fixture(scope="module")
def static_dir(teacher, tmp_path_factory):
    out = tmp_path_factory.mktemp("static") / "model"
    _distill(teacher, out, dim=16)
    return out


def _table(folder) -> np.ndarray:
    from safetensors.numpy import load_file

    return load_file(str(folder / "0_StaticEmbedding" / "model.safetensors"))["embedding.weight"]


def _hand_table(teacher, dim: int) -> np.ndarray:
    """transformers' forward of [CLS] t [SEP] for every token, mean of the three, PCA by numpy, the
    sign rule, SIF 1e-4 on Zipf's law over the non-special tokens, [PAD] and [UNK] zeroed."""
    import transformers

    model = transformers.BertModel.from_pretrained(teacher).eval()
    ids = torch.tensor([[2, t, 3] for t in range(len(VOCAB))])
    with torch.no_grad():
        vectors = model(ids).last_hidden_state.mean(1).double().numpy()  # (V, 32)
    centred = vectors - vectors.mean(0)
    _, eigvecs = np.linalg.eigh(centred.T @ centred / (len(VOCAB) - 1))
    components = eigvecs[:, ::-1][:, :dim]
    scores = centred @ components
    scores *= np.sign(scores[np.abs(scores).argmax(0), np.arange(dim)])
    ranks = np.empty(len(VOCAB))
    order = list(range(5, len(VOCAB))) + list(range(5))  # the five specials take the last ranks
    ranks[order] = np.arange(len(VOCAB))
    p = 1 / (ranks + 2)
    p /= p.sum()
    table = scores * (1e-4 / (1e-4 + p))[:, None]
    table[[0, 1]] = 0.0
    return table


def test_table_is_each_token_through_the_teacher_reduced_and_weighted(teacher, static_dir):
    ours, hand = _table(static_dir), _hand_table(teacher, 16)
    assert ours.shape == (len(VOCAB), 16)
    assert np.allclose(ours, hand, atol=1e-5), _max_diff(ours, hand)
    assert not np.allclose(hand[5], 0) and np.allclose(ours[1], 0)  # a real row; [UNK] adds nothing


def test_encode_is_the_normalised_mean_of_the_tokens_rows(static_dir):
    from bertkit.embed import embed_texts
    from bertkit.export.backend import load_encoder_for

    model, tokenizer = load_encoder_for(static_dir)
    table = _table(static_dir)
    vectors = embed_texts(model, tokenizer, TEXTS[:2], normalize=True, progress=False)
    for text, got in zip(TEXTS[:2], vectors):
        ids = [VOCAB.index(w) for w in text.split()]  # every word is one token: no [CLS], no [SEP]
        mean = table[ids].mean(0)
        assert np.allclose(got, mean / np.linalg.norm(mean), atol=1e-6), _max_diff(got, mean / np.linalg.norm(mean))


def test_sentence_transformers_loads_it_with_bertkits_vectors(static_dir):
    from sentence_transformers import SentenceTransformer

    from bertkit.embed import embed_texts
    from bertkit.export.backend import load_encoder_for

    st = SentenceTransformer(str(static_dir), device="cpu")
    assert type(st[0]).__name__ == "StaticEmbedding" and st.get_embedding_dimension() == 16
    theirs = st.encode(TEXTS, convert_to_numpy=True)
    model, tokenizer = load_encoder_for(static_dir)
    ours = embed_texts(model, tokenizer, TEXTS, normalize=True, progress=False, batch_size=4)
    assert np.allclose(ours, theirs, atol=1e-6), _max_diff(ours, theirs)


def test_refinement_moves_only_the_corpus_tokens_toward_the_teacher(teacher, static_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["the cat sat on the mat and the dog ran fast .", "a small bird sang in the park .",
                                 "the sun was hot and the day was big ."] * 4) + "\n", encoding="utf-8")
    record = _distill(teacher, tmp_path / "refined", dim=16, corpus=str(corpus), refine_epochs=4,
                      refine_batch_size=2)
    losses = record["refine_losses"]
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    before, after = _table(static_dir), _table(tmp_path / "refined")
    moved = np.flatnonzero(np.abs(after - before).max(1) > 1e-7)
    seen = {VOCAB.index(w) for w in corpus.read_text().split() if w in VOCAB}
    assert moved.size and set(moved.tolist()) <= seen, (moved, seen)


def _bertkit(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertkit.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_distill_embed_index_search_through_the_cli(teacher, tmp_path):
    from bertkit.embed import embed_texts
    from bertkit.export.backend import load_encoder_for

    out = tmp_path / "static"
    done = _bertkit("distill", "--to", "static", "--teacher", str(teacher), "--out", str(out), "--dim", "8",
                    "--threads", "1")
    assert done.returncode == 0, done.stderr
    assert "32 -> 8" in done.stdout and json.loads((out / "static.json").read_text())["dim"] == 8
    (tmp_path / "lines.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    done = _bertkit("embed", "--model", str(out), "--input", str(tmp_path / "lines.txt"), "--normalize",
                    "--out", str(tmp_path / "v.npy"), "--no-progress", "--threads", "1")
    assert done.returncode == 0, done.stderr
    model, tokenizer = load_encoder_for(out)
    expected = embed_texts(model, tokenizer, TEXTS, normalize=True, progress=False)
    got = np.load(tmp_path / "v.npy")
    assert got.shape == (len(TEXTS), 8) and np.allclose(got, expected, atol=1e-6), _max_diff(got, expected)
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)),
                    encoding="utf-8")
    done = _bertkit("index", "--model", str(out), "--input", str(docs), "--out", str(tmp_path / "idx"),
                    "--no-progress", "--threads", "1")
    assert done.returncode == 0, done.stderr
    done = _bertkit("search", "--index", str(tmp_path / "idx"), "the cat sat on the mat .", "-k", "2", "--json",
                    "--threads", "1")
    assert done.returncode == 0, done.stderr
    assert "d0" in done.stdout.split("d1")[0], done.stdout  # the identical text ranks first


def test_serve_backend_embeds_a_static_dir(static_dir):
    from bertkit.embed import embed_texts
    from bertkit.export.backend import load_encoder_for
    from bertkit.serve.backend import TorchBackend, pad_batch
    from bertkit.serve.models import describe

    spec = describe("static", static_dir)
    assert spec.kind == "encoder" and spec.pooling == "mean" and spec.config.hidden_size == 16
    rows = [(ids, [0] * len(ids)) for ids in (spec.tokenizer.encode(t).ids for t in TEXTS[:3])]
    got = np.stack(TorchBackend(spec).run("embed", pad_batch(rows, spec.tokenizer.pad_id)))
    model, tokenizer = load_encoder_for(static_dir)
    expected = embed_texts(model, tokenizer, TEXTS[:3], progress=False)  # not normalised, as the backend's
    assert np.allclose(got, expected, atol=1e-6), _max_diff(got, expected)


@pytest.mark.parametrize("argv, expect", [
    (["--dim", "64"], "--dim 64 is larger than the teacher's width 32"),
    (["--student-preset", "teacher"], "--student-preset is a student's flag"),
])
def test_mistakes_are_one_line_and_exit_2(teacher, tmp_path, argv, expect):
    done = _bertkit("distill", "--to", "static", "--teacher", str(teacher), "--out", str(tmp_path / "o"), *argv)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and expect in done.stderr, done.stderr
    assert not (tmp_path / "o").exists()


def test_a_folder_that_is_not_a_model_is_refused(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "modules.json").write_text("[]", encoding="utf-8")
    done = _bertkit("embed", "--model", str(tmp_path / "notes"), "--input", str(tmp_path / "x.txt"),
                    "--out", str(tmp_path / "v.npy"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not a model directory" in done.stderr
