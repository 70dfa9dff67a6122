"""The ASGI app of `bertkit serve` (Starlette): routes, the request path, loading and draining.

The routes come from one table, `serve.api.ROUTES` (which also gives /openapi.json and /docs).
A POST request goes: phase check (503 while loading or draining) -> Content-Type (415 unless
JSON) -> bounded body -> JSON (depth-checked) ->
model choice -> the queue bound (429) -> validate and tokenize on the tokenizing thread ->
rows to the batcher (the model runs on its worker thread) -> the response built on the
tokenizing thread again. The event loop only moves bytes, so a long tokenization or forward
pass never stalls other clients. From the body's end, a task watches for the client going away;
if it goes before its answer, its rows still queued are dropped (`Batcher.cancel`, counted in
/metrics) and the request ends as 499.

The model a request uses is its "model" field, a name given as `--model NAME=DIR`; without one,
the first model given. With a single model the field is not checked, as TEI ignores it (OpenAI
clients always send one). A model that lacks the route's head answers 404.

Models load on a thread after the port is open: until then every model route answers 503 and
GET /health too. `drain()` (SIGTERM) makes every new request answer 503 while those already
accepted finish; the app's shutdown then lets the batcher finish its queue.

With an API key set, every request but GET /health needs `Authorization: Bearer KEY`
(compared in constant time). Refusals on OpenAI's routes take OpenAI's error shape, the others
TEI's (`error_response`); a 405 names the methods the route takes in `Allow`.
"""

from __future__ import annotations

import asyncio
import hmac
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict

from bertkit.errors import UserError
from bertkit.serve.api import ROUTES
from bertkit.serve.backend import BACKENDS, pad_batch
from bertkit.serve.batcher import Batcher, Job, Row
from bertkit.serve.metrics import Metrics
from bertkit.serve.models import ModelSpec
from bertkit.serve.requests import ApiError, Limits, check_content_type, parse_json, read_body
from bertkit.serve.routes import Work

OPENAI_PATHS = frozenset(path for path, route in ROUTES.items() if route.openai_errors)


class Service:
    """The served models, their backends, the batcher and the phase (loading, ready, draining, failed).

    `backend` is a `serve.backend.BACKENDS` name, or a factory `(spec, device) -> Backend`.
    """

    def __init__(self, specs: list[ModelSpec], limits: Limits | None = None, backend="torch", device: str = "cpu",
                 log=None):
        self.specs = {s.name: s for s in specs}
        self.default = specs[0].name
        self.limits, self.device = limits or Limits(), device
        limits = self.limits
        self.factory = BACKENDS[backend] if isinstance(backend, str) else backend
        self.backend_name = backend if isinstance(backend, str) else getattr(backend, "__name__", "custom")
        self.backends: dict = {}
        self.phase, self.error = "loading", None
        self.in_flight = 0
        self.accepted = self.answered = 0  # HTTP requests, counted by `Gate`
        self.log = log or (lambda line: print(f"bertkit serve: {line}", file=sys.stderr, flush=True))
        self.on_failure = lambda: None  # set by whoever runs the server: stop it
        self.metrics = Metrics(lambda: self.batcher.waiting, lambda: self.in_flight)
        self.batcher = Batcher(self._run, limits.max_batch_tokens, limits.max_batch_size, self.metrics.batch)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="bertkit-serve-tokenize")

    def load(self) -> None:
        """Load every model's backend (on a thread), then serve; a failure stops the server."""
        try:
            for name, spec in self.specs.items():
                self.backends[name] = self.factory(spec, self.device)
        except Exception as e:  # a UserError (bad weights) or anything else: one line, then stop
            self.error = str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
            self.phase = "failed"
            self.on_failure()
            return
        if self.phase == "loading":
            self.phase = "ready"
            self.log(f"ready: {', '.join(f'{s.name} ({s.kind})' for s in self.specs.values())}")

    def drain(self) -> None:
        if self.phase in ("loading", "ready"):
            self.phase = "draining"

    def _run(self, key: tuple[str, str], rows: list[Row]) -> list:
        name, op = key
        batch = pad_batch([(r.ids, r.type_ids) for r in rows], self.specs[name].tokenizer.pad_id)
        return self.backends[name].run(op, batch)

    def pick(self, body: dict, route: str) -> ModelSpec:
        name = body.get("model")
        if len(self.specs) == 1 or name is None:
            spec = self.specs[self.default]
        elif not isinstance(name, str) or name not in self.specs:
            raise ApiError(404, f"no model {str(name)[:64]!r}; served: {', '.join(self.specs)}")
        else:
            spec = self.specs[name]
        if route not in spec.routes:
            raise ApiError(404, f"model {spec.name!r} ({spec.kind}) does not serve {route}; it serves "
                                f"{', '.join(spec.routes)}")
        return spec

    async def answer(self, route: str, request) -> tuple[object, dict]:
        """(JSON body, extra headers) of one POST request's 200 answer; an ApiError otherwise."""
        if self.phase != "ready":
            raise ApiError(503, "draining: the server is shutting down" if self.phase != "loading"
                           else "loading the models; retry shortly")
        check_content_type(request.headers.get("content-type"))
        body = parse_json(await read_body(request.stream(), request.headers.get("content-length"), self.limits))
        spec = self.pick(body, route)
        if self.in_flight >= self.limits.max_queue:
            raise ApiError(429, f"queue full ({self.limits.max_queue} requests waiting); retry later")
        loop = asyncio.get_running_loop()
        self.in_flight += 1
        gone = asyncio.ensure_future(_disconnected(request.receive))
        try:
            work = await loop.run_in_executor(self.pool, ROUTES[route].prepare, spec, body, self.limits)
            outputs = [] if work.op is None else await self._outputs(spec, work, gone)
            return await loop.run_in_executor(self.pool, work.finish, outputs), work.headers
        finally:
            gone.cancel()
            self.in_flight -= 1

    async def _outputs(self, spec: ModelSpec, work: Work, gone: asyncio.Future) -> list:
        """The outputs of `work`'s rows from the batcher; if the client goes away first (`gone`),
        its rows still waiting are dropped and ClientDisconnect is raised."""
        from starlette.requests import ClientDisconnect

        job = Job(asyncio.get_running_loop(), len(work.rows))
        queued = not gone.done()
        if queued:
            self.batcher.submit([Row((spec.name, work.op), ids, types, job, i)
                                 for i, (ids, types) in enumerate(work.rows)])
            await asyncio.wait({job.future, gone}, return_when=asyncio.FIRST_COMPLETED)
        if job.future.done():
            return job.future.result()
        job.future.cancel()
        self.metrics.cancelled(self.batcher.cancel(job) if queued else len(work.rows))
        raise ClientDisconnect

    def info(self) -> dict:
        from bertkit import __version__

        return {"version": __version__, "phase": self.phase, "backend": self.backend_name,
                "default_model": self.default, "models": [s.info() for s in self.specs.values()],
                "limits": asdict(self.limits)}


