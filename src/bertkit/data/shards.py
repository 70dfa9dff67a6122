"""On-disk layout of prepared data: the token store and the instance shards.

DATA_DIR/
  manifest.json            what was built, from what, with which tokenizer (see prepare.py)
  tokenizer/               the tokenizer's files, to put beside the trained model
  corpus/tokens.bin        every sentence's token ids, back to back (narrowest unsigned dtype)
  corpus/sentence_ends.bin int64: end offset in tokens.bin of each sentence
  corpus/document_ends.bin int64: end index (in sentences) of each document
  corpus/val_documents.npy int64: indices of the held-out documents
  train/input_ids-00000.npy  (N, max_seq_len) instances padded with [PAD]
  train/meta-00000.npy       (N, 3) int32: length, length of [CLS] A [SEP], NSP label (-1: none)
  val/...

The store is appended to one file's tokens at a time and read back through memmaps, so neither
preparing nor training holds the corpus in memory; instance shards hold at most `shard_size`
instances each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bertkit.data.manifest import read_manifest
from bertkit.errors import UserError

SHARD_SIZE = 1 << 16  # instances per shard: 16 MiB of uint16 at max_seq_len 128
META_COLUMNS = ("length", "a_length", "label")


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned integer type holding every id of the vocabulary."""
    for dtype in (np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise ValueError(f"vocabulary of {vocab_size} ids is too large")


class TokenStoreWriter:
    """Appends documents (as sentences of token ids) to the store files under `folder`."""

    def __init__(self, folder: Path, dtype: np.dtype):
        folder.mkdir(parents=True, exist_ok=True)
        self.dtype = dtype
        # Open across `add` calls until `close()`: no `with` block can hold them.
        self._tokens = open(folder / "tokens.bin", "wb")  # noqa: SIM115
        self._sentence_ends = open(folder / "sentence_ends.bin", "wb")  # noqa: SIM115
        self._document_ends = open(folder / "document_ends.bin", "wb")  # noqa: SIM115
        self.n_tokens = self.n_sentences = self.n_documents = 0

    def add(self, ids: np.ndarray, sentence_lengths: np.ndarray, document_sentences: np.ndarray) -> None:
        """One batch of whole documents: their ids back to back, tokens per sentence, sentences per document."""
        self._tokens.write(np.ascontiguousarray(ids, dtype=self.dtype).tobytes())
        ends = self.n_tokens + np.cumsum(sentence_lengths, dtype=np.int64)
        self._sentence_ends.write(ends.tobytes())
        doc_ends = self.n_sentences + np.cumsum(document_sentences, dtype=np.int64)
        self._document_ends.write(doc_ends.tobytes())
        self.n_tokens += len(ids)
        self.n_sentences += len(sentence_lengths)
        self.n_documents += len(document_sentences)

    def close(self) -> None:
        for f in (self._tokens, self._sentence_ends, self._document_ends):
            f.close()


def _memmap(path: Path, dtype) -> np.ndarray:
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


class TokenStore:
    """Random access to documents of the store: `store.document(d)` -> (ids, sentence offsets)."""

    def __init__(self, folder: Path, dtype: np.dtype):
        try:
            self.tokens = _memmap(folder / "tokens.bin", dtype)
            self.sentence_ends = _memmap(folder / "sentence_ends.bin", np.int64)
            self.document_ends = _memmap(folder / "document_ends.bin", np.int64)
        except OSError as e:
            raise UserError(f"cannot read the token store: {e}", folder) from None
        self.n_documents = len(self.document_ends)

    def sentence_range(self, d: int) -> tuple[int, int]:
        return (int(self.document_ends[d - 1]) if d > 0 else 0), int(self.document_ends[d])

    def document(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Ids of document d and its sentence boundaries: sentence j is ids[offsets[j]:offsets[j+1]]."""
        s0, s1 = self.sentence_range(d)
        t0 = int(self.sentence_ends[s0 - 1]) if s0 > 0 else 0
        offsets = np.concatenate(([t0], self.sentence_ends[s0:s1])) - t0
        return np.asarray(self.tokens[t0:t0 + int(offsets[-1])]), offsets

    def counts(self, documents: np.ndarray) -> dict[str, int]:
        """Documents, sentences and tokens of a subset of documents."""
        doc_ends = np.asarray(self.document_ends)
        doc_starts = np.concatenate(([0], doc_ends[:-1]))
        sent_ends = np.asarray(self.sentence_ends)
        tok_at = np.concatenate(([0], sent_ends))
        sentences = doc_ends[documents] - doc_starts[documents]
        tokens = tok_at[doc_ends[documents]] - tok_at[doc_starts[documents]]
        return {"documents": len(documents), "sentences": int(sentences.sum()), "tokens": int(tokens.sum())}


class InstanceWriter:
    """Buffers instances and writes them as shards of at most `shard_size`, locally shuffled."""

    def __init__(self, folder: Path, max_seq_len: int, dtype: np.dtype, pad_id: int, rng: np.random.Generator,
                 shard_size: int = SHARD_SIZE):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.max_seq_len, self.pad_id, self.rng = folder, max_seq_len, pad_id, rng
        self.shard_size = shard_size
        self._ids = np.full((shard_size, max_seq_len), pad_id, dtype=dtype)
        self._meta = np.zeros((shard_size, len(META_COLUMNS)), dtype=np.int32)
        self._n = 0
        self.shards: list[dict] = []

    def add(self, ids: np.ndarray, a_length: int, label: int) -> None:
        """One instance: its ids with [CLS]/[SEP] in place, the length of [CLS] A [SEP], the NSP label."""
        n = len(ids)
        if n > self.max_seq_len:
            raise AssertionError(f"instance of {n} tokens exceeds max_seq_len {self.max_seq_len}")
        row = self._ids[self._n]
        row[:n] = ids
        row[n:] = self.pad_id
        self._meta[self._n] = (n, a_length, label)
        self._n += 1
        if self._n == self.shard_size:
            self._flush()

    def _flush(self) -> None:
        if self._n == 0:
            return
        order = self.rng.permutation(self._n)
        index = len(self.shards)
        names = {"input_ids": f"input_ids-{index:05d}.npy", "meta": f"meta-{index:05d}.npy"}
        np.save(self.folder / names["input_ids"], self._ids[:self._n][order])
        np.save(self.folder / names["meta"], self._meta[:self._n][order])
        self.shards.append({**{k: f"{self.folder.name}/{v}" for k, v in names.items()}, "instances": self._n})
        self._n = 0

    def close(self) -> list[dict]:
        self._flush()
        return self.shards

    @property
    def count(self) -> int:
        return sum(s["instances"] for s in self.shards) + self._n


class InstanceShards:
    """All instance shards of one split, memory-mapped; `gather(indices)` -> (ids, meta)."""

    def __init__(self, data_dir: Path, shards: list[dict], max_seq_len: int):
        self.max_seq_len = max_seq_len
        self.ids, self.meta = [], []
        try:
            for shard in shards:
                self.ids.append(np.load(data_dir / shard["input_ids"], mmap_mode="r"))
                self.meta.append(np.load(data_dir / shard["meta"], mmap_mode="r"))
        except (OSError, ValueError, KeyError) as e:
            raise UserError(f"cannot read instance shards: {e}", data_dir) from None
        self.starts = np.cumsum([0] + [len(m) for m in self.meta], dtype=np.int64)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def gather(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"instance index out of range [0, {len(self)})")
        shard = np.searchsorted(self.starts, indices, side="right") - 1
        ids = np.empty((len(indices), self.max_seq_len), dtype=np.int64)
        meta = np.empty((len(indices), len(META_COLUMNS)), dtype=np.int64)
        for s in np.unique(shard):
            rows = np.nonzero(shard == s)[0]
            local = indices[rows] - self.starts[s]
            ids[rows] = self.ids[s][local]
            meta[rows] = self.meta[s][local]
        return ids, meta


class PretrainingDataset:
    """The instances of one split of a prepared folder; `batch(indices)` gives model-ready tensors.

    input_ids, token_type_ids and attention_mask are (B, max_seq_len) int64, padded with [PAD];
    type ids are 0 for [CLS] A [SEP] and padding, 1 for B [SEP]. With the nsp format,
    next_sentence_label (B,) is 0 for IsNext and 1 for NotNext (transformers' convention).
    """

    def __init__(self, data_dir: str | Path, split: str = "train"):
        self.data_dir = Path(data_dir)
        self.manifest = read_manifest(self.data_dir)
        if split not in self.manifest["splits"]:
            raise UserError(f"no {split!r} split (has {', '.join(self.manifest['splits'])})", self.data_dir)
        self.split = split
        self.format = self.manifest["format"]
        self.max_seq_len = int(self.manifest["max_seq_len"])
        self._shards = InstanceShards(self.data_dir, self.manifest["splits"][split]["shards"], self.max_seq_len)
        self._positions = np.arange(self.max_seq_len)

    def __len__(self) -> int:
        return len(self._shards)

    def batch(self, indices) -> dict:
        import torch

        ids, meta = self._shards.gather(indices)
        length, a_length, label = meta[:, 0:1], meta[:, 1:2], meta[:, 2]
        attention = self._positions[None, :] < length
        types = (self._positions[None, :] >= a_length) & attention
        out = {
            "input_ids": torch.from_numpy(ids),
            "token_type_ids": torch.from_numpy(types.astype(np.int64)),
            "attention_mask": torch.from_numpy(attention.astype(np.int64)),
        }
        if self.format in ("nsp", "sop"):  # the pair's label: next sentence, or sentence order
            out["next_sentence_label"] = torch.from_numpy(np.ascontiguousarray(label))
        return out
