"""`bertkit prepare`: raw text -> token store, validation split and pretraining instances.

Files are read, split into documents and sentences (bertkit.data.corpus) and tokenized by a
pool of worker processes, one file per task; the parent appends each file's ids to the token
store as it arrives, so memory grows with the largest file, not the corpus. A file that is not
valid UTF-8 (or a malformed JSONL line) is skipped whole with a warning naming file and line.
Validation documents are drawn at random (at least one when val_fraction > 0 and there are two
documents or more); instances are then built per split (bertkit.data.instances) with random
draws only among that split's documents, so no validation text leaks into training. Masking is
left to training. The whole output folder appears atomically.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bertkit.errors import UserError
from bertkit.io import atomic_dir, expand_inputs, write_json

SENTENCES_PER_BATCH = 8192  # sentences per encode_batch call: bounded memory, enough to parallelise
FORMATS = ("nsp", "packed")


def add_arguments(parser) -> None:
    parser.add_argument("--input", nargs="+", required=True, metavar="PATH",
                        help=".txt/.gz/.xz/.jsonl files, or folders searched for them")
    parser.add_argument("--tokenizer", required=True, metavar="DIR", help="folder with vocab.txt (or a model folder)")
    parser.add_argument("--max-seq-len", type=int, default=128, help="tokens per instance, [CLS] and [SEP]s included")
    parser.add_argument("--format", choices=FORMATS, default="nsp",
                        help="nsp: BERT's sentence pairs with NSP labels; packed: RoBERTa's full sentences")
    parser.add_argument("--out", required=True, metavar="DATA_DIR", help="output folder (replaced atomically)")
    parser.add_argument("--val-fraction", type=float, default=0.01, help="share of documents held out")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--short-seq-prob", type=float, default=0.1, help="nsp: chance of a shorter target length")
    parser.add_argument("--dupe-factor", type=int, default=1, help="passes over the documents (static masking copies)")
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1), help="tokenizing processes")


def _check_args(args) -> None:
    if args.max_seq_len < 8 or args.max_seq_len > 65535:
        raise UserError(f"--max-seq-len must be in [8, 65535], got {args.max_seq_len}")
    if not 0.0 <= args.val_fraction < 1.0:
        raise UserError(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
    if not 0.0 <= args.short_seq_prob <= 1.0:
        raise UserError(f"--short-seq-prob must be in [0, 1], got {args.short_seq_prob}")
    if args.dupe_factor < 1 or args.workers < 1:
        raise UserError("--dupe-factor and --workers must be at least 1")


# ---- tokenizing, in worker processes ----
_tokenizer = None  # each worker's own Tokenizer, set by _init_worker


def _init_worker(tokenizer_dir: str, threads: bool) -> None:
    global _tokenizer
    from bertkit.tokenizer import Tokenizer

    if not threads:  # the pool gives the parallelism; one thread per process avoids oversubscription
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _tokenizer = Tokenizer.from_pretrained(tokenizer_dir)


@dataclass
class FileTokens:
    path: str
    ids: np.ndarray  # every sentence's ids back to back
    sentence_lengths: np.ndarray  # tokens per sentence (none empty)
    document_sentences: np.ndarray  # sentences per document (none empty)
    warning: str | None = None


def _tokenize_file(path: Path, dtype: np.dtype) -> FileTokens:
    from bertkit.data.corpus import read_documents

    chunks: list[np.ndarray] = []  # ids of each batch of sentences, 2-4 bytes a token
    lengths: list[int] = []
    doc_sizes: list[int] = []
    pending: list[list[str]] = []

    def encode_pending():
        sentences = [s for doc in pending for s in doc]
        encoded = iter(_tokenizer.encode_ids_batch(sentences))
        kept_ids = []
        for doc in pending:
            kept = [e for e in itertools.islice(encoded, len(doc)) if e]  # drop sentences of no tokens
            if kept:
                kept_ids.extend(kept)
                lengths.extend(map(len, kept))
                doc_sizes.append(len(kept))
        n = sum(map(len, kept_ids))
        chunks.append(np.fromiter(itertools.chain.from_iterable(kept_ids), dtype=dtype, count=n))
        pending.clear()

    try:
        n_pending = 0
        for document in read_documents(path):
            pending.append(document)
            n_pending += len(document)
            if n_pending >= SENTENCES_PER_BATCH:
                encode_pending()
                n_pending = 0
        encode_pending()
    except UserError as e:
        empty = np.zeros(0, dtype=np.int64)
        return FileTokens(str(path), np.zeros(0, dtype=dtype), empty, empty, warning=f"{e}; skipped this file")
    return FileTokens(str(path), np.concatenate(chunks), np.array(lengths, dtype=np.int64),
                      np.array(doc_sizes, dtype=np.int64))


def _tokenize_all(files: list[Path], tokenizer_dir: str, dtype: np.dtype, workers: int, writer) -> list[str]:
    """Tokenize every file into the store writer, in order; returns the warnings."""
    warnings: list[str] = []
    pool = None
    if workers > 1 and len(files) > 1:
        # fork where there is one: workers inherit the imported modules instead of re-importing
        # torch; it happens before any tokenizer, torch or tqdm thread exists in this process
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        pool = context.Pool(min(workers, len(files)), _init_worker, (tokenizer_dir, False))
    else:
        _init_worker(tokenizer_dir, threads=True)
    tasks = [(p, dtype) for p in files]
    results = pool.imap(_tokenize_file_task, tasks) if pool else map(_tokenize_file_task, tasks)
    try:
        with tqdm(total=len(files), desc="tokenizing", unit="file", mininterval=2.0) as bar:
            for result in results:
                if result.warning:
                    warnings.append(result.warning)
                    tqdm.write(f"bertkit prepare: warning: {result.warning}", file=sys.stderr)
                else:
                    writer.add(result.ids, result.sentence_lengths, result.document_sentences)
                bar.update(1)
                bar.set_postfix(docs=writer.n_documents, tokens=f"{writer.n_tokens:,}", refresh=False)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    return warnings


def _tokenize_file_task(task: tuple[Path, np.dtype]) -> FileTokens:
    return _tokenize_file(*task)


# ---- split and instances ----
def choose_validation(n_documents: int, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices of the held-out documents."""
    if fraction <= 0 or n_documents < 2:
        return np.zeros(0, dtype=np.int64)
    n_val = min(max(1, round(n_documents * fraction)), n_documents - 1)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_documents, size=n_val, replace=False)).astype(np.int64)