async def _disconnected(receive) -> None:
    """Returns once the client has gone away. The body is read by then, so the server's next
    message is http.disconnect (uvicorn sends it when the connection closes)."""
    while (await receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # any other message: look again, without spinning


def error_response(e: ApiError, path: str = "", headers: dict | None = None):
    """The one JSON error of a refusal: OpenAI's shape on OpenAI's routes, TEI's elsewhere."""
    from starlette.responses import JSONResponse

    body = e.openai_body() if path in OPENAI_PATHS else e.body()
    return JSONResponse(body, status_code=e.status, headers=headers)


class Gate:
    """ASGI middleware: counts requests accepted and answered (the answer's last byte handed to
    the server), so a drain can show none was dropped; with `key`, 401 unless
    `Authorization: Bearer KEY` (GET /health is open)."""

    def __init__(self, app, service: Service, key: str | None):
        self.app, self.service, self.key = app, service, key.encode("utf-8") if key else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.service.accepted += 1

        async def counted(message):
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self.service.answered += 1

        await self._guarded(scope, receive, counted)

    async def _guarded(self, scope, receive, send):
        if self.key is not None and scope["path"] != "/health":
            given = dict(scope["headers"]).get(b"authorization", b"")
            token = given[7:] if given[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(token, self.key):
                what = "wrong API key" if token else "missing API key: send Authorization: Bearer KEY"
                await error_response(ApiError(401, what), scope["path"])(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _post(service: Service, route: str):
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse, Response

    async def endpoint(request):
        start = time.perf_counter()
        try:
            result, headers = await service.answer(route, request)
            response = JSONResponse(result, headers=headers)
        except ApiError as e:
            response = error_response(e, route)
        except UserError as e:
            response = error_response(ApiError(422, str(e)), route)
        except ClientDisconnect:
            response = Response(status_code=499)
        except Exception as e:  # a bug or a backend failure: the server stays up
            service.log(f"error on {route}: {type(e).__name__}: {e}")
            response = error_response(ApiError(500, f"{type(e).__name__}: {e}"), route)
        service.metrics.request(route, response.status_code, time.perf_counter() - start)
        return response

    return endpoint


def _gets(service: Service) -> list:
    """The GET routes: /health, /info, /metrics, /openapi.json and the offline /docs page."""
    from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    from bertkit import __version__
    from bertkit.serve.api import DOCS_FILES, DOCS_PAGE, docs_assets, openapi

    document = openapi(__version__, list(service.specs.values()))

    async def health(request):
        if service.phase != "ready":
            return error_response(ApiError(503, f"{service.phase}"))
        return JSONResponse({"status": "ok"})

    async def info(request):
        return JSONResponse(service.info())

    async def metrics(request):
        data, kind = service.metrics.text()
        return Response(data, media_type=kind)

    async def schema(request):
        return JSONResponse(document)

    async def docs(request):
        name = request.path_params.get("name")
        folder = docs_assets()
        if folder is None:
            return error_response(ApiError(404, "/docs needs the swagger-ui-bundle package (pip install "
                                                "'bertkit[serve]'); the schema is at /openapi.json"))
        if name is None:
            return HTMLResponse(DOCS_PAGE)
        if name not in DOCS_FILES:
            return error_response(ApiError(404, f"no file /docs/{name[:64]}"))
        return FileResponse(folder / name, media_type=DOCS_FILES[name])

    table = {"/health": health, "/info": info, "/metrics": metrics, "/openapi.json": schema, "/docs": docs,
             "/docs/{name}": docs}
    return [Route(path, endpoint, methods=["GET"]) for path, endpoint in table.items()]


def create_app(service: Service, api_key: str | None = None):
    """The Starlette app serving `service`; its lifespan starts the batcher and the loading."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    async def http_error(request, exc):
        e = ApiError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}")
        return error_response(e, request.url.path, exc.headers)

    @asynccontextmanager
    async def lifespan(app):
        service.batcher.start()
        threading.Thread(target=service.load, name="bertkit-serve-load", daemon=True).start()
        yield
        service.drain()
        await asyncio.to_thread(service.batcher.close)
        service.pool.shutdown(wait=True)
        service.log(f"stopped: {service.accepted} requests accepted, {service.answered} answered")

    table = _gets(service) + [Route(path, _post(service, path), methods=["POST"]) for path in ROUTES]
    app = Starlette(routes=table, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    return Gate(app, service, api_key)
