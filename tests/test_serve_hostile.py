"""Hostile input against `bertkit serve` run as a user runs it (a subprocess): each request shape
answered with a 4xx (or its connection closed in time), never a 5xx, and the server unharmed
afterwards: its memory within 10% of what it held before, /health 200, a real request answered."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from serve_helpers import post_json, start_server


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def _raw(port: int, request: bytes, timeout: float = 10) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith((b"}", b"]")):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    return reply.decode(errors="replace")


@pytest.fixture(scope="module")
def server(tiny_dir):
    proc, base = start_server(tiny_dir, "--header-timeout", "1", "--body-timeout", "1")
    try:
        assert post_json(base, "/embed", {"inputs": ["a film"] * 8}).status_code == 200  # warm: model loaded, run once
        yield proc, base, int(base.rsplit(":", 1)[1]), _rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()


def _unharmed(server) -> None:
    proc, base, _, before = server
    assert httpx.get(base + "/health").status_code == 200
    assert post_json(base, "/embed", {"inputs": "a film"}).status_code == 200
    assert _rss_mb(proc.pid) <= 1.10 * before, (before, _rss_mb(proc.pid))


def test_deep_nesting_is_a_422_not_a_recursion_error(server):
    _, base, _, _ = server
    for body in (b'{"inputs": ' + b"[" * 990 + b"]" * 990 + b"}", b'{"inputs": ' + b'{"a":' * 5000 + b"1" + b"}" * 5001,
                 b"[" * 100_000):
        got = post_json(base, "/embed", body)
        assert got.status_code == 422 and "nested deeper than 32" in got.json()["error"], got.text
    _unharmed(server)


def test_partial_request_heads_are_closed_within_the_header_timeout(server):
    _, _, port, _ = server
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(100)]
    start = time.monotonic()
    try:
        for s in sockets:
            s.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: appli")  # never finished
        closed = []
        for s in sockets:
            assert s.recv(1024) == b""  # the server closed it (a timeout here raises)
            closed.append(time.monotonic() - start)
    finally:
        for s in sockets:
            s.close()
    assert max(closed) < 1 + 2, max(closed)  # --header-timeout 1, with slack for a busy machine
    _unharmed(server)


def test_a_slow_body_gets_408(server):
    _, _, port, _ = server
    head = (b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            b'{"inputs": ')
    reply = _raw(port, head)
    assert reply.startswith("HTTP/1.1 408") and '"error_type":"timeout"' in reply, reply
    _unharmed(server)


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_not_declared_json_gets_415(server, kind):
    _, base, _, _ = server
    got = httpx.post(base + "/embed", content=b'{"inputs": "a"}', headers={"Content-Type": kind} if kind else {})
    assert got.status_code == 415 and got.json()["error_type"] == "unsupported_media_type", got.text
    _unharmed(server)


def test_a_method_a_route_does_not_take_gets_405_with_allow(server):
    _, base, _, _ = server
    for method, route, allow in (("TRACE", "/embed", "POST"), ("PUT", "/v1/embeddings", "POST"),
                                 ("DELETE", "/health", "GET, HEAD"), ("GET", "/embed", "POST")):
        got = httpx.request(method, base + route)
        assert got.status_code == 405 and set(got.headers["allow"].split(", ")) == set(allow.split(", ")), got.headers
    _unharmed(server)


@pytest.mark.parametrize("body, status", [
    (b'{"inputs": "\\ud800 lone surrogate"}', 422),
    (b'{"inputs": ["a", ["b"]]}', 422),
    (b'{"inputs": "a", "normalize": null}', 422),
    (b'{"inputs": {"source_sentence": 1}}', 422),
    (b'{"inputs": "a", "dimensions": 1e999}', 422),
    (b'{"inputs": NaN}', 422),
    (b'{"inputs": "a", "parameters": []}', 422),
    (b'{"inputs": "a", "parameters": {"top_k": "x"}}', 422),
])
def test_odd_values_are_4xx(server, body, status):
    _, base, _, _ = server
    route = "/" if b"parameters" in body or b"source_sentence" in body else "/embed"
    got = post_json(base, route, body)
    assert got.status_code == status, got.text
    _unharmed(server)


def test_headers_that_lie_about_the_body(server):
    _, _, port, _ = server
    for length, status in ((b"abc", "400"), (b"99999999999", "413")):
        reply = _raw(port, b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                     + length + b"\r\n\r\n{}")
        assert reply.startswith(f"HTTP/1.1 {status}") or reply.startswith("HTTP/1.1 400"), reply
    _unharmed(server)
