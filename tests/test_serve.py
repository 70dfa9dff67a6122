"""`bertkit serve` through a real server on a loopback port: every route's answers checked against
bertkit's own library calls, every refusal's status code and one-line JSON error, the batcher's
policy as a pure function, dynamic batching and the queue bound with a gated backend, and
SIGTERM during requests (a subprocess, as a user runs it)."""

from __future__ import annotations

import base64
import json
import re
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

from bertkit.serve.batcher import Batcher, Job, Row, take_batch
from bertkit.serve.requests import Limits
from serve_helpers import gated, make_model_dirs, serving, start_server

TEXTS = ["the movie was good .", "a film", "john was in paris river .",
         "the plot was very dull and the cast was weak ."]


# ---- the batcher's policy: pure ----
def test_take_batch_groups_by_length_within_the_budget():
    lengths = [5, 100, 6, 7, 98]
    assert take_batch(lengths, 300, 64) == [0, 2, 3]  # the oldest and its neighbours; 98 would make 4 x 98
    assert take_batch([100, 98], 300, 64) == [1, 0]  # 2 x 100 fits; shortest first
    assert take_batch(lengths, 10_000, 64) == [0, 2, 3, 4, 1]  # all fit
    assert take_batch(lengths, 10_000, 2) == [0, 2]  # max_size
    assert take_batch([500, 3], 100, 64) == [0]  # the oldest runs alone even over the budget
    assert take_batch([10, 12, 7], 21, 64) == [2, 0]  # 12 does not fit (2 x 12 > 21); the shorter 7 does
    assert take_batch([], 100, 4) == []
    assert take_batch([8] * 10, 40, 64) == [0, 1, 2, 3, 4]  # padded tokens: longest x rows <= 40


def test_batcher_never_mixes_models_and_finishes_its_queue_on_close():
    import asyncio

    batches = []

    def run(key, rows):
        batches.append((key, [len(r) for r in rows]))
        return [key[0]] * len(rows)

    async def main():
        loop = asyncio.get_running_loop()
        batcher = Batcher(run, max_tokens=100, max_size=8)
        jobs = [Job(loop, 3), Job(loop, 2)]
        rows = [Row(("a", "embed"), [1] * n, [0] * n, jobs[0], i) for i, n in enumerate((4, 5, 6))]
        rows += [Row(("b", "embed"), [1] * n, [0] * n, jobs[1], i) for i, n in enumerate((4, 5))]
        batcher.submit(rows)  # queued before the worker starts: both models wait together
        batcher.start()
        results = await asyncio.gather(*(j.future for j in jobs))
        batcher.close()
        return results

    results = asyncio.run(main())
    assert results == [["a"] * 3, ["b"] * 2]
    assert batches == [(("a", "embed"), [4, 5, 6]), (("b", "embed"), [4, 5])]


# ---- a real server with one model of every kind ----
@pytest.fixture(scope="module")
def dirs(tiny_dir, tmp_path_factory):
    return make_model_dirs(tiny_dir, tmp_path_factory.mktemp("serve-models"))


def _service(dirs, names=("mlm", "cls", "rank", "ner", "tags", "qa"), limits=None, backend="torch"):
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe

    return Service([describe(n, dirs[n]) for n in names], limits or Limits(max_body_bytes=100_000, max_inputs=64,
                                                                             max_input_chars=2_000), backend,
                   log=lambda line: None)


@pytest.fixture(scope="module")
def url(dirs):
    with serving(_service(dirs)) as base:
        yield base


def post(url, route, body, headers=None, **kw):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url + route, content=data, timeout=30, headers={"Content-Type": "application/json",
                                                                       **(headers or {})}, **kw)


