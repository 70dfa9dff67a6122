"""Each POST route as two halves: `prepare` (validate and tokenize) and `finish` (outputs -> JSON).

`prepare(spec, body, limits)` runs on the tokenizing thread and returns a `Work`: the
operation to run, one (ids, type ids) row per sequence, `finish`, which turns the rows'
outputs (see `serve.backend`) into the response, and the response's extra headers. Shapes follow
TEI where TEI has the route (/embed, /embed_all, /similarity, /rerank, /predict, /tokenize,
/decode); /v1/embeddings is OpenAI's (`serve.openai`), /ner, /qa and /fill-mask follow
transformers' pipelines (`serve.spans`), and POST / dispatches as TEI does (`serve.compat`).

An input longer than the model's tokens meets its route's policy, `long_inputs`: the one place
that decides. "refuse" is a 422 naming the limit; "truncate" cuts it; "windows" reads it whole in
overlapping windows (`bertkit.long_inputs`), which `encode` turns into several rows and each
route's `finish` combines: chunk vectors pooled by their token counts (/embed, /similarity,
/v1/embeddings), each token from the window where it has the most context (/embed_all, /ner),
the windows' logits averaged or their maximum (/predict, as the model was fine-tuned), the best
window (/rerank), each [MASK] from its most central window (/fill-mask). The headers say what
happened: X-Truncated-Inputs (indices) and X-Truncated-At (characters kept), X-Windowed-Inputs
(index:windows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from bertkit.long_inputs import aggregate
from bertkit.serve.models import ModelSpec
from bertkit.serve.requests import (
    ApiError,
    Limits,
    check_count,
    choice,
    flag,
    integer,
    text,
    texts,
)
from bertkit.serve.windows import Encoded, combine, encode_cut, encode_windows, pooled

OPENAI_ROUTES = ("/v1/embeddings", "/embeddings")
LONG_POLICIES = ("refuse", "truncate", "windows")


@dataclasses.dataclass
class Work:
    op: str | None  # None: nothing for the model to run (/tokenize, /decode)
    rows: list[tuple[list[int], list[int]]]
    finish: Callable[[list[np.ndarray]], object]
    headers: dict[str, str] = dataclasses.field(default_factory=dict)  # extra response headers


def long_inputs(route: str, body: dict, limits: Limits) -> str:
    """What `route` does with an input longer than the model's tokens: "refuse" (422 naming the
    limit and the fields that allow more), "truncate" (cut to the model's tokens; the indices in
    the X-Truncated-Inputs header) or "windows" (read whole; X-Windowed-Inputs). The body's
    "long_inputs" field decides, or TEI's "truncate": true; without either, the server's
    `--long-inputs` (refuse unless the operator chose otherwise). OpenAI's routes have no such
    field, so they never refuse a text: windows (chunk-and-pool), or cut when the server's
    default is truncate; one long document must not fail a batch."""
    asked = body.get("long_inputs")
    if asked is not None:
        asked = choice(body, "long_inputs", "refuse", LONG_POLICIES)
    if flag(body, "truncate", False):
        if asked not in (None, "truncate"):
            raise ApiError(422, f'"truncate": true and "long_inputs": "{asked}" ask for different things',
                           param="long_inputs")
        return "truncate"
    if asked is not None:
        return asked
    if route in OPENAI_ROUTES:
        return "truncate" if limits.long_inputs == "truncate" else "windows"
    return limits.long_inputs


def encode(spec: ModelSpec, body: dict, limits: Limits, route: str, inputs: list[str], field: str,
           pairs: list[str] | None = None) -> Encoded:
    """`inputs` (and their `pairs`) as model rows under the route's `long_inputs` policy: a
    `serve.windows.Encoded` (one row per input, or per window), or a 422 for a refused long input."""
    policy = long_inputs(route, body, limits)
    if policy != "windows":
        return encode_cut(spec, inputs, policy, field, pairs)
    window = spec.max_length - spec.tokenizer.template.single_count  # a single text's; a pair's first text takes some
    stride = None if body.get("window_stride") is None else integer(body, "window_stride", 1, 1, window)
    return encode_windows(spec, inputs, pairs, stride or spec.policy.stride, limits)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def dimensions(spec: ModelSpec, body: dict, field: str = "dimensions") -> int | None:
    """A Matryoshka width: at most the model's, None when not asked."""
    if body.get(field) is None:
        return None
    return integer(body, field, spec.config.hidden_size, 1, spec.config.hidden_size)


def prompted(spec: ModelSpec, body: dict, inputs: list[str], role: str | None = None) -> list[str]:
    """TEI's "prompt_name": the model's prompt of that name (config_sentence_transformers.json)
    before each input, a 422 for a name it lacks; without one, what sentence-transformers would
    put there (`bertkit.prompts`: the default prompt name's, or the role's)."""
    from bertkit.errors import UserError
    from bertkit.prompts import model_prompts, resolve_prompt, with_prompt

    name = body.get("prompt_name")
    if name is not None:
        prompts = model_prompts(spec.path)[0]
        if not isinstance(name, str) or name not in prompts:
            have = ", ".join(repr(p) for p in prompts) or "none"
            raise ApiError(422, f"prompt_name {name!r} is not one of the model's prompts ({have})",
                           param="prompt_name")
    try:
        return with_prompt(resolve_prompt(spec.path, name, role=role), inputs)
    except UserError:
        raise ApiError(422, "this model's Pooling leaves prompt tokens out (include_prompt false), which this "
                            "server does not do", param="prompt_name") from None


