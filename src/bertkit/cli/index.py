"""`bertkit index --model DIR --input DOCS --out INDEX`: embed a corpus into a search index folder.

DOCS is BEIR's corpus.jsonl (`_id`, `title`, `text`), any JSONL with `id` and `text`, or a text
file with one passage per line (ids: line numbers). Vectors are unit-length, pooled as the model
directory says (sentence-transformers files; mean pooling otherwise), stored as fp32, fp16 or
int8 without pickles; from `--ann-threshold` vectors on, a usearch HNSW graph is built too. A
passage longer than the limit is cut, or with --long-inputs windows read in overlapping chunks:
their vectors pooled into one, or with --best-chunk kept one per chunk (a passage then scores as its
best chunk in `bertkit search`).
Indexing streams (one chunk of passages in memory at a time) and shows a progress bar. The
folder is built under a temporary name, so a stopped build leaves nothing behind.
"""

from __future__ import annotations

from bertkit.cli import note_long
from bertkit.cli.args import (
    add_long_inputs,
    add_overwrite,
    add_precision,
    check_long_inputs,
    check_output_dir,
    device_name,
    existing_file,
    int_at_least,
    int_between,
    long_policy,
    model_dir,
    nonnegative_int,
    positive_int,
)


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("--model", required=True, type=model_dir, help="bi-encoder model directory (any head is skipped)")
    a("--input", required=True, type=existing_file,
      help="passages: corpus.jsonl (_id/id, title, text) or .txt/.gz/.xz with one passage per line")
    a("--out", required=True, help="index folder to write")
    add_overwrite(parser, "index")
    a("--dtype", choices=("fp32", "fp16", "int8"), default="fp32", help="how the vectors are stored")
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
    add_precision(parser)


def check(args) -> None:
    check_long_inputs(args)
    check_output_dir(args.out, "--out", args.overwrite, ("meta.json",), "index")


def run(args) -> int:
    import torch

    from bertkit.devices import resolve_device, resolve_precision
    from bertkit.io import atomic_dir
    from bertkit.search.encoder import Encoder
    from bertkit.search.index import IndexSettings, build_index

    device = resolve_device(args.device)
    encoder = Encoder.load(args.model, args.pooling, args.max_length, args.batch_size, device,
                           precision=resolve_precision(args.precision, device), policy=long_policy(args))
    settings = IndexSettings(dtype=args.dtype, ann_threshold=args.ann_threshold, chunk=args.chunk,
                             connectivity=args.connectivity, threads=torch.get_num_threads(), chunks=args.best_chunk)
    with atomic_dir(args.out) as tmp:
        meta = build_index(args.input, tmp, encoder, settings, progress=not args.no_progress)
    how = "one vector per chunk" if args.best_chunk else "each passage's chunk vectors averaged by their token counts"
    note_long("index", meta["long_inputs_report"], how)
    kind = "exact search" if meta["ann"] is None else "an HNSW graph (usearch)"
    chunks = f" in {meta['vectors']:,} chunks" if args.best_chunk else ""
    print(f"indexed {meta['count']:,} passages{chunks} ({meta['dim']}-wide {meta['dtype']} vectors, {meta['pooling']} "
          f"pooling, {kind}) into {args.out} in {meta['build_seconds']:.1f} s")
    return 0