def test_v1_embeddings_through_the_openai_client_equal_bertkit_embed(url, dirs, tmp_path):
    import openai

    from bertkit.cli import main
    from bertkit.tokenizer import Tokenizer

    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    for normalize in ([], ["--normalize"]):
        out = tmp_path / f"e{len(normalize)}.npy"
        assert main(["embed", "--model", str(dirs["mlm"]), "--input", str(tmp_path / "in.txt"), "--pooling", "mean",
                     "--out", str(out), "--device", "cpu", "--precision", "fp32", *normalize]) == 0
    unit, raw = np.load(tmp_path / "e1.npy"), np.load(tmp_path / "e0.npy")
    tokens = sum(len(Tokenizer.from_pretrained(dirs["mlm"]).encode(t).ids) for t in TEXTS)
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    for fmt in ("float", "base64", openai.NOT_GIVEN):  # not told, the client asks for base64 and decodes it
        got = client.embeddings.create(model="mlm", input=TEXTS, encoding_format=fmt)
        assert [d.index for d in got.data] == list(range(len(TEXTS))) and got.model == "mlm"
        vectors = [np.frombuffer(base64.b64decode(d.embedding), "<f4") if fmt == "base64" else d.embedding
                   for d in got.data]
        np.testing.assert_allclose(np.array(vectors), unit, atol=1e-5)
        assert got.usage.prompt_tokens == got.usage.total_tokens == tokens
    one = client.embeddings.create(model="mlm", input=TEXTS[0])
    np.testing.assert_allclose(one.data[0].embedding, unit[0], atol=1e-5)
    tei = post(url, "/embed", {"inputs": TEXTS, "normalize": False})
    assert tei.status_code == 200
    np.testing.assert_allclose(np.array(tei.json()), raw, atol=1e-5)
    np.testing.assert_allclose(np.array(post(url, "/embed", {"inputs": TEXTS[1]}).json()), unit[1:2], atol=1e-5)


def test_predict_rerank_and_fill_mask_match_the_library(url, dirs):
    import torch

    from bertkit.fill_mask import fill_mask, load_masked_lm
    from bertkit.heads import BertForSequenceClassification
    from bertkit.search.rerank import Reranker
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(dirs["cls"])
    model = BertForSequenceClassification.from_pretrained(dirs["cls"]).eval()
    with torch.no_grad():
        probs = model(torch.tensor([tok.encode(TEXTS[0], TEXTS[1]).ids]),
                      token_type_ids=torch.tensor([tok.encode(TEXTS[0], TEXTS[1]).type_ids])).logits.softmax(-1)[0]
    got = post(url, "/predict", {"model": "cls", "inputs": [TEXTS[0], TEXTS[1]]}).json()  # a pair
    assert [g["label"] for g in got] == sorted(["negative", "positive"],
                                               key=lambda n: -float(probs[int(n == "positive")]))
    assert {g["label"]: g["score"] for g in got} == pytest.approx(
        {"negative": float(probs[0]), "positive": float(probs[1])}, abs=1e-5)
    batch = post(url, "/predict", {"model": "cls", "inputs": [[TEXTS[0], TEXTS[1]], [TEXTS[2]]]}).json()
    assert len(batch) == 2 and [(g["label"], pytest.approx(g["score"], abs=1e-6)) for g in got] == [
        (g["label"], g["score"]) for g in batch[0]]
    regression = post(url, "/predict", {"model": "rank", "inputs": TEXTS[2]}).json()
    logits = Reranker(dirs["rank"]).logits("what film ?", TEXTS)
    assert regression[0]["label"] == "score"
    ranked = post(url, "/rerank", {"model": "rank", "query": "what film ?", "texts": TEXTS, "return_text": True}).json()
    assert [r["index"] for r in ranked] == list(np.argsort(-logits, kind="stable"))
    assert [r["score"] for r in ranked] == pytest.approx(sorted(1 / (1 + np.exp(-logits)), reverse=True), abs=1e-5)
    assert all(r["text"] == TEXTS[r["index"]] for r in ranked)
    raw = post(url, "/rerank", {"model": "rank", "query": "what film ?", "texts": TEXTS, "raw_scores": True}).json()
    assert sorted(r["score"] for r in raw) == pytest.approx(sorted(logits), abs=1e-5)
    tok, mlm = load_masked_lm(dirs["mlm"])
    expected = fill_mask(mlm, tok, "the [MASK] was good .", top_k=3)[0]["guesses"]
    guesses = post(url, "/fill-mask", {"inputs": "the [MASK] was good .", "top_k": 3}).json()[0]
    assert [g["id"] for g in guesses] == [g["id"] for g in expected]
    assert [g["score"] for g in guesses] == pytest.approx([g["probability"] for g in expected], abs=1e-5)
    assert guesses[0]["sequence"] == tok.decode(tok.encode(f"the {guesses[0]['token']} was good .").ids)


