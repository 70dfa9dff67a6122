"""What the model predicts: masked tokens (+ next sentence), the next token (LTR ablation), or
which tokens a generator replaced (ELECTRA's replaced-token detection, `ElectraObjective`).

`Objective.prepare` turns a batch of the prepared data into model inputs and labels, masking
with a generator seeded from (seed, step, micro-step) so a resumed run, or a run on more
processes, masks every sequence identically. `loss_sums` returns summed (not averaged) losses
so the loop can divide each by its count over the whole global batch (`counts`: labelled tokens,
sequences, real tokens): the gradient is then that of the global mean, whatever the number of
processes or micro-steps; `losses` names each and gives its weight in the training loss.
`evaluate` scores a fixed validation subset with fixed masking; `metrics` turns sums and counts
into what the run reports.

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

    train_accuracy = False  # whether a training step counts accuracies too, for the status line

    def __init__(self, name: str, masker=None, seed: int = 0):
        self.name = name
        self.masker = masker
        self.seed = seed

    @property
    def pair(self) -> str | None:
        """The sentence-pair task beside masked LM: "nsp" (BERT), "sop" (ALBERT's sentence order), or None."""
        return {"mlm+nsp": "nsp", "mlm+sop": "sop"}.get(self.name)

    @property
    def nsp(self) -> bool:
        """A pair task on the pooled [CLS] (next sentence or sentence order): the head is the same."""
        return self.pair is not None

    @property
    def losses(self) -> dict[str, tuple[str, float]]:
        """Each summed loss of `loss_sums` -> (its name in the metrics, its weight in the loss)."""
        token = ("next_token_loss" if self.name == "ltr" else "mlm_loss", 1.0)
        return {"token_loss": token, "nsp_loss": (f"{self.pair}_loss", 1.0)} if self.nsp else {"token_loss": token}

    @property
    def accuracies(self) -> dict[str, tuple[str, ...]]:
        """The accuracies `loss_sums(accuracy=True)` counts beside each loss, as "{name}_correct"
        out of "{name}_seen"; reported as "{name}_accuracy"."""
        token = ("next_token",) if self.name == "ltr" else ("mlm",)
        return {"token_loss": token, "nsp_loss": (self.pair,)} if self.nsp else {"token_loss": token}

    @property
    def logged(self) -> tuple[str, ...]:
        """What a training step adds up for the status line: each loss's mean, then the accuracy
        counts when `train_accuracy`."""
        counted = [f"{name}_{part}" for names in self.accuracies.values() for name in names
                   for part in ("correct", "seen")]
        return (*self.losses, *(counted if self.train_accuracy else ()))

    def counts(self, inputs: dict[str, Tensor | None]) -> dict[str, Tensor]:
        """What each summed loss is divided by, over these inputs: labelled tokens, sequences."""
        counts = {"token_loss": (inputs["labels"] != IGNORE_INDEX).sum()}
        if self.nsp:
            counts["nsp_loss"] = torch.tensor(len(inputs["input_ids"]), device=inputs["input_ids"].device)
        return counts

    def prepare(self, batch: dict, device: torch.device, *seed_parts: int) -> dict[str, Tensor | None]:
        """Model inputs and labels for a whole micro-batch (before any split across ranks)."""
        ids = torch.as_tensor(batch["input_ids"]).long().to(device, non_blocking=True)
        cpu_mask = torch.as_tensor(batch["attention_mask"]).long()
        mask = cpu_mask.to(device, non_blocking=True)
        types = torch.as_tensor(batch["token_type_ids"]).long().to(device, non_blocking=True)
        if self.name == "ltr":
            labels = next_token_labels(ids, mask)
        else:
            ids, labels = self.masker(ids, mask, _generator(device, self.seed, *seed_parts))
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
        `accuracy` (validation, or `train_accuracy`), also the correct and counted tokens and rows."""
        nsp = {"next_sentence_label": inputs["next_sentence_label"]} if self.nsp else {}
        out = model(inputs["input_ids"], attention_mask=inputs["attention_mask"],
                    token_type_ids=inputs["token_type_ids"], labels=inputs["labels"], reduction="sum", **nsp)
        sums = {"token_loss": out.mlm_loss if self.nsp else out.loss}
        if self.nsp:
            sums["nsp_loss"] = out.nsp_loss
        if accuracy:
            (token,) = self.accuracies["token_loss"]
            sums |= _counted(token, out.logits.argmax(-1) == _labelled(inputs["labels"]))
            if self.nsp:
                target = nsp["next_sentence_label"].reshape(-1)
                sums |= _counted(self.pair, out.seq_relationship_logits.argmax(-1) == target)
        return sums

    def metrics(self, sums: dict[str, float], counts: dict[str, float]) -> dict[str, float]:
        """"loss" (the weighted total), then each loss's mean followed by its accuracies, from the
        summed losses and accuracy counts and each loss's count."""
        means = {k: sums[k] / max(counts[k], 1) for k in self.losses}
        out = {"loss": sum(weight * means[k] for k, (_, weight) in self.losses.items())}
        for k, (name, _) in self.losses.items():
            out[name] = means[k]
            for acc in self.accuracies.get(k, ()):
                if f"{acc}_correct" in sums:
                    out[f"{acc}_accuracy"] = sums[f"{acc}_correct"] / max(sums[f"{acc}_seen"], 1)
        return out


class ElectraObjective(Objective):
    """Replaced-token detection (`bertkit.electra.ElectraPretraining`): the masked batch and one
    uniform per position (the generator's sampling draw, from its own seeded generator); the
    generator's MLM loss over the masked tokens plus `rtd_weight` times the discriminator's BCE
    over every real token. A training step counts its accuracies too: the total loss alone says
    little while the generator improves and the discriminator's task grows harder."""

    train_accuracy = True

    def __init__(self, masker, seed: int, rtd_weight: float):
        super().__init__("electra", masker, seed)
        self.rtd_weight = rtd_weight

    @property
    def losses(self) -> dict[str, tuple[str, float]]:
        return {"token_loss": ("mlm_loss", 1.0), "rtd_loss": ("rtd_loss", self.rtd_weight)}

    @property
    def accuracies(self) -> dict[str, tuple[str, ...]]:
        """The generator's at the masked tokens; the discriminator's at replaced and at original tokens."""
        return {"token_loss": ("mlm",), "rtd_loss": ("replaced", "original")}

    def counts(self, inputs: dict[str, Tensor | None]) -> dict[str, Tensor]:
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        real = mask.sum() if mask is not None else torch.tensor(ids.numel(), device=ids.device)
        return {"token_loss": (inputs["labels"] != IGNORE_INDEX).sum(), "rtd_loss": real}

    def prepare(self, batch: dict, device: torch.device, *seed_parts: int) -> dict[str, Tensor | None]:
        out = super().prepare(batch, device, *seed_parts)
        # Drawn for every position, whatever was masked: the draw depends only on the step.
        out["uniforms"] = torch.rand(out["input_ids"].shape, generator=_generator(device, self.seed, *seed_parts, 2),
                                     device=device)
        return out

    def loss_sums(self, model, inputs: dict[str, Tensor], accuracy: bool = False) -> dict[str, Tensor]:
        mask = inputs["attention_mask"]
        out = model(inputs["input_ids"], attention_mask=mask, token_type_ids=inputs["token_type_ids"],
                    labels=inputs["labels"], uniforms=inputs["uniforms"], reduction="sum")
        sums = {"token_loss": out.mlm_loss, "rtd_loss": out.rtd_loss}
        if accuracy:
            real = mask.bool() if mask is not None else torch.ones_like(out.replaced, dtype=torch.bool)
            replaced, guessed = out.replaced.bool(), out.rtd_logits > 0
            sums |= _counted("mlm", out.mlm_logits.argmax(-1) == _labelled(inputs["labels"]))
            sums |= _counted("replaced", guessed, replaced & real)
            sums |= _counted("original", ~guessed, ~replaced & real)
            if not model.training:  # validation: the discriminator's scores, for the ROC AUC
                p = out.rtd_logits.detach().float().sigmoid()
                sums["auc_replaced"] = _histogram(p[replaced & real])
                sums["auc_original"] = _histogram(p[~replaced & real])
        return sums

    def metrics(self, sums: dict, counts: dict) -> dict[str, float]:
        """As `Objective.metrics`, and at validation the replaced-token ROC AUC: how well the
        discriminator's scores rank replaced above original tokens (0.5 is chance), the measure
        an lr is chosen by (a collapsed discriminator can have high accuracy at originals)."""
        out = super().metrics(sums, counts)
        if "auc_replaced" in sums:
            out["rtd_auc"] = roc_auc(sums["auc_replaced"], sums["auc_original"])
        return out


AUC_BINS = 2048  # the ROC AUC from score histograms: exact up to ties within 1/2048 of probability


def _histogram(p: Tensor) -> Tensor:
    """(AUC_BINS,) counts of probabilities in [0, 1]."""
    return torch.histc(p, bins=AUC_BINS, min=0.0, max=1.0)


def roc_auc(positive, negative) -> float:
    """ROC AUC from two histograms over the same bins: P(a positive scores above a negative),
    ties (the same bin) counted half; 0.5 when either class is empty."""
    pos, neg = np.asarray(positive, dtype=np.float64), np.asarray(negative, dtype=np.float64)
    if pos.sum() == 0 or neg.sum() == 0:
        return 0.5
    below = np.cumsum(neg) - neg  # negatives in lower bins
    return float((pos * (below + 0.5 * neg)).sum() / (pos.sum() * neg.sum()))


def _generator(device: torch.device, *seed_parts: int) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed(derived_seed(*seed_parts))
    return generator


def _labelled(labels: Tensor) -> Tensor:
    """The labels at the labelled positions, (N,), in the row-major order of a head's (N, V) logits."""
    y = labels.reshape(-1)
    return y[y != IGNORE_INDEX]


def _counted(name: str, correct: Tensor, where: Tensor | None = None) -> dict[str, Tensor]:
    """{"{name}_correct", "{name}_seen"}: how many of the positions `where` selects (all: None) are correct."""
    if where is None:
        return {f"{name}_correct": correct.sum(), f"{name}_seen": torch.tensor(correct.numel(), device=correct.device)}
    return {f"{name}_correct": (correct & where).sum(), f"{name}_seen": where.sum()}


def slice_rows(inputs: dict[str, Tensor | None], rows: slice) -> dict[str, Tensor | None]:
    return {k: None if v is None else v[rows] for k, v in inputs.items()}


@torch.no_grad()
def evaluate(model, objective: Objective, dataset, device: torch.device, samples: int, batch_size: int,
             autocast) -> dict[str, float]:
    """Loss and accuracy on the first `samples` validation sequences, masked with fixed seeds."""
    was_training = model.training
    model.eval()
    n = min(samples, len(dataset))
    sums: dict[str, Tensor] = {}
    counts: dict[str, Tensor] = {}
    for number, start in enumerate(range(0, n, batch_size)):
        batch = dataset.batch(np.arange(start, min(start + batch_size, n)))
        inputs = objective.prepare(batch, device, 1 << 40, number)  # a step no training run reaches
        with autocast():
            batch_sums = objective.loss_sums(model, inputs, accuracy=True)
        for totals, values in ((sums, batch_sums), (counts, objective.counts(inputs))):
            for k, v in values.items():
                totals[k] = totals.get(k, 0) + v.float()
    model.train(was_training)
    if n == 0:
        return {}
    return objective.metrics({k: v.item() if v.numel() == 1 else v.tolist() for k, v in sums.items()},
                             {k: v.item() for k, v in counts.items()})
