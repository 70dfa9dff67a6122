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


def parse_layers(text: str, num_layers: int) -> tuple[int, ...]:
    """Layer indices, checked against a model with `num_layers` layers (L+1 hidden states)."""
    layers = int_list(text, "--layers")
    for layer in layers:
        if not -(num_layers + 1) <= layer <= num_layers:
            raise UserError(f"layer {layer} does not exist: the model has hidden states "
                            f"0..{num_layers} (or {-(num_layers + 1)}..-1)")
    return layers


def extract(model, tokenizer, sentences: list[str], layers: tuple[int, ...], combine: str, max_length: int,
            batch_size: int, device, progress: bool = True) -> tuple:
    """(features (N, F) float32, offsets (S+1,), tokens list) for every token of every sentence."""
    import numpy as np
    import torch
    from tqdm import tqdm

    from bertkit.embed import select_layers
    from bertkit.train.finetune_tasks import collate, to_device

    chunks, tokens, lengths = [], [], []
    model.eval()
    bar = tqdm(total=len(sentences), unit="sentence", disable=not progress, leave=False)
    with torch.no_grad():
        for i in range(0, len(sentences), batch_size):
            encodings = tokenizer.encode_batch(sentences[i : i + batch_size], max_length=max_length)
            batch = collate([{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encodings],
                            tokenizer.pad_id)
            out = model(**to_device(batch, device), output_hidden_states=True)
            h = select_layers(out.hidden_states, layers, combine).float().cpu()  # (B, T, F)
            for row, e in zip(h, encodings):
                chunks.append(row[: len(e.ids)].numpy())
                tokens.extend(e.tokens)
                lengths.append(len(e.ids))
            bar.update(len(encodings))
    bar.close()
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    width = chunks[0].shape[1] if chunks else 0
    features = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros((0, width), np.float32)
    return features, offsets, tokens


def run(args) -> int:
    import numpy as np

    from bertkit.embed import load_encoder
    from bertkit.io import atomic_path, read_lines
    from bertkit.devices import resolve_device

    out = Path(args.out)
    if out.suffix != ".npz":
        raise UserError("output must end in .npz", out)
    if args.batch_size < 1 or not 2 <= args.max_length <= 512:
        raise UserError("--batch-size must be >= 1 and --max-length between 2 and 512")
    sentences = list(read_lines(args.input))
    if not sentences:
        raise UserError("no lines in input", args.input)
    model, tokenizer = load_encoder(args.model)
    layers = parse_layers(args.layers, model.config.num_hidden_layers)
    device = resolve_device(args.device)
    model.to(device)
    t0 = time.time()
    features, offsets, tokens = extract(model, tokenizer, sentences, layers, args.combine, args.max_length,
                                        args.batch_size, device)
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as f:  # a file object: np.savez would add ".npz" to a path
            np.savez(f, features=features, offsets=offsets, tokens=np.asarray(tokens, dtype=np.str_),
                     layers=np.asarray(layers, dtype=np.int64), combine=np.asarray(args.combine))
    print(f"{len(sentences)} sentences, {features.shape[0]} tokens x {features.shape[1]} features "
          f"(layers {','.join(map(str, layers))}, {args.combine}) in {time.time() - t0:.1f}s -> {out}")
    return 0