def test_qa_answers_with_character_offsets_as_squad_decoding_does(url, dirs):
    import torch

    from bertkit.data.squad import SquadExample, make_features
    from bertkit.eval.squad import decode_answers
    from bertkit.heads import BertForQuestionAnswering
    from bertkit.tokenizer import Tokenizer

    context = " ".join(["the film was in paris and the team of john was very good"] * 12) + " ."
    question = "where was the film ?"
    got = post(url, "/qa", {"model": "qa", "question": question, "context": context}).json()
    assert got["answer"] == context[got["start"]:got["end"]] and got["answer"] and 0 < got["score"] <= 1
    tok, model = Tokenizer.from_pretrained(dirs["qa"]), BertForQuestionAnswering.from_pretrained(dirs["qa"]).eval()
    examples = [SquadExample("q", "", context, question, [])]
    features = make_features(examples, tok, max_seq_len=128, doc_stride=64)
    assert len(features) > 1  # the context spans several windows
    starts, ends = [], []
    with torch.no_grad():
        for ids, types in zip(features.input_ids, features.token_type_ids):
            out = model(torch.tensor([ids]), token_type_ids=torch.tensor([types]))
            starts.append(out.start_logits[0].numpy())
            ends.append(out.end_logits[0].numpy())
    assert got["answer"] == decode_answers(examples, features, starts, ends)["q"]


def test_ner_entities_carry_character_offsets(url):
    from bertkit.serve.spans import entities

    text = "John  was in Paris river ."
    got = post(url, "/ner", {"model": "tags", "inputs": text}).json()  # every word B-PER: one entity a word
    assert [(e["word"], e["start"], e["end"], e["entity"]) for e in got] == [
        (w, text.index(w), text.index(w) + len(w), "PER") for w in ("John", "was", "in", "Paris", "river", ".")]
    assert all(0.9 < e["score"] <= 1 for e in got)
    many = post(url, "/ner", {"model": "ner", "inputs": [text, "mary"]}).json()
    assert len(many) == 2 and all(e["word"] == text[e["start"]:e["end"]] for e in many[0])

    spec = SimpleNamespace(labels=NER)
    encoding = SimpleNamespace(word_ids=[None, 0, 1, 1, 2, 3, None],  # [CLS] new york is nice [SEP]: "york" in 2 pieces
                               offsets=[(0, 0), (0, 3), (4, 6), (6, 8), (9, 11), (12, 16), (0, 0)])

    tags = [0, 3, 4, 0, 0, 2, 0]  # O B-LOC I-LOC (second piece ignored) O I-PER O
    logits = np.eye(5)[tags] * 10
    found = entities(spec, "new york is nice", encoding, logits)
    assert [(e["entity"], e["word"]) for e in found] == [("LOC", "new york"), ("PER", "nice")]


def test_tokenize_info_health_and_metrics(url):
    got = post(url, "/tokenize", {"inputs": ["John was in Paris."], "add_special_tokens": True}).json()[0]
    assert [t["text"] for t in got] == ["[CLS]", "John", "was", "in", "Paris", ".", "[SEP]"]
    assert [(t["start"], t["stop"]) for t in got[1:-1]] == [(0, 4), (5, 8), (9, 11), (12, 17), (17, 18)]
    assert got[0]["special"] and not got[1]["special"]
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    info = httpx.get(url + "/info").json()
    kinds = {m["name"]: (m["kind"], m["labels"]) for m in info["models"]}
    assert kinds == {"mlm": ("masked-lm", []), "cls": ("classifier", ["negative", "positive"]),
                     "rank": ("classifier", ["score"]), "ner": ("token-classifier", NER),
                     "tags": ("token-classifier", NER), "qa": ("question-answering", [])}
    assert "/rerank" in info["models"][2]["routes"] and "/rerank" not in info["models"][1]["routes"]
    text = httpx.get(url + "/metrics").text
    assert re.search(r'bertkit_serve_requests_total\{route="/tokenize",status="200"\} [1-9]', text)
    assert re.search(r"bertkit_serve_batch_size_count [1-9]", text)
    for name in ("queue_depth", "requests_in_flight", "batch_tokens_sum", "batch_padded_tokens_sum",
                 "request_seconds_bucket", "batch_seconds_count"):
        assert f"bertkit_serve_{name}" in text


