"""`bertkit serve`: an HTTP inference service with dynamic batching (TEI- and OpenAI-shaped routes).

`models` (what a directory serves), `backend` (what runs the model), `batcher` (the token-budget
queue), `requests` (bounded bodies, fields, errors), `routes` and `spans` (each route's request
and response), `metrics` (Prometheus), `app` (the Starlette app), `server` (uvicorn, signals).
Nothing here is imported by the rest of bertkit, so the web stack loads only for `serve`.
"""
