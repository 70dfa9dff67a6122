"""Masked-LM input corruption, done on the fly on the training device (dynamic masking).

BERT chooses 15% of the tokens of each sequence, replaces 80% of the chosen with [MASK], 10% with
a random token and keeps 10%, and predicts the original token at every chosen position.

Choices, where the paper leaves room:
- Exact count per sequence, as Google's create_pretraining_data: round(n * rate) of the n
  maskable tokens (at least one when n > 0; torch rounds halves to even), picked uniformly
  without replacement. Special tokens and padding are never maskable.
- Unlike Google, masking happens at training time on every batch (RoBERTa's dynamic masking),
  so each epoch sees fresh masks; the data on disk is never masked.
- The 80/10/10 split is drawn per chosen token; random replacements are uniform over the
  non-special ids, so a [CLS]/[SEP]/[PAD]/[MASK] is never inserted.
- Whole-word masking chooses words (a token that is not a "##" piece plus the "##" pieces after
  it) in random order and keeps taking them while that brings the masked-token count closer to
  round(n * rate); every piece of a chosen word is chosen, so a word is never split.
- Every random draw has a fixed shape whatever the content, so the result depends only on the
  generator's state: runs are exactly reproducible, on CPU or GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bertkit.config import IGNORE_INDEX  # the label of unchosen positions


@dataclass(frozen=True)
class MaskingConfig:
    rate: float = 0.15  # fraction of the maskable tokens of each sequence that are predicted
    mask_prob: float = 0.8  # of the chosen: fraction replaced by [MASK]
    random_prob: float = 0.1  # of the chosen: fraction replaced by a random token (rest kept)
    whole_word: bool = False  # choose whole words ("##" pieces with their head), not pieces

    def __post_init__(self):
        if not 0.0 < self.rate <= 1.0:
            raise ValueError(f"masking rate must be in (0, 1], got {self.rate}")
        if self.mask_prob < 0 or self.random_prob < 0 or self.mask_prob + self.random_prob > 1.0 + 1e-9:
            raise ValueError(
                f"mask_prob ({self.mask_prob}) and random_prob ({self.random_prob}) must be >= 0 "
                "and sum to at most 1 (the rest is kept unchanged)"
            )

    @property
    def keep_prob(self) -> float:
        return 1.0 - self.mask_prob - self.random_prob

    @classmethod
    def from_rule(cls, rule: str = "80/10/10", rate: float = 0.15, whole_word: bool = False) -> MaskingConfig:
        """A rule as the paper's Table 8 writes it: percent [MASK] / random / kept, e.g. "80/10/10".
        The one parser of a rule (`bertkit pretrain --mask-rule` and TrainConfig call it)."""
        try:
            parts = [float(p) for p in rule.split("/")]
        except ValueError:
            parts = []
        if len(parts) != 3 or not all(p >= 0 for p in parts) or not abs(sum(parts) - 100) <= 1e-6:  # NaN fails
            raise ValueError(f"expected three percentages MASK/RANDOM/KEEP summing to 100 such as 80/10/10, "
                             f"not {rule!r}")
        mask, random_, _ = parts
        return cls(rate=rate, mask_prob=mask / 100, random_prob=random_ / 100, whole_word=whole_word)

    @property
    def rule(self) -> str:
        """This config's MASK/RANDOM/KEEP percentages, e.g. "80/10/10"."""
        return "/".join(f"{100 * p:g}" for p in (self.mask_prob, self.random_prob, self.keep_prob))


def continuation_table(tokenizer) -> torch.Tensor:
    """Bool (vocab_size,): True for the tokens that continue a word, for whole-word masking:
    `tokenizer.continues_word` (WordPiece "##x"; byte-level BPE and SentencePiece pieces without
    their word-start mark Ġ or ▁; never a special token)."""
    table = torch.zeros(len(tokenizer.vocab), dtype=torch.bool)
    for token, i in tokenizer.vocab.items():
        if tokenizer.continues_word(token):
            table[i] = True
    return table


