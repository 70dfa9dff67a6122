"""POST /: one route for every model, dispatched by the model's kind as text-embeddings-inference
does, so `huggingface_hub.InferenceClient(model=URL)` works unchanged for each task the model has.

| body | route |
|---|---|
| `{"inputs": {"source_sentence", "sentences"}}` | /similarity (sentence_similarity) |
| `{"inputs": {"question", "context"}}` | /qa (question_answering) |
| `{"query", "texts"}` | /rerank |
| anything else, encoder | /embed (feature_extraction) |
| anything else, classifier | /predict (text_classification) |
| anything else, token-classifier | /ner (token_classification) |
| anything else, question-answering | /qa |
| anything else, masked-lm | /fill-mask (fill_mask) |

A body with a `"parameters"` object is the Hugging Face Inference API's task shape (what
InferenceClient sends): its parameters are read and the answer takes that API's shape, where it
differs from TEI's: text classification is a list per input (`[[{"label", "score"}]]`, at most
`top_k`, `function_to_apply` softmax, sigmoid or none), and fill-mask gives `{"score", "token"
(the id), "token_str", "sequence"}`, a flat list for one [MASK]. Without it, TEI's shapes.
"""

from __future__ import annotations

import numpy as np

from bertkit.serve import routes, spans
from bertkit.serve.models import ModelSpec
from bertkit.serve.requests import ApiError, Limits, choice, integer
from bertkit.serve.routes import Work

BY_KIND = {"encoder": "/embed", "classifier": "/predict", "token-classifier": "/ner", "question-answering": "/qa",
           "masked-lm": "/fill-mask"}
PREPARE = {"/embed": routes.embed, "/similarity": routes.similarity, "/rerank": routes.rerank,
           "/predict": routes.predict, "/ner": spans.ner, "/qa": spans.qa, "/fill-mask": spans.fill_mask}


def target(spec: ModelSpec, body: dict) -> str:
    """The route POST / runs for this model and body (the module's table)."""
    inputs = body.get("inputs")
    if isinstance(inputs, dict) and "source_sentence" in inputs:
        return "/similarity"
    if isinstance(inputs, dict) and "question" in inputs:
        return "/qa"
    if "query" in body and "texts" in body:
        return "/rerank"
    return BY_KIND[spec.kind]


def root(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    route = target(spec, body)
    if route not in spec.routes:
        raise ApiError(404, f"model {spec.name!r} ({spec.kind}) does not serve {route}, which POST / chose for "
                            f"this body; it serves {', '.join(spec.routes)}")
    parameters = body.get("parameters")
    if parameters is None:
        return PREPARE[route](spec, body, limits)
    if not isinstance(parameters, dict):
        raise ApiError(422, "parameters must be a JSON object", param="parameters")
    if route == "/predict":
        return _classification(spec, body, parameters, limits)
    if route == "/fill-mask":
        return _fill_mask(spec, body, parameters, limits)
    return PREPARE[route](spec, {**parameters, **body}, limits)


def _classification(spec: ModelSpec, body: dict, parameters: dict, limits: Limits) -> Work:
    """HF text classification: a list of {"label", "score"} per input, best first."""
    how = choice(parameters, "function_to_apply", "softmax", ("softmax", "sigmoid", "none"))
    top_k = integer(parameters, "top_k", max(len(spec.labels), 1), 1, max(len(spec.labels), 1))
    work = routes.predict(spec, {**body, "raw_scores": how != "softmax"}, limits)
    single = not (isinstance(body.get("inputs"), list) and body["inputs"]
                  and all(isinstance(v, list) for v in body["inputs"]))
    tei = work.finish

    def finish(out):
        result = tei(out)
        result = [result] if single else result
        if how == "sigmoid":
            result = [[{**p, "score": float(1 / (1 + np.exp(-p["score"])))} for p in one] for one in result]
        return [one[:top_k] for one in result]

    return Work(work.op, work.rows, finish, work.headers)


def _fill_mask(spec: ModelSpec, body: dict, parameters: dict, limits: Limits) -> Work:
    """HF fill-mask: {"score", "token", "token_str", "sequence"}; one [MASK]: a flat list."""
    if parameters.get("targets") is not None:
        raise ApiError(422, "parameters.targets is not supported: every vocabulary token is ranked",
                       param="targets")
    top_k = integer(parameters, "top_k", 5, 1, 100)
    work = spans.fill_mask(spec, {**body, "top_k": top_k}, limits)
    tei = work.finish

    def one_text(masks):
        masks = [[{"score": g["score"], "token": g["id"], "token_str": g["token"], "sequence": g["sequence"]}
                  for g in guesses] for guesses in masks]
        return masks[0] if len(masks) == 1 else masks

    def finish(out):
        result = tei(out)
        return one_text(result) if isinstance(body.get("inputs"), str) else [one_text(r) for r in result]

    return Work(work.op, work.rows, finish, work.headers)
