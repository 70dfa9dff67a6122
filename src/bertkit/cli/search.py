"""`bertkit search --index INDEX "query" [-k 10] [--rerank DIR]`: the best passages for a query.

The query is embedded with the index's own model and pooling, scored against the stored vectors
(exactly, or through the index's HNSW graph and then exactly on its candidates), and the top k
printed with their ids and cosine scores; an index built with --best-chunk scores each passage by its
best chunk. `--rerank DIR` rescores the top `--candidates` hits with a one-label cross-encoder and
prints its top k instead. A query longer than the index's token limit meets the index's
long-input policy, with a note on stderr. Queries are encoded in fp32 unless --precision says otherwise;
one line on stderr says so when the index's vectors were made at another precision. An index built
with --quantize scans its quantised rows for k x --oversample candidates and rescores them with the
fp32 query against its stored vectors (--no-rescore: the quantised scores as they are).
"""

from __future__ import annotations

import argparse
import json
import sys

from bertkit.cli.args import (
    add_precision,
    device_name,
    encoder_dir,
    existing_dir,
    int_at_least,
    int_between,
    model_dir,
    positive_int,
)
from bertkit.cli.embed import add_vector_options
from bertkit.errors import UserError
from bertkit.search.quantized import OVERSAMPLE


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("query", nargs="+", help="query text(s); each is searched on its own")
    a("--index", required=True, type=existing_dir, help="index folder from `bertkit index`")
    a("-k", "--top-k", dest="k", type=int_between(1, 10_000), default=10, help="results per query")
    a("--rerank", type=model_dir, default=None, help="one-label cross-encoder directory to rerank the hits with")
    a("--candidates", type=int_between(1, 10_000), default=None,
      help="with --rerank: first-stage hits the cross-encoder reads (100 when not given)")
    a("--exact", action="store_true",
      help="score every stored vector, even where the index has a graph or quantised rows")
    a("--oversample", type=int_at_least(1), default=None,
      help=f"with an index built with --quantize: first-stage candidates per hit, rescored ({OVERSAMPLE} when not "
           "given)")
    a("--rescore", action=argparse.BooleanOptionalAction, default=None,
      help="with an index built with --quantize: rescore the candidates with the fp32 query against the stored "
           "vectors (on when not given); --no-rescore returns the quantised rows' own top k")
    a("--in-memory", action="store_true",
      help="read the vectors and graph(s) into memory (default: memory-mapped, read from disk as queries need them, "
           "so an index larger than memory is searched too)")
    a("--model", type=encoder_dir, default=None, help="the index's model, if it moved (default: the path it recorded)")
    a("--batch-size", type=positive_int, default=32, help="pairs per cross-encoder forward pass")
    a("--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps")
    a("--json", action="store_true", help="print JSON instead of text")
    add_precision(parser, " (the query vectors; the index records the precision of its own)")
    add_vector_options(parser, role="query", dimensions=False)  # the width is the index's


def check(args) -> None:
    if args.rescore is False and args.oversample is not None:
        raise UserError("--oversample sets the candidates rescored; not with --no-rescore")
    if args.rerank is None and args.candidates is not None:
        raise UserError("--candidates applies to --rerank only")
    if args.rerank is not None:
        args.candidates = args.candidates or max(100, args.k)
        if args.candidates < args.k:
            raise UserError(f"--candidates {args.candidates} is fewer than -k {args.k}")


def _check_quantized(args, meta: dict) -> None:
    """--oversample and --rescore need an index with quantised rows."""
    given = [f for f, v in (("--oversample", args.oversample), ("--rescore", args.rescore)) if v is not None]
    if given and not meta.get("quantization"):
        raise UserError(f"{given[0].replace('--rescore', '--rescore/--no-rescore')} applies to an index built with "
                        "--quantize", args.index)


def _print(query: str, hits: list[dict]) -> None:
    print(f"query: {query}")
    for h in hits:
        text = h["text"] if len(h["text"]) <= 160 else h["text"][:160] + "…"
        score = f"{h['score']:.4f}" + (f"  rerank {h['rerank_score']:.4f}" if "rerank_score" in h else "")
        print(f"{h['rank']:>4}. [{h['id']}] {score}  {text}")


def run(args) -> int:
    from pathlib import Path

    from bertkit.cli import note_long
    from bertkit.devices import inference_precision, resolve_device
    from bertkit.long_inputs import Policy
    from bertkit.search.encoder import Encoder
    from bertkit.search.index import SearchIndex, precision_mismatch, read_meta

    meta = read_meta(args.index)
    _check_quantized(args, meta)
    model = args.model or meta["model"]
    if not Path(model).is_dir():
        raise UserError(f"the index's model {model} is gone; pass --model DIR", Path(args.index) / "meta.json")
    device = resolve_device(args.device)
    backend, int8 = meta.get("backend", "torch"), meta.get("int8", False)
    precision = inference_precision(args.precision, device, int8, backend)
    from bertkit.prompts import resolve_prompt

    prompt = resolve_prompt(model, args.prompt_name, args.prompt, role="query")
    encoder = Encoder.load(model, meta["pooling"], meta["max_length"], device=device, backend=backend, int8=int8,
                           precision=precision, policy=Policy.from_settings(meta), dimensions=meta.get("dimensions"),
                           prompt=prompt)
    line = precision_mismatch(meta, precision)
    if line:
        print(f"bertkit search: note: {line}", file=sys.stderr, flush=True)
    reranker = None
    if args.rerank:
        from bertkit.search.rerank import Reranker

        reranker = Reranker(args.rerank, args.batch_size, device=device)
    index = SearchIndex(args.index, in_memory=args.in_memory)
    first = args.candidates if reranker else args.k
    report: dict = {}
    positions, scores = index.search(encoder.encode(args.query, report=report), first, exact=args.exact,
                                     oversample=args.oversample or OVERSAMPLE, rescore=args.rescore is not False)
    note_long("search", report, "each query's chunk vectors averaged")
    results = []
    for i, query in enumerate(args.query):
        hits = index.hits(positions[i], scores[i])
        if reranker:
            hits = reranker.rerank(query, hits)[:args.k]
        results.append({"query": query, "hits": hits})
    index.close()
    if args.json:
        json.dump(results if len(results) > 1 else results[0], sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        for r in results:
            _print(r["query"], r["hits"])
    return 0
