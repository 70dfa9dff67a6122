"""A request whose client goes away while it waits in the queue costs the model nothing.

Through a real server (uvicorn on a loopback port, `serve_helpers.serving`): the worker is held on a
first request, a second client sends its request and closes its connection while the request is
queued; its rows must leave the queue without running, and /metrics must count them.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from bertkit.serve.requests import Limits
from serve_helpers import gated, make_model_dirs, serving


@pytest.fixture(scope="module")
def dirs(tiny_dir, tmp_path_factory):
    return make_model_dirs(tiny_dir, tmp_path_factory.mktemp("serve-cancel"))


def _until(condition, what: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _metric(base: str, name: str) -> float:
    text = httpx.get(base + "/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def _send(port: int, body: dict) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /embed HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return sock


def test_a_client_that_disconnects_while_queued_costs_no_model_rows(dirs):
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe

    gate, started, sizes = threading.Event(), threading.Event(), []
    service = Service([describe("mlm", dirs["mlm"])], Limits(), gated(gate, sizes, started), log=lambda line: None)
    with serving(service) as base, ThreadPoolExecutor(2) as pool:
        try:
            _abandon_one_queued_request(service, base, pool, gate, started, sizes)
        finally:
            gate.set()  # a failed check leaves no batch held for the server's shutdown


def _abandon_one_queued_request(service, base, pool, gate, started, sizes) -> None:
    port = int(base.rsplit(":", 1)[1])
    first = pool.submit(httpx.post, base + "/embed", json={"inputs": "a film"}, timeout=30)
    assert started.wait(10)  # the worker holds the first batch: whatever comes next waits
    gone = _send(port, {"inputs": ["the movie was good .", "a film", "john was in paris river ."]})
    _until(lambda: service.batcher.waiting == 3, "the three rows to be queued")
    gone.close()  # the client leaves while its rows wait
    _until(lambda: service.batcher.waiting == 0, "the abandoned rows to leave the queue")
    assert _metric(base, "bertkit_serve_cancelled_requests_total") == 1
    assert _metric(base, "bertkit_serve_cancelled_rows_total") == 3
    kept = pool.submit(httpx.post, base + "/embed", json={"inputs": "a film"}, timeout=30)
    _until(lambda: service.batcher.waiting == 1, "a later request to be queued")
    gate.set()
    assert first.result().status_code == 200 and kept.result().status_code == 200
    assert sizes == [1, 1]  # the held request, then the later one: the abandoned rows never ran
    assert _metric(base, "bertkit_serve_batch_size_sum") == 2
    assert re.search(r'bertkit_serve_requests_total\{route="/embed",status="499"\} 1\.0',
                     httpx.get(base + "/metrics").text)
