"""`bertkit tokenizer train`: learn a WordPiece vocabulary from text files or folders.

Inputs (.txt, .gz, .xz, or folders holding them) are streamed line by line; memory grows with
the number of distinct words, not with the corpus. They must be UTF-8 text: a file that is not
(a binary file) is skipped with a warning, by the rule `bertkit prepare` skips it with, and
when no file is left the command stops with one line naming it (exit 2). The same inputs and
options give a byte-identical vocabulary on every run and machine (bertkit.wordpiece). The
result is a tokenizer folder (vocab.txt, tokenizer.json, tokenizer_config.json) that both
`Tokenizer.from_pretrained` and transformers' BertTokenizerFast load; the five special tokens
come first ([PAD]=0 ... [MASK]=4).
"""

from __future__ import annotations

import time

from bertkit.cli.args import add_overwrite, check_output_dir, existing_path, int_at_least, positive_int
from bertkit.tokenizer import SPECIAL_TOKENS

TRAIN_SUFFIXES = (".txt", ".gz", ".xz")


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = sub.add_parser("train", help="learn a WordPiece vocabulary from text")
    train.add_argument("--input", nargs="+", required=True, metavar="PATH", type=existing_path,
                       help="UTF-8 text files (.txt/.gz/.xz) or folders searched recursively for them")
    train.add_argument("--vocab-size", type=int_at_least(len(SPECIAL_TOKENS) + 1), required=True,
                       help="entries in the vocabulary, specials included")
    train.add_argument("--cased", action="store_true",
                       help="keep case and accents (default: lower-case, strip accents)")
    train.add_argument("--min-frequency", type=positive_int, default=2, help="least count for a merged piece")
    train.add_argument("--out", required=True, help="folder to write the tokenizer into")
    add_overwrite(train, "vocabulary")


def check(args) -> None:
    check_output_dir(args.out, "--out", args.overwrite, ("vocab.txt",), "vocabulary")


def run(args) -> int:
    from bertkit.io import atomic_dir, expand_inputs
    from bertkit.tokenizer import Tokenizer

    files = expand_inputs(args.input, suffixes=TRAIN_SUFFIXES)
    size_mb = sum(f.stat().st_size for f in files) / 1e6
    print(f"training a {args.vocab_size:,}-entry {'cased' if args.cased else 'uncased'} vocabulary "
          f"on {len(files)} file(s), {size_mb:.1f} MB on disk", flush=True)
    start = time.perf_counter()
    tokenizer = Tokenizer.train(files, vocab_size=args.vocab_size, lowercase=not args.cased,
                                min_frequency=args.min_frequency)
    seconds = time.perf_counter() - start
    with atomic_dir(args.out) as tmp:
        tokenizer.save_pretrained(tmp)
    print(f"vocabulary of {len(tokenizer):,} entries written to {args.out} in {seconds:.1f} s")
    return 0
