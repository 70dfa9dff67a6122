"""`bertkit prepare`: raw text -> token store, validation split and pretraining instances.

The work is `bertkit.data.prepare.prepare_corpus`; this module reads the flags and reports.
"""

from __future__ import annotations

import time

from bertkit.cli.args import (
    add_overwrite,
    check_output_dir,
    existing_path,
    float_in,
    fraction,
    int_between,
    nonnegative_int,
    positive_int,
    tokenizer_dir,
)
from bertkit.data.prepare import FORMATS, PrepareOptions


def add_arguments(parser) -> None:
    defaults = PrepareOptions()
    parser.add_argument("--input", nargs="+", required=True, metavar="PATH", type=existing_path,
                        help=".txt/.gz/.xz/.jsonl files, or folders searched for them")
    parser.add_argument("--tokenizer", required=True, metavar="DIR", type=tokenizer_dir,
                        help="folder with vocab.txt (or a model folder)")
    parser.add_argument("--max-seq-len", type=int_between(8, 65535), default=defaults.max_seq_len,
                        help="tokens per instance, [CLS] and [SEP]s included")
    parser.add_argument("--format", choices=FORMATS, default=defaults.format,
                        help="nsp: BERT's sentence pairs with NSP labels; packed: RoBERTa's full sentences; sop: "
                             "ALBERT's sentence-order pairs (B follows A, swapped half the time)")
    parser.add_argument("--out", required=True, metavar="DATA_DIR", help="output folder")
    add_overwrite(parser, "prepared data folder")
    parser.add_argument("--val-fraction", type=float_in(0.0, 1.0, high_open=True), default=defaults.val_fraction,
                        help="share of documents held out")
    parser.add_argument("--seed", type=nonnegative_int, default=defaults.seed,
                        help="seed of the validation split and the instances")
    parser.add_argument("--short-seq-prob", type=fraction, default=defaults.short_seq_prob,
                        help="nsp: chance of a shorter target length")
    parser.add_argument("--dupe-factor", type=positive_int, default=defaults.dupe_factor,
                        help="passes over the documents (static masking copies)")
    parser.add_argument("--workers", type=positive_int, default=defaults.workers, help="tokenizing processes")


def check(args) -> None:
    check_output_dir(args.out, "--out", args.overwrite, ("manifest.json",), "prepared data folder")


def run(args) -> int:
    from bertkit.data.prepare import prepare_corpus

    options = PrepareOptions(args.max_seq_len, args.format, args.val_fraction, args.seed, args.short_seq_prob,
                             args.dupe_factor, args.workers)
    started = time.time()
    manifest = prepare_corpus(args.input, args.tokenizer, args.out, options)
    _report(manifest, args.out, time.time() - started)
    return 0


def _report(manifest: dict, out, seconds: float) -> None:
    corpus = manifest["corpus"]
    print(f"{out}: {manifest['format']} instances of {manifest['max_seq_len']} tokens, "
          f"{corpus['documents']:,} documents, {corpus['sentences']:,} sentences, {corpus['tokens']:,} tokens "
          f"in {seconds:.1f} s ({corpus['tokens'] / max(seconds, 1e-9):,.0f} tokens/s)")
    for name, split in manifest["splits"].items():
        print(f"  {name:<5} {split['documents']:,} documents, {split['tokens']:,} tokens, "
              f"{split['instances']:,} instances")
    if corpus["skipped_files"]:
        print(f"  skipped {len(corpus['skipped_files'])} file(s), see the warnings above")
