"""`bertkit features`: per-token contextual features from chosen layers (the paper's §5.3 input).

Input: UTF-8 text, one sentence per line (an empty line still gets its [CLS] and [SEP]).
Output: a `.npz` file (numpy, no pickled objects: `np.load(path)` reads it with the default
allow_pickle=False) holding
- `features` (N, F) float32: every token of every sentence, [CLS] and [SEP] included, in order;
  F = C x k for `--combine concat` (layers side by side in the order given), C for `sum`;
- `offsets` (S+1,) int64: sentence i's tokens are rows offsets[i]:offsets[i+1];
- `tokens` (N,) str: the WordPiece tokens;
- `layers` (k,) int64 and `combine` (a 0-d str): how the features were made.
- `windows` (S,) int64: the windows each sentence was read in (1 unless --long-inputs windows).
Layer numbers index the hidden states: 0 is the embedding output, 1..L the layers, -1 the last.
Sentences longer than --max-length tokens are cut, or with --long-inputs windows read whole:
each token's vector from the window where it has the most context, [CLS] from the first window
and [SEP] from the last (the token embeddings late chunking pools); one note on stderr says how
many. The file is written atomically.
"""

from __future__ import annotations

import time
from pathlib import Path

from bertkit.cli import note_long
from bertkit.cli.args import (
    add_long_inputs,
    add_overwrite,
    check_long_inputs,
    check_output_file,
    comma_ints,
    device_name,
    existing_file,
    int_between,
    long_policy,
    model_dir,
    positive_int,
)
from bertkit.errors import UserError


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("--model", required=True, type=model_dir, help="model directory (HF format + vocab.txt)")
    a("--input", required=True, type=existing_file, help="text file, one sentence per line (.txt/.gz/.xz)")
    a("--out", required=True, help="output .npz file")
    add_overwrite(parser, "file")
    a("--layers", type=comma_ints(), default="-4,-3,-2,-1",
      help="comma-separated hidden-state indices (0 embeddings, -1 last layer)")
    a("--combine", choices=("concat", "sum"), default="concat", help="layers side by side, or their sum")
    a("--max-length", type=int_between(2, 65535), default=None,
      help="tokens per sentence (or window), [CLS]/[SEP] included, at most the model's positions; longer is cut "
           "or read in windows (default: 128, or the model's positions if fewer)")
    add_long_inputs(parser)
    a("--batch-size", type=positive_int, default=32, help="sentences per forward pass")
    a("--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps")


def check(args) -> None:
    from bertkit.hf import load_config

    check_long_inputs(args)
    limit = load_config(args.model).max_tokens  # 512 for BERT, 8,192 for ModernBERT
    if args.max_length is None:
        args.max_length = min(128, limit)
    elif args.max_length > limit:
        raise UserError(f"--max-length {args.max_length} exceeds the model's {limit} positions "
                        f"(--long-inputs windows reads longer sentences in windows)")
    if Path(args.out).suffix != ".npz":
        raise UserError("output must end in .npz", args.out)
    check_output_file(args.out, "--out", args.overwrite)


def run(args) -> int:
    from bertkit.io import atomic_path, read_lines

    sentences = list(read_lines(args.input))  # before torch is imported: a bad file is reported at once
    if not sentences:
        raise UserError("no lines in input", args.input)
    import numpy as np

    from bertkit.devices import resolve_device
    from bertkit.embed import load_encoder, token_features

    device = resolve_device(args.device)
    model, tokenizer = load_encoder(args.model)
    t0 = time.time()
    report: dict = {}
    features, offsets, tokens = token_features(model, tokenizer, sentences, args.layers, args.combine, args.max_length,
                                               args.batch_size, device, report=report, policy=long_policy(args))
    note_long("features", report, "each token's vector from the window where it has the most context")
    with atomic_path(args.out) as tmp, open(tmp, "wb") as f:  # a file object: np.savez would add ".npz" to a path
        np.savez(f, features=features, offsets=offsets, tokens=np.asarray(tokens, dtype=np.str_),
                 layers=np.asarray(args.layers, dtype=np.int64), combine=np.asarray(args.combine),
                 windows=np.asarray(report["windows_per_input"], dtype=np.int64))
    print(f"{len(sentences)} sentences, {features.shape[0]} tokens x {features.shape[1]} features "
          f"(layers {','.join(map(str, args.layers))}, {args.combine}) in {time.time() - t0:.1f}s -> {args.out}")
    return 0
