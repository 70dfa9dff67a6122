"""Reading requests: the bounded body, the JSON, the fields; every refusal an `ApiError`.

Each error answers `{"error": one line, "error_type": ...}` with the status code
text-embeddings-inference (TEI) uses: 413 for too large a body or too many inputs, 422 for
malformed JSON, a wrong type, an empty or too long input, 429 when the queue is full, 503 while
loading or draining; 401 for a missing or wrong API key, 404 for an unknown route or model, 405
(with `Allow`) for a method the route does not take, 415 for a body that is not declared
`application/json`, and 408 for a body that does not arrive within the body timeout. On OpenAI's
routes the same error is OpenAI's `{"error": {"message", "type", "param", "code"}}` (`openai_body`).

The body is read chunk by chunk and refused as soon as it passes the byte limit (a
Content-Length over the limit is refused before anything is read), so a huge body never sits in
memory; reading the whole body has a deadline, so a very slow sender cannot hold a request open.
JSON nested deeper than MAX_DEPTH is refused before it is parsed (Python's parser recurses), and a
text that is not valid Unicode (a lone surrogate escape) is refused before it reaches the tokenizer.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

ERROR_TYPES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
               408: "timeout", 413: "payload_too_large", 415: "unsupported_media_type", 422: "validation",
               429: "overloaded", 500: "backend", 503: "unhealthy"}
# OpenAI's error "type" for a status; the TEI error_type goes into its "code"
OPENAI_TYPES = {401: "authentication_error", 404: "invalid_request_error", 429: "rate_limit_error",
                500: "server_error", 503: "server_error"}
MAX_DEPTH = 32  # nesting of JSON arrays and objects; no route reads deeper than 3


class ApiError(Exception):
    """A refusal: status code, one-line message, its error_type, and the field at fault (`param`)."""

    def __init__(self, status: int, message: str, error_type: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message = status, " ".join(message.split())
        self.error_type = error_type or ERROR_TYPES.get(status, "error")
        self.param = param

    def body(self) -> dict:
        return {"error": self.message, "error_type": self.error_type}

    def openai_body(self) -> dict:
        return {"error": {"message": self.message, "type": OPENAI_TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.error_type}}


@dataclass(frozen=True)
class Limits:
    max_batch_tokens: int = 16384  # padded tokens per forward pass (longest row x rows)
    max_batch_size: int = 64  # rows per forward pass
    max_queue: int = 512  # requests accepted and not yet answered
    max_inputs: int = 256  # texts (or passages) in one request
    max_body_bytes: int = 2_000_000
    max_input_chars: int = 20_000  # characters in one text, checked before tokenizing
    body_timeout: float = 10.0  # seconds to receive a whole body
    header_timeout: float = 10.0  # seconds from connecting (or the first byte after an answer) to a whole request head
    openai_encoding: str | None = None  # a .tiktoken file (cl100k_base): token-id inputs on OpenAI's routes
    long_inputs: str = "refuse"  # a long input when the body does not say: refuse, truncate or windows
    max_windows: int = 2048  # rows one request's texts may make when read in windows


def check_content_type(value: str | None) -> None:
    """415 unless the body is declared JSON (`application/json`, any parameters)."""
    kind = (value or "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        raise ApiError(415, f"Content-Type must be application/json, not {(value or 'none')[:60]!r}")


async def read_body(receive_stream, content_length: str | None, limits: Limits) -> bytes:
    """The request body, at most `max_body_bytes`, within `body_timeout` seconds."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise ApiError(400, f"Content-Length is not a number: {content_length[:40]!r}") from None
        if declared > limits.max_body_bytes:
            raise ApiError(413, f"body of {declared:,} bytes is over the limit of {limits.max_body_bytes:,}")

    async def collect() -> bytes:
        chunks, size = [], 0
        async for chunk in receive_stream:
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise ApiError(413, f"body is over the limit of {limits.max_body_bytes:,} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(collect(), limits.body_timeout)
    except TimeoutError:
        raise ApiError(408, f"body not received within {limits.body_timeout:g} s") from None


def _depth(body: bytes) -> int:
    """How deep the body's arrays and objects nest, brackets inside strings not counted."""
    import re

    import numpy as np

    brackets = re.sub(rb'"(?:[^"\\]|\\.)*"', b"", body).translate(None, bytes(set(range(256)) - set(b"[]{}")))
    steps = np.frombuffer(brackets, dtype=np.uint8)
    depth = np.cumsum(np.where((steps == ord("[")) | (steps == ord("{")), 1, -1))
    return int(depth.max()) if depth.size else 0


def parse_json(body: bytes) -> dict:
    """A JSON object from the body; 422 for anything else (nested deeper than MAX_DEPTH too)."""
    if not body.strip():
        raise ApiError(422, "empty body: expected a JSON object")
    # a body with few brackets cannot nest deeply: only the rare one is scanned
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _depth(body) > MAX_DEPTH:
        raise ApiError(422, f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(422, "body is not UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise ApiError(422, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:  # unreachable after the depth check; kept so no body can make a 500
        raise ApiError(422, f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if not isinstance(value, dict):
        raise ApiError(422, f"expected a JSON object, got a JSON {_kind(value)}")
    return value


def _kind(value) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def text(value, field: str, limits: Limits) -> str:
    """One non-empty string of at most `max_input_chars` characters."""
    if not isinstance(value, str):
        raise ApiError(422, f"{field} must be a string, not a JSON {_kind(value)}", param=field)
    if not value.strip():
        raise ApiError(422, f"{field} is empty", param=field)
    if len(value) > limits.max_input_chars:
        raise ApiError(422, f"{field} has {len(value):,} characters; the limit is {limits.max_input_chars:,}",
                       param=field)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(422, f"{field} is not valid Unicode (a lone surrogate)", param=field) from None
    return value


def texts(body: dict, field: str, limits: Limits) -> tuple[list[str], bool]:
    """(the texts, whether one string was given) from a string-or-list field."""
    if field not in body:
        raise ApiError(422, f'missing field "{field}"', param=field)
    value = body[field]
    if isinstance(value, str):
        return [text(value, field, limits)], True
    if not isinstance(value, list):
        raise ApiError(422, f"{field} must be a string or a list of strings, not a JSON {_kind(value)}",
                       param=field)
    if not value:
        raise ApiError(422, f"{field} is an empty list", param=field)
    check_count(len(value), field, limits)
    return [text(v, f"{field}[{i}]", limits) for i, v in enumerate(value)], False


def check_count(n: int, field: str, limits: Limits) -> None:
    if n > limits.max_inputs:
        raise ApiError(413, f"{field} has {n:,} inputs; the limit is {limits.max_inputs:,} per request", param=field)


def flag(body: dict, field: str, default: bool) -> bool:
    value = body.get(field, default)
    if not isinstance(value, bool):
        raise ApiError(422, f"{field} must be true or false, not a JSON {_kind(value)}", param=field)
    return value


def integer(body: dict, field: str, default: int, low: int, high: int) -> int:
    value = body.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ApiError(422, f"{field} must be an integer in [{low}, {high}]", param=field)
    return value


def choice(body: dict, field: str, default: str, options: tuple[str, ...]) -> str:
    value = body.get(field, default)
    if value not in options:
        raise ApiError(422, f"{field} must be one of {', '.join(options)}", param=field)
    return value
