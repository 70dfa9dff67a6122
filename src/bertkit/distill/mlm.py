"""Masked-LM distillation on a prepared corpus (DistilBERT's pretraining-style distillation).

The task reads the instances `bertkit prepare` wrote (either format; NSP labels are not used:
DistilBERT dropped NSP too) and masks them as pretraining does (15%, 80/10/10), fresh masks for
every training batch and one fixed masking of the validation split, so every evaluation scores
the same positions. Training masks are drawn from torch's global generator, which the fine-tuning
loop seeds per seed and saves in each checkpoint, so a resumed distillation masks as the
uninterrupted one. Teacher and student both predict only the masked positions (the heads'
sparse path), so the soft-target KL of `distill.tasks.HeadDistill` compares the same rows.
Predictions are the student's top token per masked position; the dev score is its accuracy
against the original tokens (x100).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bertkit.config import IGNORE_INDEX
from bertkit.errors import UserError
from bertkit.finetune.task import Batch, HeadTask, Prepared, Runtime
from bertkit.heads import BertForMaskedLM


class MLMTask(HeadTask):
    name = "mlm"
    main_metric = "mlm_accuracy"
    labels = None
    prediction_suffix = ".json"
    head = BertForMaskedLM
    sparse_outputs = True  # the heads give logits at the labelled positions only

    def __init__(self, tokenizer, max_seq_len: int | None = None, mask_rate: float = 0.15):
        self.tokenizer = tokenizer
        self.max_seq_len = max_seq_len
        self.mask_rate = mask_rate
        self.masker = None

    def _read(self, path, split: str) -> list[dict]:
        from bertkit.data.manifest import check_tokenizer
        from bertkit.data.masking import Masker, MaskingConfig, continuation_table
        from bertkit.data.shards import PretrainingDataset

        check_tokenizer(path, self.tokenizer)
        data = PretrainingDataset(path, split)
        if self.max_seq_len is not None and data.max_seq_len > self.max_seq_len:
            raise UserError(f"instances of {data.max_seq_len} tokens exceed --max-seq-len {self.max_seq_len}", path)
        self.max_seq_len = data.max_seq_len
        m = data.manifest
        self.masker = Masker(MaskingConfig.from_rule("80/10/10", self.mask_rate), int(m["vocab_size"]),
                             int(m["mask_id"]), list(m["special_ids"]), continuation_table(self.tokenizer))
        batch = data.batch(np.arange(len(data)))
        lengths = batch["attention_mask"].sum(1).tolist()
        return [{"input_ids": ids[:n].tolist(), "token_type_ids": types[:n].tolist()}
                for ids, types, n in zip(batch["input_ids"], batch["token_type_ids"], lengths)]

    def read(self, path) -> list[dict]:
        return self._read(path, "train")

    def read_dev(self, path) -> list[dict]:
        return self._read(path, "val")

    def fit_labels(self, train_examples: list) -> None:
        """Masked tokens are their own labels."""

    def prepare(self, examples: list[dict], train: bool = False) -> Prepared:
        if not examples:
            raise UserError("no instances to train on")
        lengths = [len(e["input_ids"]) for e in examples]
        if train:
            return Prepared(examples, examples, lengths, has_labels=False)
        masked = self.collate(examples, torch.Generator().manual_seed(0))  # one fixed masking for every evaluation
        features = [{"input_ids": ids[:n].tolist(), "token_type_ids": types[:n].tolist(), "labels": y[:n].tolist()}
                    for ids, types, y, n in zip(masked.inputs["input_ids"], masked.inputs["token_type_ids"],
                                                masked.targets["labels"], lengths)]
        return Prepared(examples, features, lengths)

    def collate(self, features: list[dict], generator: torch.Generator | None = None) -> Batch:
        """Pad; features without labels (training) get a fresh masking from `generator`, by default
        torch's global one."""
        batch = super().collate(features)
        if "labels" not in batch.targets:
            ids, labels = self.masker(batch.inputs["input_ids"], batch.inputs["attention_mask"], generator)
            batch = Batch({**batch.inputs, "input_ids": ids}, {"labels": labels})
        return batch

    @torch.no_grad()
    def predict(self, model, data: Prepared, rt: Runtime) -> list[list[int]]:
        """Per instance, the model's top token at each masked position (in position order)."""
        model.eval()
        out: list[list[int]] = []
        for start in range(0, len(data.features), rt.eval_batch_size):
            batch = self.collate(data.features[start : start + rt.eval_batch_size]).to(rt.device)
            labels = batch.targets["labels"]
            with rt.autocast():
                top = model(**batch.inputs, labels=labels).logits.argmax(-1).tolist()  # (N,) row-major
            for count in (labels != IGNORE_INDEX).sum(1).tolist():
                out.append(top[:count])
                top = top[count:]
        return out

    def score(self, data: Prepared, predictions: list[list[int]]) -> dict:
        gold = [y for f in data.features for y in f["labels"] if y != IGNORE_INDEX]
        flat = [p for row in predictions for p in row]
        return {"mlm_accuracy": 100.0 * sum(p == y for p, y in zip(flat, gold)) / max(len(gold), 1)}

    def agreement(self, predictions: list[list[int]], teacher: list[list[int]]) -> float:
        """x100: the share of masked positions where student and teacher pick the same token."""
        pairs = [(p, t) for a, b in zip(predictions, teacher) for p, t in zip(a, b)]
        return 100.0 * sum(p == t for p, t in pairs) / max(len(pairs), 1)

    def write_predictions(self, path: Path, data: Prepared, predictions: list[list[int]]) -> None:
        from bertkit.io import write_json

        write_json(path, [self.tokenizer.convert_ids_to_tokens(row) for row in predictions])

    def settings(self) -> dict:
        return {"task": self.name, "max_seq_len": self.max_seq_len}
