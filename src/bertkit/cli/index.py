"""`bertkit index --model DIR --input DOCS --out INDEX`: embed a corpus into a search index folder.

DOCS is BEIR's corpus.jsonl (`_id`, `title`, `text`), any JSONL with `id` and `text`, or a text
file with one passage per line (ids: line numbers). Vectors are unit-length, pooled as the model
directory says (sentence-transformers files; mean pooling otherwise), stored as fp32, fp16 or
int8 without pickles; from `--ann-threshold` vectors on, a usearch HNSW graph is built too. A
passage longer than the limit is cut, or with --long-inputs windows read in overlapping chunks:
their vectors pooled into one, or with --best-chunk kept one per chunk (a passage then scores as its
best chunk in `bertkit search`).
Indexing streams (one chunk of passages in memory at a time) and shows a progress bar. The
folder is built in `.INDEX.partial` beside INDEX and renamed when complete; a stopped (or killed)
build leaves it there, and --resume continues it from its last chunk.

`bertkit index --vectors DIR --out INDEX` builds the same index from the shards `bertkit embed
--shards --out DIR` wrote, without embedding again (`bertkit.search.from_shards`); --graph-size cuts a
large one into several HNSW graphs, built one at a time and searched together.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from bertkit.cli import note_long
from bertkit.cli.args import (
    add_long_inputs,
    add_overwrite,
    add_precision,
    check_long_inputs,
    check_resumable_dir,
    device_name,
    encoder_dir,
    existing_dir,
    existing_file,
    int_at_least,
    int_between,
    long_policy,
    nonnegative_int,
    positive_int,
)
from bertkit.cli.embed import add_vector_options
from bertkit.errors import UserError
from bertkit.search.quantized import QUANTIZATIONS, check_quantize
from bertkit.search.vectors import DTYPES

EMBEDDING_FLAGS = ("model", "input", "pooling", "max_length", "long_inputs", "window_stride", "best_chunk",
                   "dimensions", "prompt_name", "prompt")


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("--model", type=encoder_dir, default=None,
      help="bi-encoder model directory (any head is skipped), or a static model (`distill --to static`)")
    a("--input", type=existing_file, default=None,
      help="passages: corpus.jsonl (_id/id, title, text) or .txt/.gz/.xz with one passage per line")
    a("--vectors", type=existing_dir, default=None, metavar="DIR",
      help="instead of --model and --input: the shards of `bertkit embed --shards`, indexed without embedding again "
           "(the passages' texts read from the corpus they were made from)")
    a("--graph-size", type=nonnegative_int, default=0,
      help="with --vectors: vectors per HNSW graph; a larger index is cut into several graphs, built one at a time "
           "and searched together (0: one graph)")
    a("--out", required=True, help="index folder to write")
    add_overwrite(parser, "index")
    a("--dtype", choices=tuple(DTYPES), default="fp32",
      help="how the vectors are stored (with --quantize: the copy kept on disk that rescores the candidates)")
    a("--graph-dtype", choices=tuple(DTYPES), default=None,
      help="the HNSW graph's own copy of the vectors (default: --dtype); int8 holds it in a quarter of fp32's bytes, "
           "so a memory-mapped search keeps less resident, and its candidates are still rescored from the --dtype "
           "vectors")
    a("--quantize", choices=QUANTIZATIONS, default=None,
      help="also keep calibrated int8 or binary (sign bit) rows, the only ones a search holds in memory: scanned "
           "exactly (no HNSW graph) for k x --oversample candidates, rescored from the --dtype vectors")
    a("--ann-threshold", type=nonnegative_int, default=50_000,
      help="build an HNSW graph (usearch) from this many passages on; below it search is exact (0: always)")
    a("--pooling", choices=("cls", "mean", "max"), default=None,
      help="override the model directory's pooling (default: its 1_Pooling config, else mean)")
    a("--max-length", type=int_between(3, 65535), default=None,
      help="longest passage (or chunk) in tokens; longer is cut or read in windows (default: the model's "
           "max_seq_length, else 256)")
    add_long_inputs(parser, chunks=True)
    a("--batch-size", type=positive_int, default=64, help="passages per forward pass")
    a("--chunk", type=int_at_least(64), default=4096, help="passages embedded per step (memory per step)")
    a("--connectivity", type=int_between(2, 256), default=16, help="HNSW edges per node")
    a("--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps")
    a("--no-progress", action="store_true", help="no progress bar")
    a("--resume", action="store_true",
      help="continue the stopped build of --out from its last chunk (the same flags; another setting is refused)")
    add_precision(parser)
    add_vector_options(parser, role="document")


def check(args) -> None:
    from bertkit.search.index import describe_partial

    _check_source(args)
    if args.model is not None:
        from bertkit.prompts import resolve_prompt

        args.prompt = resolve_prompt(args.model, args.prompt_name, args.prompt, role="document")
    check_long_inputs(args)
    check_quantize(args.quantize, args.best_chunk, args.graph_size)
    if args.quantize and args.graph_dtype:
        raise UserError("--graph-dtype applies to an HNSW graph; --quantize builds none")
    check_resumable_dir(args, ("meta.json",), "index", describe_partial)


def _check_source(args) -> None:
    """--vectors DIR, or --model and --input (and the flags of embedding)."""
    if args.vectors is None:
        missing = [f"--{f}" for f in ("model", "input") if getattr(args, f) is None]
        if missing:
            raise UserError(f"the following arguments are required: {', '.join(missing)} (or --vectors DIR)")
        if args.graph_size:
            raise UserError("--graph-size applies to --vectors")
        return
    given = [f for f in EMBEDDING_FLAGS if getattr(args, f) not in (None, False)]
    if given:
        raise UserError(f"--{given[0].replace('_', '-')} applies to embedding; --vectors indexes the shards as they "
                        "were embedded")
    if args.resume:
        raise UserError("--resume continues an embedding build; --vectors builds from the shards anew")
    from bertkit.corpus.shards import read_manifest
    from bertkit.search.from_shards import check_shards

    check_shards(read_manifest(args.vectors), Path(args.vectors))


def run(args) -> int:
    import torch

    from bertkit.devices import resolve_device, resolve_precision
    from bertkit.io import partial_dir, publish_dir
    from bertkit.search.encoder import Encoder
    from bertkit.search.index import IndexSettings, build_index

    if args.vectors:
        return _run_vectors(args)
    device = resolve_device(args.device)
    encoder = Encoder.load(args.model, args.pooling, args.max_length, args.batch_size, device,
                           precision=resolve_precision(args.precision, device), policy=long_policy(args),
                           dimensions=args.dimensions, prompt=args.prompt)
    settings = IndexSettings(dtype=args.dtype, ann_threshold=args.ann_threshold, chunk=args.chunk,
                             connectivity=args.connectivity, threads=torch.get_num_threads(), chunks=args.best_chunk,
                             quantize=args.quantize, graph_dtype=args.graph_dtype)
    work = partial_dir(args.out)
    if not args.resume:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    try:
        meta = build_index(args.input, work, encoder, settings, progress=not args.no_progress, resume=args.resume)
    except UserError:
        if not args.resume:  # a mistake in the input: the folder this run began goes (a stopped build's stays)
            shutil.rmtree(work, ignore_errors=True)
        raise
    publish_dir(work, Path(args.out))
    how = "one vector per chunk" if args.best_chunk else "each passage's chunk vectors averaged by their token counts"
    note_long("index", meta["long_inputs_report"], how)
    kind = _search_kind(meta, "exact search" if meta["ann"] is None else "an HNSW graph (usearch)")
    chunks = f" in {meta['vectors']:,} chunks" if args.best_chunk else ""
    print(f"indexed {meta['count']:,} passages{chunks} ({meta['dim']}-wide {meta['dtype']} vectors, {meta['pooling']} "
          f"pooling, {kind}) into {args.out} in {meta['build_seconds']:.1f} s")
    return 0


def _run_vectors(args) -> int:
    import torch

    from bertkit.io import atomic_dir
    from bertkit.search.from_shards import build_from_shards
    from bertkit.search.index import IndexSettings

    settings = IndexSettings(dtype=args.dtype, ann_threshold=args.ann_threshold, connectivity=args.connectivity,
                             threads=torch.get_num_threads(), graph_size=args.graph_size, quantize=args.quantize,
                             graph_dtype=args.graph_dtype)
    with atomic_dir(args.out) as tmp:
        meta = build_from_shards(args.vectors, tmp, settings, progress=not args.no_progress)
    graphs = len(meta["ann"]["files"]) if meta["ann"] else 0
    kind = _search_kind(meta, "exact search" if not graphs else f"{graphs} HNSW graph{'s' * (graphs > 1)} (usearch)")
    print(f"indexed {meta['count']:,} passages from {meta['shards']:,} shards ({meta['dim']}-wide {meta['dtype']} "
          f"vectors, {meta['pooling']} pooling, {kind}) into {args.out} in {meta['build_seconds']:.1f} s")
    return 0


def _search_kind(meta: dict, otherwise: str) -> str:
    """How the index is searched, for the last line."""
    q = meta.get("quantization")
    if not q:
        return otherwise
    return f"{q['kind']} rows of {q['bytes_per_vector']} bytes scanned, rescored from the {meta['dtype']} vectors"
