"""The corpus half of `bertkit embed`: its flags, their checks, and the call (`bertkit.corpus`).

`--shards` makes `--out` a folder of shards and `--input` a corpus; an `--input` that names a
corpus (a folder, a pattern, several files) implies it, and says so in one line. Otherwise `--out`
is one .npy array of one text file's lines. The shard flags apply only to shards, the Ray flags
only to `--engine ray`. Shards are .npy arrays with JSON ids, which the base install writes,
unless `--format parquet` (pyarrow) or the run already in `--out` says otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from bertkit.cli.args import positive_int
from bertkit.errors import UserError

SHARD_SIZE = 10_000
CORPUS_ONLY = ("shard_size", "format", "engine")
RAY_ONLY = ("ray_address", "workers")


def corpus_input(text: str) -> str:
    """A file, a folder, or a glob pattern (with *, ? or [) that names at least one file."""
    import glob

    path = Path(text)
    if path.exists():
        return text
    if set("*?[") & set(text):
        if not any(Path(p).is_file() for p in glob.iglob(text, recursive=True)):
            raise argparse.ArgumentTypeError(f"{text}: the pattern matches no file")
        return text
    raise argparse.ArgumentTypeError(f"{text}: no such file or folder")


def add_corpus_arguments(parser) -> None:
    from bertkit.corpus.run import ENGINES
    from bertkit.corpus.shards import DEFAULT_FORMAT, FORMATS

    a = parser.add_argument
    a("--shards", action="store_true",
      help="--out is a folder of shards with a manifest and checksums, written shard by shard; a rerun keeps the "
           "intact ones; --input may be a corpus (files, folders, patterns of text, JSONL, Parquet); implied when "
           "--input names a corpus")
    a("--shard-size", type=positive_int, default=None,
      help=f"with --shards: passages per shard, the unit a rerun keeps or redoes (default: {SHARD_SIZE:,})")
    a("--format", choices=FORMATS, default=None,
      help="with --shards: npy (an array and a JSON list of ids per shard) or parquet (id and vector columns; "
           f"needs pyarrow) (default: the format of the run already in --out, else {DEFAULT_FORMAT})")
    a("--engine", choices=ENGINES, default=None,
      help="with --shards: local (this process, --threads) or ray (a Ray Data pipeline over a pool of model "
           "actors, --threads CPUs each; needs pip install 'bertkit[ray]') (default: local)")
    a("--ray-address", default=None, metavar="ADDR",
      help="--engine ray: the cluster to join (auto, or HEAD:6379; see docs/embeddings.md) (default: a local Ray "
           "on this machine's cores)")
    a("--workers", type=positive_int, default=None,
      help="--engine ray: model actors (default: the cluster's CPUs / --threads)")
    a("--no-progress", action="store_true", help="no progress bar")


def is_corpus(args) -> bool:
    return args.shards


def _names_corpus(inputs: list[str]) -> bool:
    """Whether `--input` names a corpus (several files, a folder or a pattern) rather than one text file."""
    return len(inputs) > 1 or not Path(inputs[0]).is_file()


def _default_format(out: Path) -> str:
    """The format of the run already in `out` (its manifest's), which a rerun continues or
    --overwrite replaces, else `DEFAULT_FORMAT`; a manifest that cannot be read is reported later."""
    import json

    from bertkit.corpus.shards import DEFAULT_FORMAT, FORMATS, MANIFEST

    try:
        earlier = json.loads((out / MANIFEST).read_text(encoding="utf-8")).get("shard_format")
    except (OSError, ValueError, AttributeError):
        return DEFAULT_FORMAT
    return earlier if earlier in FORMATS else DEFAULT_FORMAT


def check_corpus(args) -> None:
    """The mode's flags together, and what the machine must have for them (before any work)."""
    given = [f for f in CORPUS_ONLY + RAY_ONLY if getattr(args, f) is not None]
    args.shards_implied = not args.shards and _names_corpus(args.input)
    if args.shards_implied:
        if Path(args.out).suffix == ".npy":
            raise UserError("--input names a corpus (several files, a folder or a pattern), embedded into a folder "
                            "of shards: give --out a folder, not a .npy file")
        args.shards = True
    if not is_corpus(args):
        if given:
            flag = given[0].replace("_", "-")
            raise UserError(f"--{flag} applies to --shards")
        return
    args.shard_size, asked = args.shard_size or SHARD_SIZE, args.format is not None
    args.format, args.engine = args.format or _default_format(Path(args.out)), args.engine or "local"
    ray_given = [f for f in RAY_ONLY if getattr(args, f) is not None]
    if args.engine != "ray" and ray_given:
        raise UserError(f"--{ray_given[0].replace('_', '-')} applies to --engine ray")
    if args.engine == "ray":
        from bertkit.corpus.ray_engine import INSTALL

        if importlib.util.find_spec("ray") is None:
            raise UserError(INSTALL)
        if args.device not in ("auto", "cpu"):
            raise UserError("--engine ray runs its actors on CPUs: drop --device or use --device cpu")
    if args.format == "parquet" and importlib.util.find_spec("pyarrow") is None:
        if asked:
            raise UserError("--format parquet needs pyarrow (pip install 'bertkit[parquet]'); or pass --format npy")
        raise UserError("holds an earlier run's Parquet shards, which need pyarrow (pip install 'bertkit[parquet]'); "
                        "or pass --format npy --overwrite to embed again as .npy shards", args.out)
    _check_out(Path(args.out))


def _check_out(out: Path) -> None:
    """A new or empty folder, or one holding shards (continued, or with --overwrite replaced)."""
    from bertkit.cli.args import check_output_dir
    from bertkit.corpus.shards import MANIFEST

    if out.is_dir():
        from bertkit.io import remove_leftovers

        remove_leftovers(out / MANIFEST)  # a manifest a killed run was writing
    if out.is_dir() and (out / MANIFEST).is_file():
        return  # an earlier run: `embed_corpus` continues it or, with other settings, asks for --overwrite
    if out.exists() and not out.is_dir():
        raise UserError("is a file; with --shards, --out names a folder", out)
    check_output_dir(out, "--out", False, (MANIFEST,), "embedding")


def settings_from(args, precision: str):
    """`corpus.EmbedSettings` from the checked flags."""
    from bertkit.corpus.embedder import EmbedSettings, model_fingerprint
    from bertkit.hf import load_config

    model = str(Path(args.model).resolve())
    return EmbedSettings(model, args.pooling, bool(args.normalize), args.max_length or load_config(model).max_tokens,
                         precision, tuple(args.layers), args.combine, args.long_inputs or "truncate",
                         args.window_stride, args.backend, bool(args.int8), model_fingerprint(model))


def run_corpus(args) -> int:
    from bertkit.cli import note_long
    from bertkit.corpus.run import Engine, embed_corpus
    from bertkit.devices import inference_precision, resolve_device

    if args.shards_implied:
        print(f"bertkit embed: --input is a corpus: writing its vectors as shards ({args.format}, with their ids and "
              f"a manifest) to the folder {args.out}", file=sys.stderr, flush=True)
    device = resolve_device("cpu" if args.backend == "onnx" or args.engine == "ray" else args.device)
    if args.int8 and device.type != "cpu":
        raise UserError("--int8 runs on the CPU: add --device cpu")
    precision = inference_precision(args.precision, device, args.int8, args.backend)
    engine = Engine(args.engine, args.batch_size, str(device), args.threads, args.workers, args.ray_address)
    manifest = embed_corpus(args.input, args.out, settings_from(args, precision), args.shard_size, args.format,
                            engine, args.overwrite, progress=not args.no_progress)
    run = manifest["last_run"]
    if run["long_inputs_report"]:
        note_long("embed", run["long_inputs_report"], "each text's chunk vectors averaged by their token counts")
    rate = f", {run['passages'] / run['seconds']:,.0f} passages/s" if run["passages"] else ""
    print(f"wrote {run['shards']:,} of {len(manifest['shards']):,} shards ({run['passages']:,} passages{rate}, "
          f"{manifest['dim']}-wide float32 vectors, {args.format}, {precision}, engine {args.engine}) to {args.out} "
          f"in {run['seconds']:.1f} s; {manifest['count']:,} passages in all")
    return 0
