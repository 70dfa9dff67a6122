"""Masked-LM corruption: rates, the 80/10/10 split, specials, whole words, determinism."""

from __future__ import annotations

import pytest
import torch

from bertkit.data.masking import IGNORE_INDEX, Masker, MaskingConfig, continuation_table
from bertkit.tokenizer import Tokenizer

VOCAB = 99
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIALS = [PAD, UNK, CLS, SEP, MASK]
FIRST_PIECE = 60  # ids >= 60 are "##" continuation pieces in these tests


def _continuation() -> torch.Tensor:
    table = torch.zeros(VOCAB, dtype=torch.bool)
    table[FIRST_PIECE:] = True
    return table


def _batch(rows: int = 1097, length: int = 131, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] text [SEP] text [SEP] [PAD]...: ~100k maskable tokens of mixed word lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (rows, length), generator=g)
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=g)
    positions = torch.arange(length)[None, :]
    attention = (positions < lengths[:, None]).long()
    ids[:, 0] = CLS
    ids[torch.arange(rows), lengths - 1] = SEP
    ids[:, length // 3] = SEP
    ids[:, length // 7] = UNK
    ids = torch.where(attention.bool(), ids, torch.full_like(ids, PAD))
    return ids, attention


def _masker(**kw) -> Masker:
    return Masker(MaskingConfig(**kw), VOCAB, MASK, SPECIALS, _continuation())


def _maskable(ids, attention):
    special = torch.zeros(VOCAB, dtype=torch.bool)
    special[SPECIALS] = True
    return attention.bool() & ~special[ids]


@pytest.mark.parametrize("whole_word", [False, True])
def test_rate_split_and_specials(whole_word):
    ids, attention = _batch()
    original = ids.clone()
    masked, labels = _masker(whole_word=whole_word)(ids, attention, torch.Generator().manual_seed(1))
    assert torch.equal(ids, original), "input was modified"
    maskable = _maskable(ids, attention)
    chosen = labels != IGNORE_INDEX
    assert maskable.sum() > 100_000
    rate = chosen.sum().item() / maskable.sum().item()
    assert abs(rate - 0.15) < 0.01, rate
    assert not (chosen & ~maskable).any(), "a special token or padding was chosen"
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(masked[~chosen], ids[~chosen]), "an unchosen token changed"

    n = chosen.sum().item()
    to_mask = (masked == MASK) & chosen
    replaced = chosen & (masked != MASK) & (masked != ids)
    kept = chosen & (masked == ids)
    # a random replacement equals the original with chance 1/94, and then counts as kept
    assert abs(to_mask.sum().item() / n - 0.8) < 0.02
    assert abs(replaced.sum().item() / n - 0.1 * 93 / 94) < 0.02
    assert abs(kept.sum().item() / n - (0.1 + 0.1 / 94)) < 0.02
    special = torch.tensor(SPECIALS)
    assert not torch.isin(masked[chosen & (masked != MASK)], special).any(), "a special token was inserted"


def test_exact_count_per_sequence():
    ids, attention = _batch(rows=13, length=37)
    _, labels = _masker()(ids, attention, torch.Generator().manual_seed(3))
    n = _maskable(ids, attention).sum(dim=1)
    expected = torch.round(n.double() * 0.15).long().clamp(min=1)
    assert torch.equal((labels != IGNORE_INDEX).sum(dim=1), expected)


def test_at_least_one_and_none_without_text():
    ids = torch.tensor([[CLS, 7, SEP, PAD], [CLS, SEP, PAD, PAD]])
    attention = (ids != PAD).long()
    _, labels = _masker()(ids, attention, torch.Generator().manual_seed(0))
    assert labels[0].tolist() == [IGNORE_INDEX, 7, IGNORE_INDEX, IGNORE_INDEX]
    assert (labels[1] == IGNORE_INDEX).all()


def test_whole_word_never_splits_a_word():
    ids, attention = _batch(rows=211, length=61, seed=5)
    _, labels = _masker(whole_word=True)(ids, attention, torch.Generator().manual_seed(2))
    chosen = (labels != IGNORE_INDEX).tolist()
    maskable = _maskable(ids, attention).tolist()
    words_seen = multi_piece_chosen = 0
    for row_ids, row_maskable, row_chosen in zip(ids.tolist(), maskable, chosen):
        words, current = [], []
        for t, (token, ok) in enumerate(zip(row_ids, row_maskable)):
            if ok and token >= FIRST_PIECE and current:
                current.append(t)
                continue
            if current:
                words.append(current)
            current = [t] if ok else []
        if current:
            words.append(current)
        for word in words:
            states = {row_chosen[t] for t in word}
            assert len(states) == 1, f"word {word} split: {[row_chosen[t] for t in word]}"
            words_seen += 1
            multi_piece_chosen += len(word) > 1 and row_chosen[word[0]]
    assert words_seen > 1000 and multi_piece_chosen > 100


def test_deterministic_given_generator():
    ids, attention = _batch(rows=13, length=7 * 11)
    for whole_word in (False, True):
        masker = _masker(whole_word=whole_word)
        a = masker(ids, attention, torch.Generator().manual_seed(42))
        b = masker(ids, attention, torch.Generator().manual_seed(42))
        c = masker(ids, attention, torch.Generator().manual_seed(43))
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert not torch.equal(a[1], c[1])


def test_all_mask_variant():
    ids, attention = _batch(rows=101, length=53)
    masked, labels = _masker(mask_prob=1.0, random_prob=0.0)(ids, attention, torch.Generator().manual_seed(0))
    chosen = labels != IGNORE_INDEX
    assert chosen.any()
    assert (masked[chosen] == MASK).all()
    assert torch.equal(masked[~chosen], ids[~chosen])


def test_config_checks_and_continuation_table():
    with pytest.raises(ValueError, match="sum to at most 1"):
        MaskingConfig(mask_prob=0.9, random_prob=0.2)
    with pytest.raises(ValueError, match="rate"):
        MaskingConfig(rate=0.0)
    with pytest.raises(ValueError, match="continuation"):
        Masker(MaskingConfig(whole_word=True), VOCAB, MASK, SPECIALS, None)
    assert MaskingConfig().keep_prob == pytest.approx(0.1)
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "play", "##ing", "##s", "a"])}
    table = continuation_table(Tokenizer(vocab))
    assert table.tolist() == [False] * 6 + [True, True, False]
