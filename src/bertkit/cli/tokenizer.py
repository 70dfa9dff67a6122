"""`bertkit tokenizer train`: learn a vocabulary from text files or folders.

Inputs (.txt, .gz, .xz, or folders holding them) are streamed line by line; memory grows with
the number of distinct words, not with the corpus. They must be UTF-8 text: a file that is not
(a binary file) is skipped with a warning, by the rule `bertkit prepare` skips it with, and
when no file is left the command stops with one line naming it (exit 2). The same inputs and
options give the same vocabulary on every run and machine.

--kind wordpiece (BERT's; bertkit.wordpiece) writes vocab.txt, tokenizer.json and
tokenizer_config.json, the five special tokens first ([PAD]=0 ... [MASK]=4), byte-identical on
every run. --kind bpe (RoBERTa's byte-level BPE) and --kind unigram (XLM-R's SentencePiece) use
the tokenizers library's trainers (bertkit.subword) and write tokenizer.json and
tokenizer_config.json, <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4 first. `Tokenizer.from_pretrained`
and transformers' AutoTokenizer load each of them.
"""

from __future__ import annotations

import time

from bertkit.cli.args import add_overwrite, check_output_dir, existing_path, int_at_least, positive_int
from bertkit.errors import UserError
from bertkit.subword import MIN_BPE_VOCAB
from bertkit.tokenizer import KINDS, SPECIAL_TOKENS

TRAIN_SUFFIXES = (".txt", ".gz", ".xz")
DEFAULT_MIN_FREQUENCY = 2


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = sub.add_parser("train", help="learn a vocabulary from text")
    train.add_argument("--input", nargs="+", required=True, metavar="PATH", type=existing_path,
                       help="UTF-8 text files (.txt/.gz/.xz) or folders searched recursively for them")
    train.add_argument("--kind", choices=KINDS, default="wordpiece",
                       help="BERT's WordPiece, RoBERTa's byte-level BPE, or XLM-R's SentencePiece Unigram")
    train.add_argument("--vocab-size", type=int_at_least(len(SPECIAL_TOKENS) + 1), required=True,
                       help=f"entries in the vocabulary, specials included (--kind bpe: at least {MIN_BPE_VOCAB})")
    train.add_argument("--cased", action="store_true",
                       help="keep case and accents (default: lower-case, strip accents)")
    train.add_argument("--min-frequency", type=positive_int,
                       help=f"least count for a merged piece, --kind wordpiece or bpe ({DEFAULT_MIN_FREQUENCY} "
                            "when not given)")
    train.add_argument("--out", required=True, help="folder to write the tokenizer into")
    add_overwrite(train, "vocabulary")


def check(args) -> None:
    if args.kind == "bpe" and args.vocab_size < MIN_BPE_VOCAB:
        raise UserError(f"--vocab-size {args.vocab_size} is too small for --kind bpe: its 256 byte characters "
                        f"and 5 special tokens need at least {MIN_BPE_VOCAB}")
    if args.kind == "unigram" and args.min_frequency is not None:
        raise UserError("--min-frequency applies to --kind wordpiece or bpe: the Unigram trainer has no such limit")
    check_output_dir(args.out, "--out", args.overwrite, ("vocab.txt", "tokenizer.json"), "vocabulary")


def run(args) -> int:
    from bertkit.io import atomic_dir, expand_inputs
    from bertkit.tokenizer import Tokenizer

    files = expand_inputs(args.input, suffixes=TRAIN_SUFFIXES)
    size_mb = sum(f.stat().st_size for f in files) / 1e6
    print(f"training a {args.vocab_size:,}-entry {'cased' if args.cased else 'uncased'} {args.kind} vocabulary "
          f"on {len(files)} file(s), {size_mb:.1f} MB on disk", flush=True)
    start = time.perf_counter()
    min_frequency = DEFAULT_MIN_FREQUENCY if args.min_frequency is None else args.min_frequency
    tokenizer = Tokenizer.train(files, vocab_size=args.vocab_size, lowercase=not args.cased,
                                min_frequency=min_frequency, kind=args.kind)
    seconds = time.perf_counter() - start
    with atomic_dir(args.out) as tmp:
        tokenizer.save_pretrained(tmp)
    print(f"vocabulary of {len(tokenizer):,} entries written to {args.out} in {seconds:.1f} s")
    return 0
