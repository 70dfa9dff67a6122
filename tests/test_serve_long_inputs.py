"""A text over the model's tokens, served (`serve.routes.long_inputs`, `serve.windows`): every route
with and without each option (refused with the limit in the message, cut, read in windows), each
answer checked against the same computation done with the library, the headers that say what
happened, the server's default, and the bounds (conflicting fields, too many windows)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.long_inputs import Plan
from bertkit.serve.requests import Limits
from serve_helpers import make_model_dirs, post_json, serving

WORDS = "the film was very good and the plot was dull".split()
LONG = " ".join(WORDS[i % len(WORDS)] for i in range(300))  # 300 tokens; the tiny models read 128


@pytest.fixture(scope="module")
def dirs(tiny_dir, tmp_path_factory):
    return make_model_dirs(tiny_dir, tmp_path_factory.mktemp("serve-long"))


def _service(dirs, names, **limits):
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe

    return Service([describe(n, dirs[n]) for n in names], Limits(max_input_chars=5_000, **limits),
                   log=lambda line: None)


@pytest.fixture(scope="module")
def url(dirs):
    with serving(_service(dirs, ("enc", "cls", "rank", "tags", "mlm", "qa"))) as base:
        yield base


def _ok(response):
    assert response.status_code == 200, response.text
    return response.json()


def test_embed_refuses_cuts_or_reads_in_windows_and_says_which(url, dirs):
    from bertkit.embed import embed_texts, load_encoder
    from bertkit.long_inputs import Policy

    refused = post_json(url, "/embed", {"model": "enc", "inputs": ["a film", LONG]})
    assert refused.status_code == 422 and "inputs[1] is longer than the model's 128 tokens" in refused.json()["error"]
    cut = post_json(url, "/embed", {"model": "enc", "inputs": ["a film", LONG], "truncate": True})
    assert cut.headers["x-truncated-inputs"] == "1" and "x-windowed-inputs" not in cut.headers
    kept = int(cut.headers["x-truncated-at"])
    assert LONG[:kept] == " ".join(LONG.split()[:126])  # the characters of the 126 tokens read
    assert post_json(url, "/embed", {"model": "enc", "inputs": [LONG], "long_inputs": "truncate"}).json() == \
        [cut.json()[1]]
    windows = post_json(url, "/embed", {"model": "enc", "inputs": ["a film", LONG], "long_inputs": "windows"})
    assert windows.headers["x-windowed-inputs"] == "1:4" and "x-truncated-inputs" not in windows.headers
    model, tok = load_encoder(dirs["enc"])
    expected = embed_texts(model, tok, ["a film", LONG], pooling="mean", normalize=True, max_length=128,
                           policy=Policy("windows"), progress=False)
    np.testing.assert_allclose(windows.json(), expected, atol=1e-5)
    assert np.allclose(windows.json()[0], cut.json()[0]) and not np.allclose(windows.json()[1], cut.json()[1])
    wider = post_json(url, "/embed", {"model": "enc", "inputs": LONG, "long_inputs": "windows", "window_stride": 126})
    assert wider.headers["x-windowed-inputs"] == "0:3"
    for body, why in (({"truncate": True, "long_inputs": "windows"}, "ask for different things"),
                      ({"long_inputs": "chunks"}, "long_inputs must be one of refuse, truncate, windows"),
                      ({"long_inputs": "windows", "window_stride": 0}, "window_stride must be an integer")):
        bad = post_json(url, "/embed", {"model": "enc", "inputs": LONG, **body})
        assert bad.status_code == 422 and why in bad.json()["error"], bad.text


def test_openai_and_similarity_pool_windows(url):
    tei = _ok(post_json(url, "/embed", {"model": "enc", "inputs": ["a film", LONG], "long_inputs": "windows"}))
    openai = post_json(url, "/v1/embeddings", {"model": "enc", "input": ["a film", LONG]})
    assert openai.headers["x-windowed-inputs"] == "1:4"
    np.testing.assert_allclose([d["embedding"] for d in openai.json()["data"]], tei, atol=1e-6)
    similar = _ok(post_json(url, "/similarity", {"model": "enc", "long_inputs": "windows",
                                                 "inputs": {"source_sentence": "a film", "sentences": [LONG]}}))
    assert similar[0] == pytest.approx(float(np.dot(tei[0], tei[1])), abs=1e-5)


def test_embed_all_gives_every_token_of_the_whole_text(url):
    whole = _ok(post_json(url, "/embed_all", {"model": "enc", "inputs": LONG, "long_inputs": "windows"}))[0]
    cut = _ok(post_json(url, "/embed_all", {"model": "enc", "inputs": LONG, "truncate": True}))[0]
    assert len(whole) == 302 and len(cut) == 128
    # [CLS] and the tokens central in the first window come from it, which is the cut row itself
    np.testing.assert_allclose(whole[:60], cut[:60], atol=1e-5)


def test_predict_averages_or_takes_the_max_of_the_windows_logits(url, dirs):
    from bertkit.heads import BertForSequenceClassification
    from bertkit.tokenizer import Tokenizer

    model = BertForSequenceClassification.from_pretrained(dirs["cls"]).eval()
    tok = Tokenizer.from_pretrained(dirs["cls"])
    plan = Plan(tok.encode_ids_batch([LONG]), 128, tok)
    with torch.no_grad():
        logits = np.stack([model(torch.tensor([plan.row(r)[0]])).logits[0].numpy() for r in range(len(plan))])
    for how, combined in (("mean", logits.mean(0)), ("max", logits.max(0))):
        got = post_json(url, "/predict", {"model": "cls", "inputs": LONG, "long_inputs": "windows", "aggregate": how,
                                          "raw_scores": True})
        assert got.headers["x-windowed-inputs"] == "0:4"
        scores = {p["label"]: p["score"] for p in got.json()}
        np.testing.assert_allclose([scores["negative"], scores["positive"]], combined, atol=1e-5)
    pair = post_json(url, "/predict", {"model": "cls", "inputs": [["a film", "short"], ["a film", LONG]],
                                       "long_inputs": "windows"})
    assert pair.status_code == 200 and pair.headers["x-windowed-inputs"] == "1:4"  # the query rides in each window
    assert post_json(url, "/predict", {"model": "cls", "inputs": LONG}).status_code == 422


def test_rerank_scores_a_long_passage_by_its_best_window(url):
    texts = ["a film", LONG]
    windows = _ok(post_json(url, "/rerank", {"model": "rank", "query": "good film", "texts": texts,
                                             "long_inputs": "windows", "raw_scores": True}))
    cut = _ok(post_json(url, "/rerank", {"model": "rank", "query": "good film", "texts": texts, "truncate": True,
                                         "raw_scores": True}))
    by_index = {h["index"]: h["score"] for h in windows}
    assert by_index[0] == pytest.approx({h["index"]: h["score"] for h in cut}[0], abs=1e-6)
    assert by_index[1] >= {h["index"]: h["score"] for h in cut}[1] - 1e-6  # the first window is one of them


def test_ner_in_windows_gives_offsets_into_the_whole_text(url):
    refused = post_json(url, "/ner", {"model": "tags", "inputs": LONG})
    assert refused.status_code == 422 and "128 tokens" in refused.json()["error"]
    cut = _ok(post_json(url, "/ner", {"model": "tags", "inputs": LONG, "truncate": True}))
    whole = post_json(url, "/ner", {"model": "tags", "inputs": LONG, "long_inputs": "windows"})
    entities = whole.json()
    assert len(cut) == 126 and len(entities) == 300 and whole.headers["x-windowed-inputs"] == "0:4"
    words = LONG.split()
    assert [e["word"] for e in entities] == words  # the tags model says B-PER for every word
    last = entities[-1]
    assert (last["start"], last["end"]) == (len(LONG) - len(words[-1]), len(LONG))


def test_fill_mask_reads_a_mask_beyond_the_first_window(url):
    text = LONG + " [MASK] ."
    cut = post_json(url, "/fill-mask", {"model": "mlm", "inputs": text, "truncate": True})
    assert cut.status_code == 422 and "no [MASK] token within the model's tokens" in cut.json()["error"]
    found = post_json(url, "/fill-mask", {"model": "mlm", "inputs": text, "long_inputs": "windows", "top_k": 3})
    assert found.status_code == 200 and len(found.json()) == 1 and len(found.json()[0]) == 3
    assert found.json()[0][0]["sequence"].startswith("the film was")


def test_qa_says_how_many_windows_it_read(url):
    got = post_json(url, "/qa", {"model": "qa", "question": "what was good", "context": LONG})
    assert got.status_code == 200 and got.headers["x-windowed-inputs"].startswith("0:")


def test_the_server_default_and_the_window_bound(dirs):
    with serving(_service(dirs, ("enc",), long_inputs="windows", max_windows=5)) as base:
        default = post_json(base, "/embed", {"inputs": LONG})
        assert default.status_code == 200 and default.headers["x-windowed-inputs"] == "0:4"
        assert post_json(base, "/embed", {"inputs": LONG, "truncate": True}).headers["x-truncated-inputs"] == "0"
        refused = post_json(base, "/embed", {"inputs": LONG, "long_inputs": "refuse"})
        assert refused.status_code == 422
        many = post_json(base, "/embed", {"inputs": [LONG, LONG]})
        assert many.status_code == 413 and "8 windows of 128 tokens; the limit is 5" in many.json()["error"]
    with serving(_service(dirs, ("enc",), long_inputs="truncate")) as base:
        cut = post_json(base, "/v1/embeddings", {"input": LONG})
        assert cut.status_code == 200 and cut.headers["x-truncated-inputs"] == "0"
