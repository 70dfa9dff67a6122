"""The server's Prometheus metrics (GET /metrics), in a registry of its own per app.

Request counts and latency by route and status; the queue (rows waiting for a batch, requests
accepted and not yet answered); requests whose client went away before their answer, and the rows
that spared the model; and each forward pass's rows, real and padded tokens and time, so the
batcher's effect (rows per batch, padding) can be read off a running server.
"""

from __future__ import annotations

from collections.abc import Callable

from bertkit.serve.batcher import BatchStats

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self, waiting: Callable[[], int], in_flight: Callable[[], int]):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        r = self.registry = CollectorRegistry()
        self.requests = Counter("bertkit_serve_requests", "requests answered, by route and status code",
                                ["route", "status"], registry=r)
        self.latency = Histogram("bertkit_serve_request_seconds", "time from request to response, by route",
                                 ["route"], buckets=_SECONDS, registry=r)
        Gauge("bertkit_serve_queue_depth", "rows (sequences) waiting for a batch",
              registry=r).set_function(waiting)
        Gauge("bertkit_serve_requests_in_flight", "requests accepted and not yet answered",
              registry=r).set_function(in_flight)
        self.cancelled_requests = Counter("bertkit_serve_cancelled_requests",
                                          "requests whose client disconnected before they were answered", registry=r)
        self.cancelled_rows = Counter("bertkit_serve_cancelled_rows",
                                      "rows of those requests dropped before they reached the model", registry=r)
        self.batch_size = Histogram("bertkit_serve_batch_size", "rows per forward pass",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), registry=r)
        self.batch_tokens = Histogram("bertkit_serve_batch_tokens", "real tokens per forward pass",
                                      buckets=tuple(2 ** k for k in range(4, 18)), registry=r)
        self.batch_padded = Histogram("bertkit_serve_batch_padded_tokens",
                                      "tokens computed per forward pass, padding included",
                                      buckets=tuple(2 ** k for k in range(4, 18)), registry=r)
        self.batch_seconds = Histogram("bertkit_serve_batch_seconds", "time of one forward pass",
                                       buckets=_SECONDS, registry=r)

    def batch(self, stats: BatchStats) -> None:
        """Called by the batcher's thread after each forward pass (prometheus_client is thread-safe)."""
        self.batch_size.observe(stats.rows)
        self.batch_tokens.observe(stats.tokens)
        self.batch_padded.observe(stats.padded_tokens)
        self.batch_seconds.observe(stats.seconds)

    def cancelled(self, rows: int) -> None:
        """A request whose client went away; `rows` of its rows never ran."""
        self.cancelled_requests.inc()
        self.cancelled_rows.inc(rows)

    def request(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def text(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
