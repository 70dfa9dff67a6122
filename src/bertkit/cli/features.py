"""`bertkit features`: per-token contextual features from chosen layers (the paper's §5.3 input).

Input: UTF-8 text, one sentence per line (an empty line still gets its [CLS] and [SEP]).
Output: a `.npz` file (numpy, no pickled objects: `np.load(path)` reads it with the default
allow_pickle=False) holding
- `features` (N, F) float32: every token of every sentence, [CLS] and [SEP] included, in order;
  F = C x k for `--combine concat` (layers side by side in the order given), C for `sum`;
- `offsets` (S+1,) int64: sentence i's tokens are rows offsets[i]:offsets[i+1];
- `tokens` (N,) str: the WordPiece tokens;
- `layers` (k,) int64 and `combine` (a 0-d str): how the features were made.
Layer numbers index the hidden states: 0 is the embedding output, 1..L the layers, -1 the last.
The file is written atomically.
"""

from __future__ import annotations

import time
from pathlib import Path

from bertkit.cli import int_list
from bertkit.errors import UserError


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help="model directory (HF format + vocab.txt)")
    parser.add_argument("--input", required=True, help="text file, one sentence per line (.txt/.gz/.xz)")
    parser.add_argument("--out", required=True, help="output .npz file")
    parser.add_argument("--layers", default="-4,-3,-2,-1",
                        help="comma-separated hidden-state indices (0 embeddings, -1 last layer)")
    parser.add_argument("--combine", choices=("concat", "sum"), default="concat")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per sentence, [CLS]/[SEP] included")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="auto")


def run(args) -> int:
    import numpy as np

    from bertkit.devices import resolve_device
    from bertkit.embed import load_encoder, token_features
    from bertkit.io import atomic_path, read_lines

    out = Path(args.out)
    if out.suffix != ".npz":
        raise UserError("output must end in .npz", out)
    if args.batch_size < 1 or not 2 <= args.max_length <= 512:
        raise UserError("--batch-size must be >= 1 and --max-length between 2 and 512")
    sentences = list(read_lines(args.input))
    if not sentences:
        raise UserError("no lines in input", args.input)
    model, tokenizer = load_encoder(args.model)
    layers = int_list(args.layers, "--layers")
    device = resolve_device(args.device)
    t0 = time.time()
    features, offsets, tokens = token_features(model, tokenizer, sentences, layers, args.combine, args.max_length,
                                               args.batch_size, device)
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as f:  # a file object: np.savez would add ".npz" to a path
            np.savez(f, features=features, offsets=offsets, tokens=np.asarray(tokens, dtype=np.str_),
                     layers=np.asarray(layers, dtype=np.int64), combine=np.asarray(args.combine))
    print(f"{len(sentences)} sentences, {features.shape[0]} tokens x {features.shape[1]} features "
          f"(layers {','.join(map(str, layers))}, {args.combine}) in {time.time() - t0:.1f}s -> {out}")
    return 0
