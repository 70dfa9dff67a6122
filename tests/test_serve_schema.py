"""The published schema: /openapi.json generated from the route table, /docs served offline, and
schemathesis against a real server (bounded: a few examples per route, a time cap): no 5xx, every
status documented, every answer matching its schema."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bertkit.serve.requests import Limits
from serve_helpers import make_model_dirs, serving

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


@pytest.fixture(scope="module")
def url(tiny_dir, tmp_path_factory):
    from bertkit.search.encoder import Encoder
    from bertkit.search.index import build_index
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe
    from bertkit.serve.search import attach_index

    root = tmp_path_factory.mktemp("serve-schema")
    dirs = make_model_dirs(tiny_dir, root)
    specs = [describe(n, dirs[n]) for n in ("enc", "mlm", "cls", "rank", "tags", "qa")]
    (root / "docs.txt").write_text("a good film\nthe plot\nan actor\n", encoding="utf-8")
    (root / "index").mkdir()
    build_index(root / "docs.txt", root / "index", Encoder.load(dirs["enc"]), progress=False)
    attach_index(specs, ("enc", str(root / "index")))  # POST /search
    limits = Limits(max_body_bytes=100_000, max_inputs=16, max_input_chars=2_000, body_timeout=5)
    with serving(Service(specs, limits, log=lambda line: None)) as base:
        yield base


def _without_model(schema: dict) -> dict:
    if "anyOf" in schema:
        return {"anyOf": [_without_model(s) for s in schema["anyOf"]]}
    return {**schema, "properties": {k: v for k, v in schema.get("properties", {}).items() if k != "model"}}


def test_openapi_is_generated_from_the_route_table(url):
    from bertkit.serve.api import ROUTES
    from bertkit.serve.models import EMBED_ROUTES, KIND_ROUTES, TEXT_ROUTES

    document = httpx.get(url + "/openapi.json").json()
    assert document["openapi"] == "3.0.3"
    served = {*TEXT_ROUTES, *EMBED_ROUTES, *(r for routes in KIND_ROUTES.values() for r in routes), "/rerank",
              "/search"}
    assert served == set(ROUTES)  # every route a model can serve is in the table, and nothing else
    names = {"/fill-mask": ["mlm"], "/predict": ["cls", "rank"], "/rerank": ["rank"], "/ner": ["tags"],
             "/search": ["enc"], "/embed": ["enc", "mlm", "cls", "rank", "tags", "qa"]}
    for path, route in ROUTES.items():
        post = document["paths"][path]["post"]
        request = post["requestBody"]["content"]["application/json"]["schema"]
        if path in names:  # the "model" field names the served models that take the route
            assert request["properties"]["model"] == {"type": "string", "enum": names[path]}
        assert _without_model(request) == _without_model(route.request)
        assert post["responses"]["200"]["content"]["application/json"]["schema"] == route.response
        error = post["responses"]["422"]["content"]["application/json"]["schema"]["properties"]["error"]
        assert (error["type"] == "object") == (path in ("/v1/embeddings", "/embeddings"))  # OpenAI's shape there
    assert {"/health", "/info", "/metrics"} <= set(document["paths"])


def test_docs_page_and_its_assets_come_from_the_installed_package(url):
    pytest.importorskip("swagger_ui_bundle")
    page = httpx.get(url + "/docs")
    assert page.status_code == 200 and "/openapi.json" in page.text and "http" not in page.text.replace(
        "http-equiv", "")  # no address outside this server: it works offline
    for name, kind in (("swagger-ui-bundle.js", "text/javascript"), ("swagger-ui.css", "text/css")):
        asset = httpx.get(f"{url}/docs/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind) and len(asset.content) > 1000
    assert httpx.get(url + "/docs/../../etc/passwd").status_code == 404


def test_schemathesis_finds_no_5xx_and_no_schema_violation(url, tmp_path):
    """Bounded: 6 examples per operation, 10 s a request, the whole run capped at 240 s."""
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    if st is None:
        pytest.skip("schemathesis is not installed")
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"}
    done = subprocess.run([st, "run", url + "/openapi.json", "--checks", CHECKS, "--max-examples", "6",
                           "--seed", "38", "--workers", "1", "--request-timeout", "10", "--no-color",
                           "--report", "ndjson", "--report-dir", str(tmp_path), "--suppress-health-check", "all"],
                          capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    events = [json.loads(line) for path in tmp_path.glob("*.ndjson") for line in path.read_text().splitlines()]
    assert events, "schemathesis wrote no report"
    assert httpx.get(url + "/health").status_code == 200
