"""`bertkit embed`: one sentence vector per line of a text file, saved as a float32 .npy array.

Row i of the array is line i of the input. Blank lines are refused (with their file:line)
rather than skipped, so row numbers and line numbers can never drift apart.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.cli import int_list
from bertkit.errors import UserError


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help="model directory (config.json, weights, vocab.txt); any head")
    parser.add_argument("--input", required=True, help="text file (.txt/.gz/.xz), one sentence per line")
    parser.add_argument("--pooling", required=True, choices=("cls", "mean", "max"),
                        help="[CLS] vector, or mean / max over the real tokens")
    parser.add_argument("--layers", default="-1",
                        help="hidden layers to use, comma-separated; 0 is the embeddings, -1 the last (default -1)")
    parser.add_argument("--combine", default="concat", choices=("concat", "sum", "mean"),
                        help="how to join several layers (default concat)")
    parser.add_argument("--normalize", action="store_true", help="scale every vector to unit length")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    parser.add_argument("--max-length", type=int, default=512, help="longest text in tokens; longer is cut (default 512)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda when present)")
    parser.add_argument("--out", required=True, help="output .npy file, written atomically")
    parser.add_argument("--int8", action="store_true",
                        help="quantize the linear layers to int8 (dynamic, CPU only): ~2x faster, slightly different vectors")


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
    import numpy as np

    from bertkit.devices import resolve_device
    from bertkit.embed import embed_texts, load_encoder
    from bertkit.io import atomic_path

    layers = list(int_list(args.layers, "--layers"))
    if args.batch_size < 1 or args.max_length < 3:
        raise UserError("--batch-size must be at least 1 and --max-length at least 3")
    device = resolve_device(args.device)
    sentences = _read_sentences(Path(args.input))
    model, tokenizer = load_encoder(args.model)
    if args.int8:
        if device.type != "cpu":
            raise UserError("--int8 runs on the CPU: add --device cpu")
        from bertkit.quantize import quantize_int8

        model = quantize_int8(model, inplace=True)
    vectors = embed_texts(model, tokenizer, sentences, pooling=args.pooling, layers=layers, combine=args.combine,
                          normalize=args.normalize, batch_size=args.batch_size, max_length=args.max_length,
                          device=device)
    # np.save appends ".npy" to a bare name; through an open handle the name stays as given
    with atomic_path(args.out) as tmp, open(tmp, "wb") as f:
        np.save(f, vectors)
    print(f"wrote {vectors.shape[0]} x {vectors.shape[1]} float32 vectors to {args.out}")
    return 0
