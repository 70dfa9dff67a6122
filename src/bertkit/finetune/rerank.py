"""`--task rerank`: a cross-encoder trained on (query, positive, negatives) rows.

Each row becomes (query, candidate) pairs, [CLS] query [SEP] candidate [SEP], scored by a
one-label sequence classifier (the pooled [CLS] through a linear layer). Two losses:
"bce", binary cross-entropy of each pair's logit against relevant / not (the positives'
terms weighted by `pos_weight`, for rows with many negatives), and "listwise", the softmax
cross-entropy of the positive among its row's candidates. Evaluation rows need negatives: each row's
candidates are ranked by logit (a tie goes against the positive) and scored by NDCG@10 and
MRR@10. The saved directory is what `sentence_transformers.CrossEncoder(dir)` loads (its
config.json says the scores are sigmoids) and what `bertkit search --rerank` reads.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from bertkit.errors import UserError
from bertkit.finetune.task import Batch, HeadTask, Prepared, Runtime, infer
from bertkit.heads import BertForSequenceClassification

SIGMOID = "torch.nn.modules.activation.Sigmoid"  # CrossEncoder.predict's activation for one label


def _ids(n: int) -> list[str]:
    """Candidate ids for ranking ties: the positive's ("p") sorts after every negative's ("n...")."""
    return ["p", *(f"n{j:06d}" for j in range(1, n))]


class RerankTask(HeadTask):
    head = BertForSequenceClassification
    name = "rerank"
    main_metric = "ndcg@10"
    prediction_suffix = ".tsv"
    targets = ("labels", "group")

    def __init__(self, tokenizer, max_seq_len: int, loss: str | None = None, pos_weight: float | None = None):
        self.tokenizer, self.max_seq_len = tokenizer, max_seq_len
        self.loss_name = loss or "bce"
        self.pos_weight = pos_weight or 1.0

    @classmethod
    def from_settings(cls, tokenizer, settings: dict, model_dir: Path | None = None, rt=None) -> RerankTask:
        """Its own settings (`TaskKind.options`): loss, pos_weight."""
        task = cls(tokenizer, settings.get("max_seq_len") or 128, settings.get("loss"), settings.get("pos_weight"))
        task.classifier_dropout = settings.get("classifier_dropout")
        return task

    def read(self, path) -> list:
        from bertkit.data.pairs import read_pair_rows

        return read_pair_rows(path)

    def fit_labels(self, rows: list) -> None:
        if self.loss_name == "listwise" and not any(r.negatives for r in rows):
            raise UserError("--loss listwise needs rows with negatives (query, positive, negative...)")

    def config_changes(self) -> dict:
        return {"id2label": {0: "LABEL_0"}, **self.dropout_change()}

    def prepare(self, rows: list, train: bool = False) -> Prepared:
        if not rows:
            raise UserError("no rows to encode")
        if not train and not all(r.negatives for r in rows):
            raise UserError("rerank evaluation rows need negatives: the positive is ranked among them")
        queries = [r.anchor for r in rows for _ in r.texts[1:]]
        encs = self.tokenizer.encode_batch(queries, [t for r in rows for t in r.texts[1:]],
                                           max_length=self.max_seq_len)
        features, at = [], 0
        for r in rows:
            n = len(r.texts) - 1
            features.append({"pairs": [(e.ids, e.type_ids) for e in encs[at:at + n]]})
            at += n
        return Prepared(rows, features, [max(len(p[0]) for p in f["pairs"]) for f in features], True,
                        cut=sum(e.truncated for e in encs))

    def collate(self, features: list[dict]) -> Batch:
        from bertkit.data.batching import collate

        pairs = [{"input_ids": ids, "token_type_ids": types} for f in features for ids, types in f["pairs"]]
        labels = [1.0 if j == 0 else 0.0 for f in features for j in range(len(f["pairs"]))]
        group = [b for b, f in enumerate(features) for _ in f["pairs"]]
        return Batch(collate(pairs, self.tokenizer.pad_id),
                     {"labels": torch.tensor(labels), "group": torch.tensor(group)})

    def loss(self, model, batch: Batch) -> Tensor:
        logits = model(**batch.inputs).logits[:, 0].float()  # (P,) one per pair
        labels, group = batch.targets["labels"], batch.targets["group"]
        if self.loss_name == "bce":
            weight = torch.tensor(self.pos_weight, device=logits.device)
            return F.binary_cross_entropy_with_logits(logits, labels, pos_weight=weight)
        return listwise_loss(logits, group)

    def predict(self, model, data: Prepared, rt: Runtime) -> list[list[float]]:
        """Each row's candidate logits, the positive first."""
        out: list = [None] * len(data.features)
        for indices, o in infer(model, self.collate, data, rt):
            logits = o.logits[:, 0].float().tolist()
            for i in indices:
                n = len(data.features[i]["pairs"])
                out[i], logits = logits[:n], logits[n:]
        return out

    def score(self, data: Prepared, predictions: list[list[float]]) -> dict:
        from bertkit.eval.retrieval import retrieval_metrics

        rankings = {}
        for row, logits in enumerate(predictions):
            ids = _ids(len(logits))
            rankings[str(row)] = [ids[j] for j in sorted(range(len(ids)), key=lambda j: (-logits[j], ids[j]))]
        return retrieval_metrics(rankings, {row: {"p"} for row in rankings}, {"ndcg": (10,), "mrr": (10,)})

    def write_predictions(self, path: Path, data: Prepared, predictions: list[list[float]]) -> None:
        from bertkit.io import write_text

        lines = [f"{row}\t{j}\t{logit:.6f}\n"
                 for row, logits in enumerate(predictions) for j, logit in enumerate(logits)]
        write_text(path, "index\tcandidate\tlogit\n" + "".join(lines))

    def save_model(self, model, out: Path, tokenizer) -> None:
        from bertkit.io import read_json, write_json

        super().save_model(model, out, tokenizer)
        config = read_json(out / "config.json", "the saved config")
        write_json(out / "config.json", {**config, "sentence_transformers": {"activation_fn": SIGMOID}})

    def settings(self) -> dict:
        return {"task": self.name, "max_seq_len": self.max_seq_len, "loss": self.loss_name,
                "pos_weight": self.pos_weight}


def listwise_loss(logits: Tensor, group: Tensor) -> Tensor:
    """Mean over groups of -log softmax(group's logits)[its first]; logits (P,), group (P,) sorted."""
    B = int(group.max()) + 1
    counts = torch.bincount(group, minlength=B)  # (B,)
    first = torch.cumsum(counts, 0) - counts  # (B,) each group's first (positive) pair
    slot = torch.arange(len(group), device=logits.device) - first[group]  # position within its group
    table = logits.new_full((B, int(counts.max())), float("-inf"))  # (B, K)
    table[group, slot] = logits
    return F.cross_entropy(table, torch.zeros(B, dtype=torch.long, device=logits.device))
