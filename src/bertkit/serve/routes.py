"""Each POST route as two halves: `prepare` (validate and tokenize) and `finish` (outputs -> JSON).

`prepare(spec, body, limits)` runs on the tokenizing thread and returns a `Work`: the
operation to run, one (ids, type ids) row per sequence, `finish`, which turns the rows'
outputs (see `serve.backend`) into the response, and the response's extra headers. Shapes follow
TEI where TEI has the route (/embed, /embed_all, /similarity, /rerank, /predict, /tokenize,
/decode); /v1/embeddings is OpenAI's (`serve.openai`), /ner, /qa and /fill-mask follow
transformers' pipelines (`serve.spans`), and POST / dispatches as TEI does (`serve.compat`).

An input longer than the model's tokens meets its route's policy, `long_inputs`: the one place
that decides (the long-inputs issue's windows and chunks plug in there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from bertkit.serve.models import ModelSpec
from bertkit.serve.requests import (
    ApiError,
    Limits,
    check_count,
    flag,
    integer,
    text,
    texts,
)

TRUNCATED_HEADER = "X-Truncated-Inputs"  # the indices of inputs that were cut to the model's tokens


@dataclasses.dataclass
class Work:
    op: str | None  # None: nothing for the model to run (/tokenize, /decode)
    rows: list[tuple[list[int], list[int]]]
    finish: Callable[[list[np.ndarray]], object]
    headers: dict[str, str] = dataclasses.field(default_factory=dict)  # extra response headers


def long_inputs(route: str, body: dict) -> str:
    """What `route` does with an input longer than the model's tokens: "refuse" (422 naming the
    field that allows cutting) or "truncate" (cut to the model's tokens; the indices in the
    X-Truncated-Inputs header). OpenAI's routes have no such field, so they always truncate rather
    than fail a whole batch for one long text; TEI's routes refuse unless "truncate": true.

    This is the seam for the long-inputs issue: a policy such as "windows" (embed each window,
    pool the windows) returns its name here and `encode` gives its rows."""
    if route in ("/v1/embeddings", "/embeddings"):
        return "truncate"
    return "truncate" if flag(body, "truncate", False) else "refuse"


def encode(spec: ModelSpec, inputs: list[str], policy: str, field: str, pairs: list[str] | None = None):
    """(encodings, the indices of inputs cut to the model's tokens) under a `long_inputs` policy."""
    encodings = spec.tokenizer.encode_batch(inputs, pairs=pairs, max_length=spec.max_length, truncation=True)
    cut = [i for i, e in enumerate(encodings) if e.truncated]
    if cut and policy == "refuse":
        where = field if len(encodings) == 1 else f"{field}[{cut[0]}]"
        raise ApiError(422, f"{where} is longer than the model's {spec.max_length} tokens; "
                            'send "truncate": true to cut it', param=field)
    return encodings, cut


def cut_header(cut: list[int]) -> dict[str, str]:
    return {TRUNCATED_HEADER: ",".join(map(str, cut))} if cut else {}


def _rows(encodings) -> list[tuple[list[int], list[int]]]:
    return [(e.ids, e.type_ids) for e in encodings]


def _unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-12)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def dimensions(spec: ModelSpec, body: dict, field: str = "dimensions") -> int | None:
    """A Matryoshka width: at most the model's, None when not asked."""
    if body.get(field) is None:
        return None
    return integer(body, field, spec.config.hidden_size, 1, spec.config.hidden_size)


def shape_vector(v: np.ndarray, size: int | None, normalize: bool) -> np.ndarray:
    """The first `size` components (Matryoshka), then unit length when `normalize`."""
    v = v[:size] if size else v
    return _unit(v) if normalize else v


def _no_prompts(body: dict) -> None:
    if body.get("prompt_name") is not None:
        raise ApiError(422, "prompt_name: this server has no prompts configured", param="prompt_name")


