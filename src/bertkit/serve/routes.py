"""Each POST route as two halves: `prepare` (validate and tokenize) and `finish` (outputs -> JSON).

`prepare(spec, body, limits)` runs on the tokenizing thread and returns a `Work`: the
operation to run, one (ids, type ids) row per sequence, and `finish`, which turns the rows'
outputs (see `serve.backend`) into the response. Shapes follow TEI where TEI has the route
(/embed, /rerank, /predict, /tokenize) and OpenAI's for /v1/embeddings; /ner, /qa and
/fill-mask follow transformers' pipelines, with character offsets into the text as sent.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bertkit.serve.models import ModelSpec
from bertkit.serve.requests import (
    ApiError,
    Limits,
    check_count,
    choice,
    flag,
    text,
    texts,
)


@dataclass
class Work:
    op: str | None  # None: nothing for the model to run (/tokenize)
    rows: list[tuple[list[int], list[int]]]
    finish: Callable[[list[np.ndarray]], object]


def _encode(spec: ModelSpec, inputs: list[str], truncate: bool, field: str, pairs: list[str] | None = None):
    encodings = spec.tokenizer.encode_batch(inputs, pairs=pairs, max_length=spec.max_length, truncation=True)
    if not truncate:
        for i, e in enumerate(encodings):
            if e.truncated:
                where = field if len(encodings) == 1 else f"{field}[{i}]"
                raise ApiError(422, f"{where} is longer than the model's {spec.max_length} tokens; "
                                    'send "truncate": true to cut it')
    return encodings


def _rows(encodings) -> list[tuple[list[int], list[int]]]:
    return [(e.ids, e.type_ids) for e in encodings]


def _unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-12)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def embed(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI: {"inputs": str | [str], "normalize": true, "truncate": false} -> [[float]]."""
    inputs, _ = texts(body, "inputs", limits)
    normalize, truncate = flag(body, "normalize", True), flag(body, "truncate", False)
    encodings = _encode(spec, inputs, truncate, "inputs")
    return Work("embed", _rows(encodings),
                lambda out: [(_unit(v) if normalize else v).tolist() for v in out])


def openai_embeddings(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """OpenAI: {"input": str | [str], "model", "encoding_format": "float" | "base64"} -> a list
    object with unit-length vectors and token usage; base64 is the float32 little-endian bytes."""
    inputs, _ = texts(body, "input", limits)
    fmt = choice(body, "encoding_format", "float", ("float", "base64"))
    size = body.get("dimensions")
    if size is not None and size != spec.config.hidden_size:
        raise ApiError(422, f"dimensions: this model gives {spec.config.hidden_size}, not {size!r}")
    encodings = _encode(spec, inputs, False, "input")
    tokens = sum(len(e.ids) for e in encodings)

    def finish(out):
        data = []
        for i, v in enumerate(out):
            v = _unit(v).astype("<f4")
            vector = base64.b64encode(v.tobytes()).decode("ascii") if fmt == "base64" else v.tolist()
            data.append({"object": "embedding", "index": i, "embedding": vector})
        return {"object": "list", "data": data, "model": spec.name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    return Work("embed", _rows(encodings), finish)


def rerank(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI: {"query", "texts", "return_text", "raw_scores", "truncate"} -> [{"index", "score"}],
    best first; the score is the sigmoid of the cross-encoder's logit unless raw_scores."""
    query = text(body.get("query"), "query", limits)
    passages, _ = texts(body, "texts", limits)
    return_text, raw = flag(body, "return_text", False), flag(body, "raw_scores", False)
    encodings = _encode(spec, [query] * len(passages), flag(body, "truncate", False), "texts", pairs=passages)

    def finish(out):
        logits = np.array([float(o[0]) for o in out])
        scores = logits if raw else 1.0 / (1.0 + np.exp(-logits))
        order = sorted(range(len(out)), key=lambda i: (-logits[i], i))
        return [{"index": i, "score": float(scores[i]), **({"text": passages[i]} if return_text else {})}
                for i in order]

    return Work("classify", _rows(encodings), finish)


def _predict_inputs(value, limits: Limits) -> tuple[list[list[str]], bool]:
    """TEI's forms: "text", ["text"], ["text", "pair"], or a list of those (a batch)."""
    def one(v, field):
        if isinstance(v, str):
            return [text(v, field, limits)]
        if isinstance(v, list) and 1 <= len(v) <= 2:
            return [text(t, f"{field}[{i}]", limits) for i, t in enumerate(v)]
        raise ApiError(422, f"{field} must be a text, [text] or [text, pair]")

    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        check_count(len(value), "inputs", limits)
        return [one(v, f"inputs[{i}]") for i, v in enumerate(value)], False
    if value is None:
        raise ApiError(422, 'missing field "inputs"')
    return [one(value, "inputs")], True


def predict(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI: {"inputs", "raw_scores", "truncate"} -> [{"label", "score"}] for each input, most
    likely first (softmax over the labels); a one-output model (regression) gives its raw value."""
    inputs, single = _predict_inputs(body.get("inputs"), limits)
    raw, truncate = flag(body, "raw_scores", False), flag(body, "truncate", False)
    encodings = []
    for group in (False, True):  # singles, then pairs: the tokenizer takes one kind per call
        chosen = [i for i, parts in enumerate(inputs) if (len(parts) == 2) == group]
        if chosen:
            firsts = [inputs[i][0] for i in chosen]
            pairs = [inputs[i][1] for i in chosen] if group else None
            encodings += list(zip(chosen, _encode(spec, firsts, truncate, "inputs", pairs)))
    encodings = [e for _, e in sorted(encodings, key=lambda x: x[0])]

    def finish(out):
        results = []
        for logits in out:
            if spec.regression:
                results.append([{"label": spec.labels[0], "score": float(logits[0])}])
                continue
            scores = logits if raw else _softmax(logits)
            order = np.argsort(-scores, kind="stable")
            results.append([{"label": spec.labels[i], "score": float(scores[i])} for i in order])
        return results[0] if single else results

    return Work("classify", _rows(encodings), finish)


def tokenize(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI: {"inputs", "add_special_tokens": true} -> per text [{"id", "text", "special", "start",
    "stop"}], "text" the characters each token covers (the token itself for a special one)."""
    inputs, _ = texts(body, "inputs", limits)
    specials = flag(body, "add_special_tokens", True)
    encodings = spec.tokenizer.encode_batch(inputs, truncation=False, add_special_tokens=specials)
    result = []
    for source, e in zip(inputs, encodings):
        tokens = []
        for i, (token_id, (a, b)) in enumerate(zip(e.ids, e.offsets)):
            special = e.word_ids[i] is None
            tokens.append({"id": token_id, "text": e.tokens[i] if special else source[a:b], "special": special,
                           "start": None if special else a, "stop": None if special else b})
        result.append(tokens)
    return Work(None, [], lambda out: result)