class Masker:
    """Callable that masks a batch: `masked_ids, labels = masker(input_ids, attention_mask, generator)`."""

    def __init__(self, config: MaskingConfig, vocab_size: int, mask_id: int, special_ids: list[int],
                 continuation: torch.Tensor | None = None):
        if config.whole_word and continuation is None:
            raise ValueError("whole-word masking needs the continuation table (continuation_table(tokenizer))")
        self.config = config
        self.vocab_size = vocab_size
        self.mask_id = mask_id
        special = torch.zeros(vocab_size, dtype=torch.bool)
        special[torch.tensor(sorted(set(special_ids) | {mask_id}), dtype=torch.long)] = True
        self._special = special
        self._replacements = torch.nonzero(~special).flatten()  # ids a random replacement may take
        if len(self._replacements) == 0:
            raise ValueError("the vocabulary has no non-special token to use as a random replacement")
        self._continuation = continuation.to(torch.bool) if continuation is not None else None
        self._device_tables: dict[torch.device, tuple] = {}

    def _tables(self, device: torch.device):
        """The lookup tables on `device`, moved once and cached."""
        if device not in self._device_tables:
            cont = self._continuation.to(device) if self._continuation is not None else None
            self._device_tables[device] = (self._special.to(device), self._replacements.to(device), cont)
        return self._device_tables[device]

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        special, replacements, continuation = self._tables(input_ids.device)
        maskable = attention_mask.bool() & ~special[input_ids]  # (B, T)
        n_maskable = maskable.sum(dim=1)  # (B,)
        target = torch.round(n_maskable.double() * self.config.rate).long().clamp(min=1)
        target = torch.minimum(target, n_maskable)
        if self.config.whole_word:
            chosen = _choose_words(input_ids, maskable, target, continuation, generator)
        else:
            chosen = _choose_tokens(maskable, target, generator)

        u = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
        random_idx = torch.randint(len(replacements), input_ids.shape, generator=generator, device=input_ids.device)
        to_mask = chosen & (u < self.config.mask_prob)
        to_random = chosen & (u >= self.config.mask_prob) & (u < self.config.mask_prob + self.config.random_prob)
        masked = torch.where(to_mask, torch.full_like(input_ids, self.mask_id), input_ids)
        masked = torch.where(to_random, replacements[random_idx], masked)
        labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
        return masked, labels


def _rank_of_random_order(eligible: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A uniformly random order of the eligible positions of each row: (order, rank).

    order[b, k] is the position at rank k; ineligible positions sort last.
    """
    scores = torch.rand(eligible.shape, generator=generator, device=eligible.device)
    scores = torch.where(eligible, scores, torch.full_like(scores, 2.0))
    order = scores.argsort(dim=1)
    rank = order.argsort(dim=1)
    return order, rank


def _choose_tokens(maskable: torch.Tensor, target: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Exactly target[b] maskable positions of row b, uniformly without replacement."""
    _, rank = _rank_of_random_order(maskable, generator)
    return maskable & (rank < target[:, None])


def _choose_words(input_ids: torch.Tensor, maskable: torch.Tensor, target: torch.Tensor,
                  continuation: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Whole words in random order, while each brings the token count closer to target[b]."""
    B, T = input_ids.shape
    # a word starts at a maskable non-"##" token, or at a "##" piece whose head is not maskable
    previous_maskable = torch.nn.functional.pad(maskable[:, :-1], (1, 0), value=False)
    starts = maskable & (~continuation[input_ids] | ~previous_maskable)
    word_of = starts.long().cumsum(dim=1) - 1  # (B, T): word index of each token within its row
    word_of = torch.where(maskable, word_of, torch.zeros_like(word_of))
    word_len = torch.zeros(B, T, dtype=torch.long, device=input_ids.device)
    word_len.scatter_add_(1, word_of, maskable.long())  # (B, T): tokens in word w (0: no such word)

    order, _ = _rank_of_random_order(word_len > 0, generator)
    len_in_order = word_len.gather(1, order)  # (B, T)
    after = len_in_order.cumsum(dim=1)
    before = after - len_in_order
    # take the word if we are still short and taking it lands nearer the target than stopping
    take = (len_in_order > 0) & (before < target[:, None]) & (after - target[:, None] <= target[:, None] - before)
    take[:, 0] |= len_in_order[:, 0] > 0  # at least one word when any exists
    chosen_word = torch.zeros(B, T, dtype=torch.bool, device=input_ids.device)
    chosen_word.scatter_(1, order, take)
    return maskable & chosen_word.gather(1, word_of)
