"""`bertkit prepare`: raw text -> token store, validation split and pretraining instances.

The work is `bertkit.data.prepare.prepare_corpus`; this module reads the flags and reports.
"""

from __future__ import annotations

import time

from bertkit.cli.args import fraction, int_between, positive_int
from bertkit.data.prepare import FORMATS, PrepareOptions


def add_arguments(parser) -> None:
    defaults = PrepareOptions()
    parser.add_argument("--input", nargs="+", required=True, metavar="PATH",
                        help=".txt/.gz/.xz/.jsonl files, or folders searched for them")
    parser.add_argument("--tokenizer", required=True, metavar="DIR", help="folder with vocab.txt (or a model folder)")
    parser.add_argument("--max-seq-len", type=int_between(8, 65535), default=defaults.max_seq_len,
                        help="tokens per instance, [CLS] and [SEP]s included")
    parser.add_argument("--format", choices=FORMATS, default=defaults.format,
                        help="nsp: BERT's sentence pairs with NSP labels; packed: RoBERTa's full sentences")
    parser.add_argument("--out", required=True, metavar="DATA_DIR", help="output folder")
    parser.add_argument("--val-fraction", type=fraction, default=defaults.val_fraction, help="share of documents held out")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--short-seq-prob", type=fraction, default=defaults.short_seq_prob,
                        help="nsp: chance of a shorter target length")
    parser.add_argument("--dupe-factor", type=positive_int, default=defaults.dupe_factor,
                        help="passes over the documents (static masking copies)")
    parser.add_argument("--workers", type=positive_int, default=defaults.workers, help="tokenizing processes")


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
