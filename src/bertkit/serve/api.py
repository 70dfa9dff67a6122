"""The served API as one table: each POST route's path, `prepare` function, summary, and request
and answer schemas (`serve.schemas`). The app routes from it, POST / dispatches within it, and
/openapi.json (OpenAPI 3.0) is generated from it, so a route's shape is declared once.

/docs is Swagger UI on that document, its script and styles served from the `swagger-ui-bundle`
package installed beside the server (no CDN: it works offline).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bertkit.serve import compat, openai, routes, schemas, search, spans
from bertkit.serve.requests import ERROR_TYPES


@dataclass(frozen=True)
class Route:
    path: str
    prepare: Callable  # (spec, body, limits) -> routes.Work
    summary: str
    request: dict  # JSON Schema of the body
    response: dict  # JSON Schema of a 200 answer
    openai_errors: bool = False  # errors in OpenAI's shape


ROUTES = {r.path: r for r in (
    Route("/", compat.root, "TEI's root: dispatched by the model's kind and the body (HF InferenceClient's tasks)",
          schemas.ROOT, schemas.ROOT_OUT),
    Route("/embed", routes.embed, "Sentence vectors (TEI)", schemas.EMBED, schemas.EMBED_OUT),
    Route("/embed_all", routes.embed_all, "Every token's last-layer vector (TEI)", schemas.EMBED_ALL,
          schemas.EMBED_ALL_OUT),
    Route("/similarity", routes.similarity, "Cosine of sentences to a source sentence (TEI, HF)",
          schemas.SIMILARITY, schemas.SIMILARITY_OUT),
    Route("/v1/embeddings", openai.embeddings, "Embeddings (OpenAI)", schemas.OPENAI, schemas.OPENAI_OUT, True),
    Route("/embeddings", openai.embeddings, "Embeddings (OpenAI; TEI's second path)", schemas.OPENAI,
          schemas.OPENAI_OUT, True),
    Route("/rerank", routes.rerank, "Rank texts against a query with a cross-encoder (TEI)", schemas.RERANK,
          schemas.RERANK_OUT),
    Route("/predict", routes.predict, "Sequence classification (TEI)", schemas.PREDICT, schemas.PREDICT_OUT),
    Route("/tokenize", routes.tokenize, "Tokens with character offsets (TEI)", schemas.TOKENIZE,
          schemas.TOKENIZE_OUT),
    Route("/decode", routes.decode, "Token ids back to text (TEI)", schemas.DECODE, schemas.DECODE_OUT),
    Route("/ner", spans.ner, "Named entities with character offsets", schemas.NER, schemas.NER_OUT),
    Route("/qa", spans.qa, "Extractive question answering", schemas.QA, schemas.QA_OUT),
    Route("/fill-mask", spans.fill_mask, "Guesses for each [MASK]", schemas.FILL_MASK, schemas.FILL_MASK_OUT),
    Route("/search", search.search, "The passages of the served index nearest each query (bertkit search)",
          schemas.SEARCH, schemas.SEARCH_OUT),
)}
GETS = {"/health": ("200 once the models are loaded, 503 before and while draining", schemas.HEALTH_OUT),
        "/info": ("Served models, their kinds, routes and limits", schemas.INFO_OUT)}
REFUSALS = (401, 404, 408, 413, 415, 422, 429, 503)  # what a POST can answer besides 200
DOCS_FILES = {"swagger-ui.css": "text/css", "swagger-ui-bundle.js": "text/javascript"}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _models(schema: dict, names: list[str]) -> dict:
    """`schema` with its "model" field naming the served models that take the route."""
    if "anyOf" in schema:
        return {**schema, "anyOf": [_models(s, names) for s in schema["anyOf"]]}
    if "model" not in schema.get("properties", {}):
        return schema
    return {**schema, "properties": {**schema["properties"], "model": {"type": "string", "enum": names}}}


def openapi(version: str, specs: list | None = None) -> dict:
    """The OpenAPI 3.0 document of every route (`ROUTES`, the GET routes), errors included; with
    the served `specs`, each route's "model" field lists the models that serve it."""
    paths: dict = {}
    for path, route in ROUTES.items():
        names = [s.name for s in specs or () if path in s.routes]
        if specs and not names:
            continue  # no served model has this route
        error = schemas.OPENAI_ERROR if route.openai_errors else schemas.ERROR
        responses = {"200": _json(route.response, "the answer")}
        responses.update({str(s): _json(error, ERROR_TYPES[s]) for s in REFUSALS})
        paths[path] = {"post": {"summary": route.summary, "operationId": "post" + path.replace("/", "_"),
                                "requestBody": {"required": True, "content": {"application/json": {
                                    "schema": _models(route.request, names) if names else route.request}}},
                                "responses": responses}}
    for path, (summary, schema) in GETS.items():
        paths.setdefault(path, {})["get"] = {"summary": summary, "operationId": "get" + path.replace("/", "_"),
                                             "responses": {"200": _json(schema, "ok"),
                                                           "401": _json(schemas.ERROR, "unauthorized"),
                                                           "503": _json(schemas.ERROR, "unhealthy")}}
    paths["/metrics"] = {"get": {"summary": "Prometheus metrics", "operationId": "get_metrics", "responses": {
        "200": {"description": "Prometheus text", "content": {"text/plain": {"schema": {"type": "string"}}}},
        "401": _json(schemas.ERROR, "unauthorized")}}}
    return {"openapi": "3.0.3", "info": {"title": "bertkit serve", "version": version,
                                         "description": "TEI- and OpenAI-shaped BERT inference (docs/serving.md)"},
            "paths": paths}


def docs_assets() -> Path | None:
    """The folder of Swagger UI's files (the swagger-ui-bundle package), None when not installed."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    return Path(swagger_ui_path)


DOCS_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>bertkit serve: API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css"></head>
<body><div id="ui"></div><script src="/docs/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({url: "/openapi.json", dom_id: "#ui", deepLinking: true});</script></body></html>
"""