def embed(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI: {"inputs": str | [str], "normalize": true, "truncate": false, "dimensions"} -> [[float]]."""
    inputs, _ = texts(body, "inputs", limits)
    normalize, size = flag(body, "normalize", True), dimensions(spec, body)
    _no_prompts(body)
    encodings, cut = encode(spec, inputs, long_inputs("/embed", body), "inputs")
    return Work("embed", _rows(encodings), lambda out: [shape_vector(v, size, normalize).tolist() for v in out],
                cut_header(cut))


def embed_all(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI: {"inputs": str | [str], "truncate": false} -> for each text, every token's last-layer
    vector, [CLS] and [SEP] included: [[[float]]]."""
    inputs, _ = texts(body, "inputs", limits)
    _no_prompts(body)
    encodings, cut = encode(spec, inputs, long_inputs("/embed_all", body), "inputs")
    return Work("hidden", _rows(encodings), lambda out: [v.tolist() for v in out], cut_header(cut))


def similarity(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI and HF's sentence-similarity: {"inputs": {"source_sentence", "sentences"}, "truncate"}
    -> [float], the cosine of each sentence's vector to the source sentence's."""
    pair = body.get("inputs")
    if not isinstance(pair, dict):
        raise ApiError(422, 'inputs must be an object {"source_sentence": text, "sentences": [text]}', param="inputs")
    source = text(pair.get("source_sentence"), "inputs.source_sentence", limits)
    others, _ = texts(pair, "sentences", limits)
    encodings, cut = encode(spec, [source, *others], long_inputs("/similarity", body), "inputs")

    def finish(out):
        first = _unit(out[0])
        return [float(_unit(v) @ first) for v in out[1:]]

    return Work("embed", _rows(encodings), finish, cut_header(cut))


def decode(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI: {"ids": [int] | [[int]], "skip_special_tokens": true} -> [str], one text per id list."""
    ids = body.get("ids")
    batch = ids if isinstance(ids, list) and ids and all(isinstance(i, list) for i in ids) else [ids]
    check_count(len(batch), "ids", limits)
    vocab = len(spec.tokenizer)
    for row in batch:
        if not isinstance(row, list) or not row or not all(type(i) is int and 0 <= i < vocab for i in row):
            raise ApiError(422, f"ids must be a list of token ids in [0, {vocab}) or a list of such lists", param="ids")
        if len(row) > limits.max_input_chars:
            raise ApiError(413, f"ids has {len(row):,} ids; the limit is {limits.max_input_chars:,}", param="ids")
    skip = flag(body, "skip_special_tokens", True)
    result = [spec.tokenizer.decode(row, skip_special_tokens=skip) for row in batch]
    return Work(None, [], lambda out: result)


def rerank(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI: {"query", "texts", "return_text", "raw_scores", "truncate"} -> [{"index", "score"}],
    best first; the score is the sigmoid of the cross-encoder's logit unless raw_scores."""
    query = text(body.get("query"), "query", limits)
    passages, _ = texts(body, "texts", limits)
    return_text, raw = flag(body, "return_text", False), flag(body, "raw_scores", False)
    encodings, cut = encode(spec, [query] * len(passages), long_inputs("/rerank", body), "texts", pairs=passages)

    def finish(out):
        logits = np.array([float(o[0]) for o in out])
        scores = logits if raw else 1.0 / (1.0 + np.exp(-logits))
        order = sorted(range(len(out)), key=lambda i: (-logits[i], i))
        return [{"index": i, "score": float(scores[i]), **({"text": passages[i]} if return_text else {})}
                for i in order]

    return Work("classify", _rows(encodings), finish, cut_header(cut))


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
    raw, policy = flag(body, "raw_scores", False), long_inputs("/predict", body)
    encodings, cut = [None] * len(inputs), []
    for group in (False, True):  # singles, then pairs: the tokenizer takes one kind per call
        chosen = [i for i, parts in enumerate(inputs) if (len(parts) == 2) == group]
        if chosen:
            firsts = [inputs[i][0] for i in chosen]
            pairs = [inputs[i][1] for i in chosen] if group else None
            done, group_cut = encode(spec, firsts, policy, "inputs", pairs)
            for i, e in zip(chosen, done):
                encodings[i] = e
            cut += [chosen[j] for j in group_cut]

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

    return Work("classify", _rows(encodings), finish, cut_header(sorted(cut)))


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
