"""What the model predicts: masked tokens (+ next sentence), or the next token (LTR ablation).

`Objective.prepare` turns a batch of the prepared data into model inputs and labels, masking
with a generator seeded from (seed, step, micro-step) so a resumed run, or a run on more
processes, masks every sequence identically. `loss_sums` returns summed (not averaged) losses
so the loop can divide by the token and sequence counts of the whole global batch: the
gradient is then that of the global mean, whatever the number of processes or micro-steps.
`evaluate` scores a fixed validation subset with fixed masking.

Shape legend: B batch, T tokens, N labelled positions.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from bertkit.config import IGNORE_INDEX


def derived_seed(*parts: int) -> int:
    """A 63-bit seed mixed from integers (a run's seed, the step, a micro-step, a tag)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, np.uint64)[0] >> 1)


def next_token_labels(input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """labels[t] = input_ids[t+1] where both t and t+1 are real tokens, else IGNORE_INDEX. (B, T)"""
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    both = attention_mask[:, :-1].bool() & attention_mask[:, 1:].bool()  # (B, T-1)
    labels[:, :-1] = torch.where(both, input_ids[:, 1:], IGNORE_INDEX)
    return labels


class Objective:
    """One of OBJECTIVES (bertkit.pretrain.setup), with the masker it needs (none for "ltr")."""

    def __init__(self, name: str, masker=None, seed: int = 0):
        self.name = name
        self.masker = masker
        self.seed = seed

    @property
    def nsp(self) -> bool:
        return self.name == "mlm+nsp"

    def prepare(self, batch: dict, device: torch.device, *seed_parts: int) -> dict[str, Tensor | None]:
        """Model inputs and labels for a whole micro-batch (before any split across ranks)."""
        ids = torch.as_tensor(batch["input_ids"]).long().to(device, non_blocking=True)
        cpu_mask = torch.as_tensor(batch["attention_mask"]).long()
        mask = cpu_mask.to(device, non_blocking=True)
        types = torch.as_tensor(batch["token_type_ids"]).long().to(device, non_blocking=True)
        if self.name == "ltr":
            labels = next_token_labels(ids, mask)
        else:
            generator = torch.Generator(device=device)
            generator.manual_seed(derived_seed(self.seed, *seed_parts))
            ids, labels = self.masker(ids, mask, generator)
        # Checked on the CPU copy (no device sync): with no padding the mask is dropped, which
        # lets SDPA pick its fastest kernel and changes no number.
        full = bool(cpu_mask.all())
        out = {"input_ids": ids, "attention_mask": None if full else mask, "token_type_ids": types,
               "labels": labels}
        if self.nsp:
            out["next_sentence_label"] = torch.as_tensor(batch["next_sentence_label"]).long().to(device)
        return out

    def loss_sums(self, model, inputs: dict[str, Tensor], accuracy: bool = False) -> dict[str, Tensor]:
        """Summed token loss and (with NSP) summed NSP loss, as the head computes them; with
        `accuracy` (validation only: a training step logs no accuracy), also the correct tokens
        and rows."""
        nsp = {"next_sentence_label": inputs["next_sentence_label"]} if self.nsp else {}
        out = model(inputs["input_ids"], attention_mask=inputs["attention_mask"],
                    token_type_ids=inputs["token_type_ids"], labels=inputs["labels"], reduction="sum", **nsp)
        sums = {"token_loss": out.mlm_loss if self.nsp else out.loss}
        if self.nsp:
            sums["nsp_loss"] = out.nsp_loss
        if accuracy:
            y = inputs["labels"].reshape(-1)
            y = y[y != IGNORE_INDEX]  # (N,), the row-major order of the head's (N, V) logits
            sums["token_correct"] = (out.logits.argmax(-1) == y).sum()
            if self.nsp:
                target = nsp["next_sentence_label"].reshape(-1)
                sums["nsp_correct"] = (out.seq_relationship_logits.argmax(-1) == target).sum()
        return sums


def slice_rows(inputs: dict[str, Tensor | None], rows: slice) -> dict[str, Tensor | None]:
    return {k: None if v is None else v[rows] for k, v in inputs.items()}


@torch.no_grad()
def evaluate(model, objective: Objective, dataset, device: torch.device, samples: int, batch_size: int,
             autocast) -> dict[str, float]:
    """Loss and accuracy on the first `samples` validation sequences, masked with fixed seeds."""
    was_training = model.training
    model.eval()
    n = min(samples, len(dataset))
    totals: dict[str, Tensor] = {}
    tokens = torch.zeros((), device=device)
    for number, start in enumerate(range(0, n, batch_size)):
        batch = dataset.batch(np.arange(start, min(start + batch_size, n)))
        inputs = objective.prepare(batch, device, 1 << 40, number)  # a step no training run reaches
        with autocast():
            sums = objective.loss_sums(model, inputs, accuracy=True)
        tokens += (inputs["labels"] != IGNORE_INDEX).sum()
        for k, v in sums.items():
            totals[k] = totals.get(k, 0) + v.float()
    model.train(was_training)
    if n == 0:
        return {}
    t = tokens.clamp(min=1)
    token_loss, token_acc = (totals["token_loss"] / t).item(), (totals["token_correct"] / t).item()
    prefix = "next_token" if objective.name == "ltr" else "mlm"
    metrics = {"loss": token_loss, f"{prefix}_loss": token_loss, f"{prefix}_accuracy": token_acc}
    if objective.nsp:
        metrics["nsp_loss"] = totals["nsp_loss"].item() / n
        metrics["nsp_accuracy"] = totals["nsp_correct"].item() / n
        metrics["loss"] = token_loss + metrics["nsp_loss"]
    return metrics
