"""Reranking: a cross-encoder reads each (query, passage) pair and scores it with one logit.

The reranker is any one-label sequence-classification directory (what `bertkit finetune --task
rerank` saves, or a sentence-transformers CrossEncoder's): [CLS] query [SEP] passage [SEP],
longest-first truncation to `max_length`, the pooled [CLS] through the classifier. The score
reported is the sigmoid of the logit, as `sentence_transformers.CrossEncoder.predict` gives for
one label; the order is the logit's.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from bertkit.errors import UserError


class Reranker:
    """A loaded one-label cross-encoder."""

    def __init__(self, model_dir: str | os.PathLike, batch_size: int = 32, max_length: int = 512,
                 device: str | torch.device = "cpu"):
        from bertkit.heads import BertForSequenceClassification
        from bertkit.hf import load_config
        from bertkit.tokenizer import Tokenizer

        model_dir = Path(model_dir)
        if load_config(model_dir).num_labels != 1:
            raise UserError("a reranker has one output (num_labels 1); this is a classifier of "
                            f"{load_config(model_dir).num_labels} labels", model_dir / "config.json")
        model = BertForSequenceClassification.from_pretrained(model_dir)
        if model.load_report.get("initialized"):
            raise UserError("no trained one-label classifier head: train a reranker first "
                            "(`bertkit finetune --task rerank`)", model_dir)
        self.model = model.eval().to(device)
        self.tokenizer = Tokenizer.from_pretrained(model_dir)
        self.max_length = min(max_length, model.config.max_tokens)
        self.batch_size, self.device = batch_size, device

    @torch.inference_mode()
    def logits(self, query: str, passages: list[str]) -> np.ndarray:
        """One float32 logit per passage (higher: more relevant)."""
        from bertkit.data.batching import pad_rows

        encodings = self.tokenizer.encode_batch([query] * len(passages), pairs=list(passages),
                                                max_length=self.max_length, truncation=True)
        out = np.zeros(len(encodings), dtype=np.float32)
        for start in range(0, len(encodings), self.batch_size):
            batch = encodings[start:start + self.batch_size]
            ids = pad_rows([e.ids for e in batch], self.tokenizer.pad_id).to(self.device)  # (B, T)
            types = pad_rows([e.type_ids for e in batch], 0).to(self.device)  # (B, T)
            mask = pad_rows([e.attention_mask for e in batch], 0).to(self.device)  # (B, T)
            logits = self.model(ids, attention_mask=mask, token_type_ids=types).logits  # (B, 1)
            out[start:start + len(batch)] = logits[:, 0].float().cpu().numpy()
        return out

    def rerank(self, query: str, hits: list[dict]) -> list[dict]:
        """`hits` ({"id", "text", "score", ...}) reordered by the cross-encoder, with its score
        as "rerank_score" and the first-stage score kept; ties keep the first-stage order."""
        if not hits:
            return []
        logits = self.logits(query, [h["text"] for h in hits])
        order = sorted(range(len(hits)), key=lambda i: -logits[i])
        probabilities = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
        return [{**hits[i], "rank": rank, "rerank_score": float(probabilities[i])}
                for rank, i in enumerate(order, start=1)]