NER = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
LONG = " ".join(["film"] * 200)  # 202 tokens, over the tiny model's 128 positions
BAD = [
    ("/embed", b'{"inputs": "a', 422, "malformed JSON"),
    ("/embed", b"", 422, "empty body"),
    ("/embed", b"\xff\xfe", 422, "not UTF-8"),
    ("/embed", [1, 2], 422, "expected a JSON object, got a JSON array"),
    ("/embed", {"inputs": 3}, 422, "inputs must be a string or a list of strings, not a JSON number"),
    ("/embed", {"inputs": ["a", None]}, 422, "inputs[1] must be a string, not a JSON null"),
    ("/embed", {"inputs": ""}, 422, "inputs is empty"),
    ("/embed", {"inputs": []}, 422, "inputs is an empty list"),
    ("/embed", {"text": "a"}, 422, 'missing field "inputs"'),
    ("/embed", {"inputs": "a", "normalize": "yes"}, 422, "normalize must be true or false"),
    ("/embed", {"inputs": LONG}, 422, "longer than the model's 128 tokens"),
    ("/embed", {"inputs": "a" * 2_001}, 422, "2,001 characters; the limit is 2,000"),
    ("/embed", {"inputs": ["a"] * 65}, 413, "65 inputs; the limit is 64"),
    ("/embed", {"inputs": ["a"] * 30_000}, 413, "over the limit of 100,000"),
    ("/v1/embeddings", {"input": "a", "encoding_format": "hex"}, 422, "encoding_format must be one of float, base64"),
    ("/v1/embeddings", {"input": [[1, 2]]}, 422, "check_embedding_ctx_length=False"),
    ("/embed", {"inputs": "a", "model": "nosuch"}, 404, "no model 'nosuch'"),
    ("/qa", {"question": "a"}, 404, "model 'mlm' (masked-lm) does not serve /qa"),
    ("/qa", {"model": "qa", "question": "a", "context": 5}, 422, "context must be a string"),
    ("/fill-mask", {"inputs": "no mask"}, 422, "inputs has no [MASK] token"),
    ("/fill-mask", {"inputs": "a [MASK]", "top_k": 0}, 422, "top_k must be an integer"),
    ("/predict", {"model": "cls", "inputs": ["a", "b", "c"]}, 422, "inputs must be a text, [text] or [text, pair]"),
    ("/rerank", {"model": "rank", "texts": ["a"]}, 422, "query must be a string"),
]