def _build_split(name: str, documents: np.ndarray, store, out: Path, args, tokenizer, dtype, seed: int) -> dict:
    from bertkit.data.instances import build_nsp, build_packed
    from bertkit.data.shards import InstanceWriter

    writer = InstanceWriter(out / name, args.max_seq_len, dtype, tokenizer.pad_id, np.random.default_rng(seed))
    common = dict(max_seq_len=args.max_seq_len, dupe_factor=args.dupe_factor, seed=seed,
                  cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, desc=f"{name} instances")
    if len(documents):
        if args.format == "nsp":
            build_nsp(store, documents, writer, short_seq_prob=args.short_seq_prob, **common)
        else:
            build_packed(store, documents, writer, **common)
    shards = writer.close()
    counts = store.counts(documents)
    counts["instances"] = sum(s["instances"] for s in shards)
    return {**counts, "shards": shards}


def run(args) -> int:
    from bertkit import __version__
    from bertkit.data.shards import MANIFEST_VERSION, TokenStore, TokenStoreWriter, token_dtype
    from bertkit.tokenizer import Tokenizer

    _check_args(args)
    tokenizer = Tokenizer.from_pretrained(args.tokenizer)
    if "[MASK]" not in tokenizer.vocab:
        raise UserError("the vocabulary has no [MASK] token, which masked-LM pretraining needs", args.tokenizer)
    files = expand_inputs(args.input)
    dtype = token_dtype(len(tokenizer))
    started = time.time()
    with atomic_dir(args.out) as tmp:
        store_writer = TokenStoreWriter(tmp / "corpus", dtype)
        try:
            warnings = _tokenize_all(files, str(args.tokenizer), dtype, args.workers, store_writer)
        finally:
            store_writer.close()
        if store_writer.n_tokens == 0:
            raise UserError("the input holds no text to prepare", args.input[0] if len(args.input) == 1 else None)
        store = TokenStore(tmp / "corpus", dtype)
        val = choose_validation(store.n_documents, args.val_fraction, args.seed)
        np.save(tmp / "corpus" / "val_documents.npy", val)
        train = np.setdiff1d(np.arange(store.n_documents, dtype=np.int64), val)
        splits = {
            "train": _build_split("train", train, store, tmp, args, tokenizer, dtype, args.seed),
            "val": _build_split("val", val, store, tmp, args, tokenizer, dtype, args.seed + 1),
        }
        tokenizer.save_pretrained(tmp / "tokenizer")
        manifest = {
            "version": MANIFEST_VERSION, "format": args.format, "max_seq_len": args.max_seq_len,
            "tokenizer_fingerprint": tokenizer.fingerprint, "vocab_size": len(tokenizer),
            "lowercase": tokenizer.lowercase, "token_dtype": dtype.name,
            "pad_id": tokenizer.pad_id, "cls_id": tokenizer.cls_id, "sep_id": tokenizer.sep_id,
            "mask_id": tokenizer.mask_id, "unk_id": tokenizer.unk_id, "special_ids": tokenizer.special_ids,
            "seed": args.seed, "short_seq_prob": args.short_seq_prob, "dupe_factor": args.dupe_factor,
            "val_fraction": args.val_fraction,
            "corpus": {"files": len(files), "skipped_files": warnings, "documents": store.n_documents,
                       "sentences": int(len(store.sentence_ends)), "tokens": int(len(store.tokens))},
            "splits": splits,
            "args": {k: (list(map(str, v)) if isinstance(v, list) else v) for k, v in vars(args).items()
                     if k != "func"},
            "bertkit_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        write_json(tmp / "manifest.json", manifest)
        del store
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
