"""`bertkit index --model DIR --input DOCS --out INDEX`: embed a corpus into a search index folder.

DOCS is BEIR's corpus.jsonl (`_id`, `title`, `text`), any JSONL with `id` and `text`, or a text
file with one passage per line (ids: line numbers). Vectors are unit-length, pooled as the model
directory says (sentence-transformers files; mean pooling otherwise), stored as fp32, fp16 or
int8 without pickles; from `--ann-threshold` passages on, a usearch HNSW graph is built too.
Indexing streams (one chunk of passages in memory at a time) and shows a progress bar. The
folder is built under a temporary name, so a stopped build leaves nothing behind.
"""

from __future__ import annotations

from bertkit.cli import note_cut
from bertkit.cli.args import (
    add_overwrite,
    add_precision,
    check_output_dir,
    device_name,
    existing_file,
    int_at_least,
    int_between,
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
      help="longest passage in tokens; longer is cut (default: the model's max_seq_length, else 256)")
    a("--batch-size", type=positive_int, default=64, help="passages per forward pass")
    a("--chunk", type=int_at_least(64), default=4096, help="passages embedded per step (memory per step)")
    a("--connectivity", type=int_between(2, 256), default=16, help="HNSW edges per node")
    a("--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps")
    a("--no-progress", action="store_true", help="no progress bar")
    add_precision(parser)


def check(args) -> None:
    check_output_dir(args.out, "--out", args.overwrite, ("meta.json",), "index")


def run(args) -> int:
    import torch

    from bertkit.devices import resolve_device, resolve_precision
    from bertkit.io import atomic_dir
    from bertkit.search.encoder import Encoder
    from bertkit.search.index import IndexSettings, build_index

    device = resolve_device(args.device)
    encoder = Encoder.load(args.model, args.pooling, args.max_length, args.batch_size, device,
                           precision=resolve_precision(args.precision, device))
    settings = IndexSettings(dtype=args.dtype, ann_threshold=args.ann_threshold, chunk=args.chunk,
                             connectivity=args.connectivity, threads=torch.get_num_threads())
    with atomic_dir(args.out) as tmp:
        meta = build_index(args.input, tmp, encoder, settings, progress=not args.no_progress)
    note_cut("index", meta["cut"], meta["count"], meta["max_length"])
    kind = "exact search" if meta["ann"] is None else "an HNSW graph (usearch)"
    print(f"indexed {meta['count']:,} passages ({meta['dim']}-wide {meta['dtype']} vectors, {meta['pooling']} "
          f"pooling, {kind}) into {args.out} in {meta['build_seconds']:.1f} s")
    return 0