@pytest.mark.parametrize("route, body, status, message", BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_requests_get_their_status_and_one_line_error(url, route, body, status, message):
    got = post(url, route, body)
    assert got.status_code == status, got.text
    error = got.json()
    if route == "/v1/embeddings":  # OpenAI's shape there
        assert set(error) == {"error"} and set(error["error"]) == {"message", "type", "param", "code"}, error
        error = {"error": error["error"]["message"], "error_type": error["error"]["code"]}
    assert set(error) == {"error", "error_type"} and "\n" not in error["error"] and message in error["error"], error
    assert httpx.get(url + "/health").status_code == 200


def test_truncate_unknown_routes_and_a_chunked_body_over_the_limit(url):
    cut = post(url, "/embed", {"inputs": LONG, "truncate": True})
    assert cut.status_code == 200 and len(cut.json()[0]) == 32
    for method, route, status in (("GET", "/nowhere", 404), ("POST", "/v2/embeddings", 404), ("GET", "/embed", 405)):
        got = httpx.request(method, url + route)
        assert got.status_code == status and got.json()["error_type"] in ("not_found", "method_not_allowed")

    def chunks():  # no Content-Length: the limit is enforced while reading
        for _ in range(300):
            yield b" " * 1000

    got = httpx.post(url + "/embed", content=chunks(), timeout=30, headers={"Content-Type": "application/json"})
    assert got.status_code == 413 and "over the limit of 100,000 bytes" in got.json()["error"]


def test_a_slow_body_times_out_and_the_server_stays_up(dirs):
    with serving(_service(dirs, ("mlm",), Limits(body_timeout=0.5))) as base:
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 40\r\n\r\n{")
            started = time.monotonic()
            s.settimeout(5)
            reply = s.recv(4096).decode()
            assert 0.4 < time.monotonic() - started < 4
            while "}" not in reply:  # the body may come in a second packet
                reply += s.recv(4096).decode()
        assert reply.startswith("HTTP/1.1 408") and '"error_type":"timeout"' in reply
        assert post(base, "/embed", {"inputs": "a film"}).status_code == 200


def test_api_key(dirs):
    with serving(_service(dirs, ("mlm",)), api_key="s3cret") as base:
        assert post(base, "/embed", {"inputs": "a"}).status_code == 401
        wrong = post(base, "/embed", {"inputs": "a"}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json() == {"error": "wrong API key", "error_type": "unauthorized"}
        assert httpx.get(base + "/nowhere").status_code == 401  # unknown routes too
        assert httpx.get(base + "/metrics").status_code == 401
        assert httpx.get(base + "/health").status_code == 200
        ok = post(base, "/embed", {"inputs": "a"}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200


def test_dynamic_batching_503_while_loading_and_429_when_the_queue_is_full(dirs):
    gate, started, loading, sizes = threading.Event(), threading.Event(), threading.Event(), []
    service = _service(dirs, ("mlm",), Limits(max_queue=8), gated(gate, sizes, started, loading))
    with serving(service, wait_ready=False) as base, ThreadPoolExecutor(16) as pool:
        assert post(base, "/embed", {"inputs": "a"}).status_code == 503
        assert httpx.get(base + "/health").status_code == 503
        loading.set()
        while service.phase != "ready":
            time.sleep(0.01)
        first = pool.submit(post, base, "/embed", {"inputs": "a film"})
        assert started.wait(10)  # the worker holds the first batch
        rest = [pool.submit(post, base, "/embed", {"inputs": TEXTS[i % 4]}) for i in range(7)]
        while service.batcher.waiting < 7:
            time.sleep(0.01)
        full = post(base, "/embed", {"inputs": "a"})  # 8 in flight: the ninth is refused
        assert full.status_code == 429 and full.json()["error_type"] == "overloaded"
        gate.set()
        assert [f.result().status_code for f in [first, *rest]] == [200] * 8
    assert sizes == [1, 7]  # the seven that waited ran as one batch


def _attempt(base, body):
    try:
        return post(base, "/embed", body).status_code
    except httpx.ConnectError:  # the socket was closed before this request connected: never accepted
        return "refused"


def _raw_request(sock: socket.socket, body: dict) -> None:
    data = json.dumps(body).encode()
    sock.sendall(b"POST /embed HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))


def _raw_status(sock: socket.socket) -> int | str:
    """The status code of the answer on `sock`, or how the connection ended without one."""
    try:
        head = sock.recv(64)
    except ConnectionResetError:
        return "reset"
    return int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else f"closed: {head!r}"


def test_sigterm_answers_every_request_sent_before_it_and_exits_0(dirs):
    proc, base = start_server(dirs["mlm"], "--max-batch-size", "1")  # one row per forward pass: requests queue up
    address = ("127.0.0.1", int(base.rsplit(":", 1)[1]))
    clients = [socket.create_connection(address, timeout=30) for _ in range(9)]
    try:
        *sent, slow = clients
        for sock in sent:  # in the kernel's buffers before the signal, whether the server read them or not
            _raw_request(sock, {"inputs": [TEXTS[3]] * 24})
        deadline = time.monotonic() + 30
        while re.search(r"bertkit_serve_requests_in_flight [1-9]", httpx.get(base + "/metrics").text) is None:
            assert time.monotonic() < deadline, "no request was ever in flight"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        late = _attempt(base, {"inputs": "a"})  # sent after the signal, while the drain runs
        time.sleep(0.5)  # `slow` connected before the signal and sends its request only now
        _raw_request(slow, {"inputs": "a"})
        answers = [_raw_status(sock) for sock in clients]
        assert proc.wait(60) == 0
        # No connection is reset: those accepted before the signal get 200, the others 503.
        assert set(answers[:8]) <= {200, 503} and 200 in answers[:8] and answers[8] == 503, answers
        assert late in (200, 503, "refused"), late
        accepted, answered = map(int, re.search(r"stopped: (\d+) requests accepted, (\d+) answered",
                                                proc.stderr.read()).groups())
        assert accepted == answered  # every request the server read got its answer
        with pytest.raises(httpx.ConnectError):
            httpx.get(base + "/health")
    finally:
        for sock in clients:
            sock.close()
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()


def test_model_entries_and_a_model_that_fails_to_load(dirs, tmp_path):
    import shutil

    from bertkit.serve.app import create_app
    from bertkit.serve.models import parse_entry
    from bertkit.serve.server import listen, make_server

    assert parse_entry(f"sst2={dirs['cls']}") == ("sst2", str(dirs["cls"]))
    assert parse_entry(str(dirs["cls"])) == ("cls", str(dirs["cls"]))
    broken = tmp_path / "broken"
    shutil.copytree(dirs["mlm"], broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))  # weights for 2
    service = _service({"broken": broken}, ("broken",))
    server = make_server(create_app(service), service)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listen("127.0.0.1", 0)]}, daemon=True)
    thread.start()
    thread.join(60)  # the failed load stops the server by itself
    assert not thread.is_alive() and service.phase == "failed" and "missing keys" in service.error
