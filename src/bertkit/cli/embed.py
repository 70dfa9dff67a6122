"""`bertkit embed`: one sentence vector per line of a text file, saved as a float32 .npy array.

Row i of the array is line i of the input. Blank lines are refused (with their file:line)
rather than skipped, so row numbers and line numbers can never drift apart. Lines longer than
--max-length tokens are cut, or with --long-inputs windows read whole in overlapping chunks whose
vectors are averaged by their token counts (then normalised when the vectors are); one note on
stderr says how many and what was done (`bertkit.long_inputs`). Without --pooling, the
directory's sentence-transformers files choose the pooling and the normalisation (as `serve`
reads them); a directory without them needs --pooling.

With --shards (implied when --input names a folder, a pattern or several files), --out is a
folder and --input a corpus: files, folders and glob patterns of text, JSONL and Parquet files,
embedded into a folder of shards with a manifest (`bertkit.corpus`), in this process or with
--engine ray on a Ray cluster. A rerun of the same command keeps every intact shard and embeds the
rest; each shard is checked by its SHA-256.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.cli import note_long
from bertkit.cli.args import (
    add_long_inputs,
    add_overwrite,
    add_precision,
    check_long_inputs,
    check_output_file,
    check_precision,
    comma_ints,
    device_name,
    encoder_dir,
    int_between,
    long_policy,
    positive_int,
)
from bertkit.cli.embed_corpus import add_corpus_arguments, check_corpus, corpus_input, is_corpus, run_corpus
from bertkit.errors import UserError


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("--model", required=True, type=encoder_dir,
      help="model directory (config.json, weights, vocab.txt; any head), or a static model (`distill --to static`)")
    a("--input", required=True, nargs="+", type=corpus_input, metavar="PATH",
      help="a text file (.txt/.gz/.xz), one sentence per line; or a corpus, embedded into shards: files, folders, "
           "glob patterns of text, .jsonl (_id/id, title, text) and .parquet (text; id, title) files")
    a("--pooling", choices=("cls", "mean", "max"),
      help="[CLS] vector, or mean / max over the real tokens (default: the pooling the directory's "
           "1_Pooling/config.json declares, normalised when its modules.json ends in Normalize)")
    a("--layers", type=comma_ints(), default="-1",
      help="hidden layers to use, comma-separated; 0 is the embeddings, -1 the last")
    a("--combine", default="concat", choices=("concat", "sum", "mean"), help="how to join several layers")
    a("--normalize", action="store_true",
      help="scale every vector to unit length (without --pooling: also when the directory's modules end in Normalize)")
    a("--batch-size", type=positive_int, default=32, help="texts per forward pass")
    a("--max-length", type=int_between(3, 65535), default=None,
      help="longest text (or window) in tokens, at most the model's positions (default: all of them, 512 for BERT, "
           "8,192 for ModernBERT); longer is cut or read in windows")
    add_long_inputs(parser)
    a("--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps")
    a("--out", required=True,
      help="output .npy file (row i = line i), written atomically; with --shards, a folder of shards")
    add_overwrite(parser, "file, or the shards of another run")
    add_corpus_arguments(parser)
    a("--int8", action="store_true",
      help="quantize the linear layers to int8 (dynamic, CPU only): ~2x faster, slightly different vectors; "
           "with --backend onnx, run the export's int8 graph")
    a("--backend", choices=("torch", "onnx"), default="torch",
      help="torch: the model's weights; onnx: a `bertkit export` folder in ONNX Runtime (CPU, last layer only)")
    add_precision(parser)
    add_vector_options(parser)


def add_vector_options(parser, role: str | None = None, dimensions: bool = True) -> None:
    """--dimensions (Matryoshka, `bertkit.matryoshka`) and sentence-transformers' prompts
    (`bertkit.prompts`); `role` "query" or "document": the prompt that role takes by default."""
    a = parser.add_argument
    if dimensions:
        a("--dimensions", type=positive_int, default=None, metavar="N",
          help="keep each vector's first N components, renormalised when the vectors are unit length "
               "(Matryoshka; default: all)")
    which = {None: "the model's default_prompt_name, if any", "query": "the model's \"query\" prompt, if any",
             "document": "the first of the model's \"document\", \"passage\", \"corpus\" prompts"}[role]
    a("--prompt-name", default=None, metavar="NAME",
      help=f"put the model's prompt NAME (config_sentence_transformers.json) before every text (default: {which})")
    a("--prompt", default=None, metavar="TEXT", help="put TEXT before every text instead (e.g. 'query: ')")


def check(args) -> None:
    from bertkit.export import check_backend

    check_long_inputs(args)
    check_corpus(args)
    if not is_corpus(args):
        check_output_file(args.out, "--out", args.overwrite)
    _check_vector_options(args)
    check_backend(args.model, args.backend)
    if args.pooling is None:
        from bertkit.st import declared_pooling, model_normalizes

        args.pooling = declared_pooling(args.model)
        if args.pooling is None:
            raise UserError("--pooling is required: the model directory declares none "
                            "(no sentence-transformers 1_Pooling/config.json)", args.model)
        args.normalize = args.normalize or model_normalizes(args.model)
    if args.backend == "onnx" and tuple(args.layers) != (-1,):
        raise UserError("--backend onnx gives the last layer only: drop --layers or use --backend torch")
    if args.backend == "onnx" and args.device not in ("auto", "cpu"):
        raise UserError("--backend onnx runs on the CPU: drop --device or use --device cpu")
    check_precision(args.precision, args.int8, args.backend)


def _check_vector_options(args) -> None:
    from bertkit.prompts import resolve_prompt

    asked = [f for f in ("dimensions", "prompt_name", "prompt") if getattr(args, f) is not None]
    if asked and is_corpus(args):
        raise UserError(f"--{asked[0].replace('_', '-')} applies to a text file; --shards embeds as the model does")
    args.prompt = None if is_corpus(args) else resolve_prompt(args.model, args.prompt_name, args.prompt)


def _read_sentences(path: Path) -> list[str]:
    from bertkit.io import read_lines

    sentences = []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            raise UserError("blank line: expected one sentence per line", path, number)
        sentences.append(line)
    if not sentences:
        raise UserError("empty file: expected one sentence per line", path)
    return sentences


def run(args) -> int:
    if is_corpus(args):
        return run_corpus(args)
    sentences = _read_sentences(Path(args.input[0]))  # before torch is imported: a bad file is reported at once
    import numpy as np

    from bertkit.devices import inference_precision, resolve_device
    from bertkit.embed import embed_texts
    from bertkit.export.backend import load_encoder_for
    from bertkit.io import atomic_path
    from bertkit.prompts import with_prompt

    device = resolve_device("cpu" if args.backend == "onnx" else args.device)
    if args.int8 and device.type != "cpu":
        raise UserError("--int8 runs on the CPU: add --device cpu")
    precision = inference_precision(args.precision, device, args.int8, args.backend)
    model, tokenizer = load_encoder_for(args.model, args.backend, args.int8)
    report: dict = {}
    vectors = embed_texts(model, tokenizer, with_prompt(args.prompt, sentences), pooling=args.pooling,
                          layers=args.layers, combine=args.combine, dimensions=args.dimensions,
                          normalize=args.normalize, batch_size=args.batch_size,
                          max_length=args.max_length or model.config.max_tokens,
                          device=device, report=report, precision=precision, policy=long_policy(args),
                          progress=not args.no_progress)
    note_long("embed", report, "each text's chunk vectors averaged by their token counts")
    # np.save appends ".npy" to a bare name; through an open handle the name stays as given
    with atomic_path(args.out) as tmp, open(tmp, "wb") as f:
        np.save(f, vectors)
    print(f"wrote {vectors.shape[0]} x {vectors.shape[1]} float32 vectors to {args.out} ({precision})")
    return 0
