"""`bertkit export --format onnx`: the graph, run in plain ONNX Runtime, gives bertkit's outputs.

Tiny random models: an embedding model in sentence-transformers' layout (mean pooling then
Normalize) and each head. Every graph is checked on batch sizes and lengths other than the one
it was traced with (dynamic axes), with padding; fp32 must match PyTorch within 1e-4, int8 must
run and stay close; `embed` and `evaluate --backend onnx` must give what the torch backend gives.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

ort = pytest.importorskip("onnxruntime")

from bertkit import BertConfig, Tokenizer, UserError
from bertkit.embed import embed_texts, load_encoder
from bertkit.export import writer
from bertkit.export.writer import export_onnx, sample_inputs
from bertkit.heads import HEADS
from bertkit.model import BertModel
from finetune_helpers import run_cli, write_sst2

TEXTS = ["the movie was very good .", "a film", "the plot was dull and the cast was weak , really boring .", "ok"]
SHAPES = ((4, 11), (1, 3), (5, 40))  # none of them the traced (2, 16)


def _config(tiny_dir: Path, **changes) -> BertConfig:
    tok = Tokenizer.from_pretrained(tiny_dir)
    return BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=37, max_position_embeddings=64, **changes)


@pytest.fixture(scope="module")
def st_dir(tiny_dir, tmp_path_factory) -> Path:
    """A sentence-transformers directory: encoder, mean pooling, Normalize."""
    d = tmp_path_factory.mktemp("st")
    torch.manual_seed(1)
    BertModel(_config(tiny_dir)).save_pretrained(d, tokenizer=Tokenizer.from_pretrained(tiny_dir))
    (d / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    return d


@pytest.fixture(scope="module")
def st_export(st_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("st-onnx") / "onnx"
    export_onnx(st_dir, out, int8=True, log=lambda _: None)
    return out


def _head_dir(tiny_dir: Path, root: Path, head: str, labels: list[str] | None = None) -> Path:
    n = {"BertForSequenceClassification": 3, "BertForTokenClassification": 5}.get(head)
    labels = labels or ([f"L{i}" for i in range(n)] if n else None)
    config = _config(tiny_dir, **({"id2label": dict(enumerate(labels))} if labels else {}))
    torch.manual_seed(2)
    d = root / head
    HEADS[head](config).save_pretrained(d, tokenizer=Tokenizer.from_pretrained(tiny_dir))
    return d


def _session(path: Path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _torch_outputs(model, feed) -> dict[str, np.ndarray]:
    t = {k: torch.from_numpy(v) for k, v in feed.items()}
    with torch.no_grad():
        out = model.eval()(**t)
    names = ("logits", "start_logits", "end_logits", "seq_relationship_logits")
    return {n: getattr(out, n).float().numpy() for n in names if getattr(out, n, None) is not None}


def test_embedding_graph_gives_bertkits_vectors_in_plain_onnxruntime(st_dir, st_export):
    meta = json.loads((st_export / "onnx.json").read_text())
    assert (meta["kind"], meta["pooling"], meta["normalize"]) == ("embedding", "mean", True)
    assert {"vocab.txt", "config.json", "modules.json", "1_Pooling", "model.onnx", "model_int8.onnx"} <= {
        p.name for p in st_export.iterdir()}
    model, tok = load_encoder(st_dir)
    want = embed_texts(model, tok, TEXTS, pooling="mean", normalize=True, progress=False)
    enc = tok.encode_batch(TEXTS)
    T = max(len(e.ids) for e in enc)
    ids = np.array([e.ids + [0] * (T - len(e.ids)) for e in enc], dtype=np.int64)
    mask = (np.arange(T)[None] < np.array([len(e.ids) for e in enc])[:, None]).astype(np.int64)
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    tokens, vectors = _session(st_export / "model.onnx").run(["token_embeddings", "sentence_embedding"], feed)
    assert np.abs(vectors - want).max() < 1e-4
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    with torch.no_grad():
        hidden = model(torch.from_numpy(ids), torch.from_numpy(mask)).last_hidden_state.numpy()
    assert np.abs((tokens - hidden)[mask.astype(bool)]).max() < 1e-4
    for feed in sample_inputs(model.config, SHAPES, seed=5):  # other batch sizes and lengths
        got = _session(st_export / "model.onnx").run(["sentence_embedding"], feed)[0]
        with torch.no_grad():
            h = model(*(torch.from_numpy(feed[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
        m = torch.from_numpy(feed["attention_mask"]).float()[:, :, None]
        ref = torch.nn.functional.normalize((h.last_hidden_state * m).sum(1) / m.sum(1), dim=-1).numpy()
        assert got.shape == ref.shape and np.abs(got - ref).max() < 1e-4


def test_int8_graph_runs_and_stays_close(st_export):
    meta = json.loads((st_export / "onnx.json").read_text())
    assert meta["int8"]["min_cosine_to_fp32"] > 0.95
    ops = {n.op_type for n in __import__("onnx").load(str(st_export / "model_int8.onnx")).graph.node}
    assert "QAttention" in ops and ("MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops)
    feed = sample_inputs(BertConfig(vocab_size=60, max_position_embeddings=64), SHAPES, seed=3)[0]
    fp32 = _session(st_export / "model.onnx").run(["sentence_embedding"], feed)[0]
    int8 = _session(st_export / "model_int8.onnx").run(["sentence_embedding"], feed)[0]
    assert not np.array_equal(fp32, int8)  # it is a different graph
    assert ((fp32 * int8).sum(1) > 0.95).all()


def test_an_embedding_export_card_names_its_source_and_its_snippet_embeds(st_dir, st_export):
    import yaml

    text = (st_export / "README.md").read_text(encoding="utf-8")
    meta = yaml.safe_load(text[4:].partition("\n---\n")[0])
    onnx = json.loads((st_export / "onnx.json").read_text())
    assert meta["pipeline_tag"] == "sentence-similarity" and meta["base_model"] == str(st_dir)
    assert meta["metrics"] == ["fp32_max_abs_diff_token_embeddings", "fp32_max_abs_diff_sentence_embedding",
                               "int8_max_abs_diff_token_embeddings", "int8_max_abs_diff_sentence_embedding",
                               "int8_min_cosine_to_fp32"]
    assert "--pooling mean --normalize yes" in text and "bertkit embed --model PATH --backend onnx" in text
    code = text.split("ONNX Runtime:\n\n```python\n", 1)[1].split("```", 1)[0]
    names: dict = {}
    exec(code.replace("PATH", str(st_export)), names)
    got = names["outputs"]["sentence_embedding"]
    model, tok = load_encoder(st_dir)
    want = embed_texts(model, tok, ["A sentence to read."], pooling="mean", normalize=True, progress=False)
    assert onnx["outputs"] == list(names["outputs"]) and np.abs(got - want).max() < 1e-4


@pytest.mark.parametrize("attention", ["fused", "plain"])
@pytest.mark.parametrize("head", sorted(HEADS))
def test_each_head_graph_matches_pytorch(tiny_dir, tmp_path, head, attention):
    d = _head_dir(tiny_dir, tmp_path, head)
    meta = export_onnx(d, tmp_path / "onnx", fused_attention=attention == "fused", log=lambda _: None)
    assert meta["kind"] == head and max(meta["max_abs_diff"].values()) < 1e-4
    model = HEADS[head].from_pretrained(d)
    session = _session(tmp_path / "onnx" / "model.onnx")
    assert [o.name for o in session.get_outputs()] == meta["outputs"]
    for feed in sample_inputs(model.config, SHAPES, seed=7):
        got = dict(zip(meta["outputs"], session.run(None, feed)))
        want = _torch_outputs(model, feed)
        assert set(got) == set(want)
        keep = feed["attention_mask"].astype(bool)
        for name in want:
            diff = np.abs(got[name] - want[name])
            assert got[name].shape == want[name].shape, name
            assert (diff[keep] if diff.shape[:2] == keep.shape else diff).max() < 1e-4, name


def test_export_refused_above_tolerance_writes_nothing(st_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "compare", lambda *a: {"token_embeddings": 0.5, "sentence_embedding": 0.1})
    with pytest.raises(UserError, match=re.escape("differs from PyTorch by 5.00e-01, more than the tolerance")):
        export_onnx(st_dir, tmp_path / "out", log=lambda _: None)
    assert not (tmp_path / "out").exists() and not list(tmp_path.iterdir())


def test_embed_backend_onnx_gives_the_same_vectors(st_dir, st_export, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    for pooling in ("mean", "cls"):  # the graph's own pooled output, and pooling its token vectors
        for backend, model in (("torch", st_dir), ("onnx", st_export)):
            assert run_cli("embed", "--model", model, "--input", tmp_path / "in.txt", "--pooling", pooling,
                           "--normalize", "--backend", backend, "--precision", "fp32",
                           "--out", tmp_path / f"{backend}.npy") == 0
        torch_vectors, onnx_vectors = np.load(tmp_path / "torch.npy"), np.load(tmp_path / "onnx.npy")
        assert torch_vectors.shape == (len(TEXTS), 32)
        assert np.abs(torch_vectors - onnx_vectors).max() < 1e-5, pooling
        (tmp_path / "torch.npy").unlink(), (tmp_path / "onnx.npy").unlink()
    assert run_cli("embed", "--model", st_export, "--input", tmp_path / "in.txt", "--pooling", "mean",
                   "--normalize", "--backend", "onnx", "--int8", "--out", tmp_path / "int8.npy") == 0
    assert not np.array_equal(np.load(tmp_path / "int8.npy"), onnx_vectors)


def test_evaluate_backend_onnx_gives_the_torch_metrics(tiny_dir, tmp_path, capsys):
    d = _head_dir(tiny_dir, tmp_path, "BertForSequenceClassification", ["0", "1"])
    write_sst2(tmp_path / "dev.tsv", 16, 1)
    assert run_cli("export", "--model", d, "--format", "onnx", "--int8", "--out", tmp_path / "onnx") == 0
    reports = {}
    for backend, model in (("torch", d), ("onnx", tmp_path / "onnx")):
        capsys.readouterr()
        assert run_cli("evaluate", "--model", model, "--task", "sst2", "--data", tmp_path / "dev.tsv",
                       "--backend", backend, "--max-seq-len", "32", "--out", tmp_path / f"{backend}.tsv") == 0
        reports[backend] = json.loads(capsys.readouterr().out)
    assert reports["onnx"]["accuracy"] == reports["torch"]["accuracy"] and reports["onnx"]["examples"] == 16
    assert (tmp_path / "onnx.tsv").read_text() == (tmp_path / "torch.tsv").read_text()
    with pytest.raises(UserError, match="is a BertForSequenceClassification, not a BertForTokenClassification"):
        from bertkit.export.backend import load_onnx_head

        load_onnx_head(tmp_path / "onnx", HEADS["BertForTokenClassification"], None)


def test_retrieval_backend_onnx_ranks_as_torch(st_dir, st_export, tmp_path, capsys):
    docs = [*TEXTS, "the river in paris", "john and mary in berlin", "a great show"]
    with open(tmp_path / "corpus.jsonl", "w") as f:
        f.writelines(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(docs))
    queries = ["a good movie", "berlin", "the dull plot"]
    with open(tmp_path / "queries.jsonl", "w") as f:
        f.writelines(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(queries))
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td5\t1\nq2\td2\t1\n")
    reports = {}
    for backend, model in (("torch", st_dir), ("onnx", st_export)):
        capsys.readouterr()
        assert run_cli("evaluate", "--task", "retrieval", "--model", model, "--backend", backend, "--queries",
                       tmp_path / "queries.jsonl", "--corpus", tmp_path / "corpus.jsonl", "--qrels",
                       tmp_path / "qrels.tsv") == 0
        reports[backend] = json.loads(capsys.readouterr().out)["results"]["dense"]
    for key in ("ndcg@10", "mrr@10", "map@100"):
        assert reports["onnx"][key] == pytest.approx(reports["torch"][key], abs=1e-9), key


@pytest.mark.parametrize("head, op", [("BertForSequenceClassification", "classify"),
                                      ("BertForTokenClassification", "tokens"), ("BertForQuestionAnswering", "qa"),
                                      ("BertForMaskedLM", "mlm"), ("embedding", "embed")])
def test_serve_backend_on_an_export_answers_as_the_torch_backend(tiny_dir, st_dir, tmp_path, head, op):
    import dataclasses

    from bertkit.export.serving import OnnxServeBackend
    from bertkit.serve.backend import TorchBackend, pad_batch
    from bertkit.serve.models import describe

    d = st_dir if head == "embedding" else _head_dir(tiny_dir, tmp_path, head)
    export_onnx(d, tmp_path / "onnx", log=lambda _: None)
    spec = describe("m", d)
    tok = spec.tokenizer
    rows = [(e.ids, e.type_ids) for e in tok.encode_batch(TEXTS)]
    rows[0] = ([*rows[0][0][:2], tok.mask_id, *rows[0][0][3:]], rows[0][1])  # a [MASK] for mlm
    batch = pad_batch(rows, tok.pad_id)
    want = TorchBackend(spec).run(op, batch)
    got = OnnxServeBackend(dataclasses.replace(spec, path=tmp_path / "onnx")).run(op, batch)
    assert len(got) == len(want) == len(TEXTS)
    assert all(w.size for w in want[:1])  # mlm: the [MASK] row has logits
    for g, w in zip(got, want):
        assert g.shape == w.shape and (g.size == 0 or np.abs(g - w).max() < 1e-4)


def test_serve_backend_onnx_through_a_real_server_answers_as_torch(tiny_dir, st_dir, st_export, tmp_path):
    """`bertkit serve --backend onnx`: an embedding export serves /embed with the torch model's
    vectors (int8 close to them, as are `--backend torch --int8`'s); a classifier export serves
    /predict with the torch labels and scores, and refuses /embed, which its graph cannot give."""
    import httpx

    from bertkit.serve.app import Service
    from bertkit.serve.models import describe
    from serve_helpers import serving

    cls_dir = _head_dir(tiny_dir, tmp_path, "BertForSequenceClassification")
    export_onnx(cls_dir, tmp_path / "cls-onnx", log=lambda _: None)

    def answers(specs, backend):
        with serving(Service(specs, backend=backend, log=lambda _: None)) as url:
            embed = httpx.post(url + "/embed", json={"model": "st", "inputs": TEXTS, "normalize": False}, timeout=30)
            predict = httpx.post(url + "/predict", json={"model": "cls", "inputs": [[t] for t in TEXTS]}, timeout=30)
            cls_embed = httpx.post(url + "/embed", json={"model": "cls", "inputs": TEXTS}, timeout=30)
            return embed, predict, cls_embed

    torch_answers = answers([describe("st", st_dir), describe("cls", cls_dir)], "torch")
    onnx_answers = answers([describe("st", st_export, "onnx"), describe("cls", tmp_path / "cls-onnx", "onnx")], "onnx")
    int8_answers = answers([describe("st", st_export, "onnx", int8=True),
                            describe("cls", tmp_path / "cls-onnx", "onnx")], "onnx")
    torch8_answers = answers([describe("st", st_dir, int8=True), describe("cls", cls_dir, int8=True)], "torch")
    want = np.array(torch_answers[0].json())
    assert onnx_answers[0].status_code == 200
    np.testing.assert_allclose(np.array(onnx_answers[0].json()), want, atol=1e-4)
    for int8 in (int8_answers, torch8_answers):  # the export's int8 graph; torch's int8 linear layers
        got8 = np.array(int8[0].json())
        cos = (got8 * want).sum(1) / np.linalg.norm(got8, axis=1) / np.linalg.norm(want, axis=1)
        assert got8.shape == want.shape and cos.min() > 0.98 and not np.allclose(got8, want, atol=1e-6)
    assert torch8_answers[1].status_code == 200 and len(torch8_answers[1].json()) == len(TEXTS)
    torch_pred, onnx_pred = ([p for row in a[1].json() for p in row] for a in (torch_answers, onnx_answers))
    assert len(onnx_pred) == 3 * len(TEXTS)  # every label of every input
    assert [p["label"] for p in onnx_pred] == [p["label"] for p in torch_pred]
    assert [p["score"] for p in onnx_pred] == pytest.approx([p["score"] for p in torch_pred], abs=1e-4)
    assert torch_answers[2].status_code == 200  # torch embeds with a head's encoder
    assert onnx_answers[2].status_code == 404
    assert "it serves /, /tokenize, /decode, /predict" in onnx_answers[2].json()["error"]


def test_serve_backend_onnx_refuses_a_folder_it_cannot_run(st_dir, st_export, tmp_path):
    from bertkit.serve.models import describe

    with pytest.raises(UserError, match="--backend onnx runs a folder made by `bertkit export"):
        describe("st", st_dir, "onnx")
    plain = tmp_path / "plain"
    export_onnx(st_dir, plain, log=lambda _: None)
    with pytest.raises(UserError, match="exported without --int8"):
        describe("st", plain, "onnx", int8=True)
    with pytest.raises(UserError, match="an ONNX export without torch weights: add --backend onnx"):
        describe("st", st_export)