def embed(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI: {"inputs": str | [str], "normalize": true, "truncate": false, "dimensions"} -> [[float]];
    a long text read in windows is the chunks' vectors averaged by their token counts."""
    inputs, _ = texts(body, "inputs", limits)
    normalize, size = flag(body, "normalize", True), dimensions(spec, body)
    inputs = prompted(spec, body, inputs)
    encoded = encode(spec, body, limits, "/embed", inputs, "inputs")
    return Work("embed", encoded.rows, lambda out: [v.tolist() for v in pooled(encoded, out, size, normalize)],
                encoded.headers())


def embed_all(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI: {"inputs": str | [str], "truncate": false} -> for each text, every token's last-layer
    vector, [CLS] and [SEP] included: [[[float]]]; in windows, each token's from the window where
    it has the most context (the token vectors late chunking pools)."""
    inputs = prompted(spec, body, texts(body, "inputs", limits)[0])
    encoded = encode(spec, body, limits, "/embed_all", inputs, "inputs")

    def finish(out):
        return [encoded.tokens(i, rows).tolist() for i, rows in enumerate(encoded.group(out))]

    return Work("hidden", encoded.rows, finish, encoded.headers())


def similarity(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """TEI and HF's sentence-similarity: {"inputs": {"source_sentence", "sentences"}, "truncate"}
    -> [float], the cosine of each sentence's vector to the source sentence's."""
    pair = body.get("inputs")
    if not isinstance(pair, dict):
        raise ApiError(422, 'inputs must be an object {"source_sentence": text, "sentences": [text]}', param="inputs")
    source = text(pair.get("source_sentence"), "inputs.source_sentence", limits)
    others, _ = texts(pair, "sentences", limits)
    encoded = encode(spec, body, limits, "/similarity", prompted(spec, body, [source, *others]), "inputs")

    def finish(out):
        first, *rest = pooled(encoded, out, None, True)
        return [float(v @ first) for v in rest]

    return Work("embed", encoded.rows, finish, encoded.headers())


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
    best first; the score is the sigmoid of the cross-encoder's logit unless raw_scores. A long
    text read in windows (each carrying the query) scores as its best window."""
    query = text(body.get("query"), "query", limits)
    passages, _ = texts(body, "texts", limits)
    return_text, raw = flag(body, "return_text", False), flag(body, "raw_scores", False)
    encoded = encode(spec, body, limits, "/rerank", [query] * len(passages), "texts", pairs=passages)

    def finish(out):
        logits = np.array([max(float(o[0]) for o in rows) for rows in encoded.group(out)])
        scores = logits if raw else 1.0 / (1.0 + np.exp(-logits))
        order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
        return [{"index": i, "score": float(scores[i]), **({"text": passages[i]} if return_text else {})}
                for i in order]

    return Work("classify", encoded.rows, finish, encoded.headers())


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
    likely first (softmax over the labels); a one-output model (regression) gives its raw value;
    a multi-label model every label whose sigmoid is at least its threshold (maybe none), with it.
    A long input read in windows: the windows' logits averaged, or their maximum ("aggregate";
    default as the model was fine-tuned)."""
    inputs, single = _predict_inputs(body.get("inputs"), limits)
    raw = flag(body, "raw_scores", False)
    how = choice(body, "aggregate", spec.policy.aggregate, ("mean", "max"))
    groups = []
    for pair in (False, True):  # singles, then pairs: the tokenizer takes one kind per call
        chosen = [i for i, parts in enumerate(inputs) if (len(parts) == 2) == pair]
        if chosen:
            firsts = [inputs[i][0] for i in chosen]
            pairs = [inputs[i][1] for i in chosen] if pair else None
            groups.append((chosen, encode(spec, body, limits, "/predict", firsts, "inputs", pairs)))
    rows, group, headers = combine(groups, len(inputs))

    def finish(out):
        results = []
        for outputs in group(out):
            logits = aggregate(np.stack(outputs), how)
            if spec.regression:
                results.append([{"label": spec.labels[0], "score": float(logits[0])}])
                continue
            if spec.threshold is not None:
                results.append(_label_set(spec, logits, raw))
                continue
            scores = logits if raw else _softmax(logits)
            order = np.argsort(-scores, kind="stable")
            results.append([{"label": spec.labels[i], "score": float(scores[i])} for i in order])
        return results[0] if single else results

    return Work("classify", rows, finish, headers)


def _label_set(spec: ModelSpec, logits: np.ndarray, raw: bool) -> list[dict]:
    """A multi-label prediction: the labels at or above the threshold, most likely first, with
    their sigmoids (their logits with raw_scores)."""
    probs = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    chosen = [i for i in np.argsort(-probs, kind="stable") if probs[i] >= spec.threshold]
    return [{"label": spec.labels[i], "score": float(logits[i] if raw else probs[i])} for i in chosen]


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
