"""`bertkit serve`: an HTTP inference service with dynamic batching (TEI- and OpenAI-shaped routes).

`models` (what a directory serves), `backend` (what runs the model), `batcher` (the token-budget
queue), `requests` (bounded bodies, fields, errors), `routes`, `spans`, `openai` and `compat` (each
route's request and response), `schemas` and `api` (the route table, /openapi.json, /docs),
`metrics` (Prometheus), `app` (the Starlette app), `server` (uvicorn, the request-head timeout, signals).
Nothing here is imported by the rest of bertkit, so the web stack loads only for `serve`.
"""
