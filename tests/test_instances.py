"""Instance building on a synthetic token store whose ids are their own positions.

Token t of the store has id t + 5, so an instance shows exactly which stretch of which document
each of its segments came from.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from bertkit.data.instances import IS_NEXT, NO_LABEL, NOT_NEXT, build_nsp, build_packed
from bertkit.data.shards import InstanceShards, InstanceWriter, PretrainingDataset, TokenStore, TokenStoreWriter
from bertkit.errors import UserError

PAD, CLS, SEP = 0, 2, 3
FIRST_ID = 5
MAX_LEN = 37


def _store(tmp_path, n_docs=307, seed=0) -> TokenStore:
    rng = np.random.default_rng(seed)
    doc_sentences = rng.integers(1, 30, n_docs)
    sentence_lengths = rng.integers(2, 25, int(doc_sentences.sum()))
    sentence_lengths[5] = 90  # one sentence longer than any instance
    n_tokens = int(sentence_lengths.sum())
    writer = TokenStoreWriter(tmp_path / "corpus", np.dtype(np.uint32))
    writer.add(np.arange(FIRST_ID, FIRST_ID + n_tokens), sentence_lengths, doc_sentences)
    writer.close()
    return TokenStore(tmp_path / "corpus", np.dtype(np.uint32))


def _build(tmp_path, fmt: str, dupe_factor: int = 1):
    store = _store(tmp_path)
    writer = InstanceWriter(tmp_path / "train", MAX_LEN, np.dtype(np.uint32), PAD, np.random.default_rng(0),
                            shard_size=997)
    documents = np.arange(store.n_documents)
    common = dict(max_seq_len=MAX_LEN, dupe_factor=dupe_factor, seed=7, cls_id=CLS, sep_id=SEP)
    if fmt == "nsp":
        build_nsp(store, documents, writer, short_seq_prob=0.1, **common)
    else:
        build_packed(store, documents, writer, **common)
    shards = writer.close()
    assert len(shards) > 1, "the test should cover several shards"
    data = InstanceShards(tmp_path, shards, MAX_LEN)
    ids, meta = data.gather(np.arange(len(data)))
    return store, ids, meta, _doc_of_token(store), shards


def _doc_of_token(store: TokenStore) -> np.ndarray:
    bounds = np.concatenate(([0], store.sentence_ends))
    doc_token_ends = bounds[np.asarray(store.document_ends)]
    return np.searchsorted(doc_token_ends, np.arange(len(store.tokens)), side="right")


def test_nsp_instances(tmp_path):
    _, ids, meta, doc_of, _ = _build(tmp_path, "nsp", dupe_factor=3)
    n = len(ids)
    assert n > 4000
    labels = meta[:, 2]
    assert set(np.unique(labels)) == {IS_NEXT, NOT_NEXT}
    is_next = (labels == IS_NEXT).mean()
    assert abs(is_next - 0.5) < 0.02, is_next
    assert (meta[:, 0] <= MAX_LEN).all() and (meta[:, 0] >= 5).all()
    short = (meta[:, 0] < MAX_LEN - 10).mean()
    assert 0.05 < short < 0.5, short  # short_seq_prob targets plus documents' ends
    for row, (length, a_length, label) in zip(ids, meta):
        assert row[0] == CLS and row[length - 1] == SEP and row[a_length - 1] == SEP
        assert (row[:length] == SEP).sum() == 2 and (row[length:] == PAD).all()
        a, b = row[1:a_length - 1] - FIRST_ID, row[a_length:length - 1] - FIRST_ID
        assert len(a) >= 1 and len(b) >= 1
        assert (np.diff(a) == 1).all() and (np.diff(b) == 1).all(), "a segment is not contiguous text"
        assert len(set(doc_of[a])) == 1 and len(set(doc_of[b])) == 1
        if label == IS_NEXT:
            assert doc_of[a[0]] == doc_of[b[0]] and b[0] > a[-1]
        else:
            assert doc_of[a[0]] != doc_of[b[0]]


def test_packed_instances_cover_every_token_once(tmp_path):
    store, ids, meta, doc_of, _ = _build(tmp_path, "packed")
    assert (meta[:, 2] == NO_LABEL).all()
    assert (meta[:, 0] <= MAX_LEN).all() and (meta[:, 1] == meta[:, 0]).all()
    seen = []
    for row, (length, _, _) in zip(ids, meta):
        assert row[0] == CLS and row[length - 1] == SEP and (row[length:] == PAD).all()
        body = row[1:length - 1]
        assert body[0] != SEP and body[-1] != SEP
        seen.append(body[body != SEP] - FIRST_ID)
        # an inner [SEP] only where a document ends
        for k in np.nonzero(body == SEP)[0]:
            assert doc_of[body[k - 1] - FIRST_ID] != doc_of[body[k + 1] - FIRST_ID]
    seen = np.sort(np.concatenate(seen))
    assert np.array_equal(seen, np.arange(len(store.tokens)))
    assert (meta[:, 0] > MAX_LEN - 25).mean() > 0.9, "packing leaves little room unused"


def _write_manifest(tmp_path, fmt, shards):
    manifest = {"version": 1, "format": fmt, "max_seq_len": MAX_LEN, "tokenizer_fingerprint": "x", "vocab_size": 99,
                "token_dtype": "uint32", "pad_id": PAD, "cls_id": CLS, "sep_id": SEP, "mask_id": 4,
                "special_ids": [0, 1, 2, 3, 4], "splits": {"train": {"shards": shards}}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("fmt", ["nsp", "packed"])
def test_dataset_batch(tmp_path, fmt):
    _, ids, meta, _, shards = _build(tmp_path, fmt)
    _write_manifest(tmp_path, fmt, shards)
    data = PretrainingDataset(tmp_path, "train")
    assert len(data) == len(ids)
    picks = np.array([len(ids) - 1, 0, 998, 13, 500])  # across shards, out of order
    batch = data.batch(picks)
    assert batch["input_ids"].shape == (5, MAX_LEN) and batch["input_ids"].dtype == torch.long
    assert np.array_equal(batch["input_ids"].numpy(), ids[picks])
    for k, i in enumerate(picks):
        length, a_length, _ = meta[i]
        assert batch["attention_mask"][k].tolist() == [1] * length + [0] * (MAX_LEN - length)
        expected_types = [0] * a_length + [1] * (length - a_length) + [0] * (MAX_LEN - length)
        assert batch["token_type_ids"][k].tolist() == expected_types
    if fmt == "nsp":
        assert batch["next_sentence_label"].tolist() == meta[picks, 2].tolist()
    else:
        assert "next_sentence_label" not in batch
        assert (batch["token_type_ids"] == 0).all()
    with pytest.raises(UserError, match="no 'val' split"):
        PretrainingDataset(tmp_path, "val")


def test_dataset_refuses_a_bad_folder(tmp_path):
    with pytest.raises(UserError, match=re.escape("no manifest.json")):
        PretrainingDataset(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        PretrainingDataset(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "nsp"}')
    with pytest.raises(UserError, match="manifest lacks"):
        PretrainingDataset(tmp_path)
