"""Raw text -> token store, validation split and pretraining instances: `prepare_corpus`.

Files are read, split into documents and sentences (bertkit.data.corpus) and tokenized by a
pool of worker processes, one file per task; the parent appends each file's ids to the token
store as it arrives, so memory grows with the largest file, not the corpus. A file that is not
text (bertkit.io.check_text: not UTF-8, NUL bytes, control characters), judged before any work
starts, or that turns out to hold bad UTF-8 or a malformed JSONL line further on, is skipped
whole with a warning naming file and line; when no file is text, the command stops at once.
Validation documents are drawn at random (at least one when val_fraction > 0 and there are two
documents or more); instances are then built per split (bertkit.data.instances) with random
draws only among that split's documents, so no validation text leaks into training. Masking is
left to training. The whole output folder appears atomically, with its manifest.json
(bertkit.data.manifest) and a copy of the tokenizer.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bertkit.errors import UserError
from bertkit.io import atomic_dir, expand_inputs, text_files

SENTENCES_PER_BATCH = 8192  # sentences per encode_batch call: bounded memory, enough to parallelise
FORMATS = ("nsp", "packed", "sop")


@dataclass(frozen=True)
class PrepareOptions:
    max_seq_len: int = 128  # tokens per instance, [CLS] and [SEP]s included
    format: str = "nsp"  # "nsp": BERT's sentence pairs with NSP labels; "packed": RoBERTa's full sentences;
    # "sop": ALBERT's sentence-order pairs
    val_fraction: float = 0.01  # share of documents held out
    seed: int = 12345
    short_seq_prob: float = 0.1  # nsp: chance of a shorter target length
    dupe_factor: int = 1  # passes over the documents
    workers: int = min(4, os.cpu_count() or 1)  # tokenizing processes

    def __post_init__(self):
        if self.format not in FORMATS:
            raise UserError(f"format must be one of {', '.join(FORMATS)}, not {self.format!r}")
        if not 8 <= self.max_seq_len <= 65535:
            raise UserError(f"max_seq_len must be in [8, 65535], got {self.max_seq_len}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise UserError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise UserError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
        if self.dupe_factor < 1 or self.workers < 1:
            raise UserError("dupe_factor and workers must be at least 1")


# ---- tokenizing, in worker processes ----
_tokenizer = None  # each worker's own Tokenizer, set by _init_worker


def _init_worker(tokenizer_dir: str, threads: bool) -> None:
    global _tokenizer
    from bertkit.tokenizer import Tokenizer

    if not threads:  # the pool gives the parallelism; one thread per process avoids oversubscription
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        # a forked worker inherits its parent's signal handlers: one that catches SIGTERM (a training
        # loop's stop request, a server's, the caller's own) would outlive `Pool.terminate` and hang its join
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
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


def _build_split(name: str, documents: np.ndarray, store, out: Path, options: PrepareOptions, tokenizer,
                 dtype, seed: int) -> dict:
    from bertkit.data.instances import build_nsp, build_packed, build_sop
    from bertkit.data.shards import InstanceWriter

    writer = InstanceWriter(out / name, options.max_seq_len, dtype, tokenizer.pad_id, np.random.default_rng(seed))
    common = dict(max_seq_len=options.max_seq_len, dupe_factor=options.dupe_factor, seed=seed,
                  cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, desc=f"{name} instances")
    if len(documents):
        if options.format in ("nsp", "sop"):
            build = build_nsp if options.format == "nsp" else build_sop
            build(store, documents, writer, short_seq_prob=options.short_seq_prob, **common)
        else:
            build_packed(store, documents, writer, **common)
    shards = writer.close()
    counts = store.counts(documents)
    counts["instances"] = sum(s["instances"] for s in shards)
    return {**counts, "shards": shards}


def prepare_corpus(inputs: list, tokenizer_dir, out, options: PrepareOptions = PrepareOptions()) -> dict:
    """Prepare `inputs` (files or folders) with the tokenizer in `tokenizer_dir` into the folder
    `out`; returns the manifest written there."""
    from bertkit.data.manifest import write_manifest
    from bertkit.data.shards import TokenStore, TokenStoreWriter, token_dtype
    from bertkit.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_pretrained(tokenizer_dir)
    try:
        tokenizer.mask_id  # noqa: B018 - read for its check
    except UserError:
        raise UserError("the vocabulary has no mask token ([MASK], <mask>), which masked-LM pretraining needs",
                        tokenizer_dir) from None
    found = expand_inputs(inputs)
    files, warnings = text_files(found)
    for warning in warnings:
        print(f"bertkit prepare: warning: {warning}", file=sys.stderr, flush=True)
    dtype = token_dtype(len(tokenizer))
    with atomic_dir(out) as tmp:
        store_writer = TokenStoreWriter(tmp / "corpus", dtype)
        try:
            warnings += _tokenize_all(files, str(tokenizer_dir), dtype, options.workers, store_writer)
        finally:
            store_writer.close()
        if store_writer.n_tokens == 0:
            raise UserError("the input holds no text to prepare", inputs[0] if len(inputs) == 1 else None)
        store = TokenStore(tmp / "corpus", dtype)
        val = choose_validation(store.n_documents, options.val_fraction, options.seed)
        np.save(tmp / "corpus" / "val_documents.npy", val)
        train = np.setdiff1d(np.arange(store.n_documents, dtype=np.int64), val)
        splits = {
            "train": _build_split("train", train, store, tmp, options, tokenizer, dtype, options.seed),
            "val": _build_split("val", val, store, tmp, options, tokenizer, dtype, options.seed + 1),
        }
        tokenizer.save_pretrained(tmp / "tokenizer")
        corpus = {"files": len(found), "skipped_files": warnings, "documents": store.n_documents,
                  "sentences": len(store.sentence_ends), "tokens": len(store.tokens),
                  "token_dtype": dtype.name}
        recorded = {"input": [str(p) for p in inputs], "tokenizer": str(tokenizer_dir), "out": str(out),
                    **asdict(options)}
        manifest = write_manifest(tmp, tokenizer, recorded, corpus, splits)
        del store
    return manifest
