"""Distillation as fine-tuning tasks: the fine-tuning loop trains the student unchanged.

The loop (`bertkit.finetune.loop`) trains through a task's `loss`; a distillation task is a task
whose loss also runs the frozen teacher on the same batch and adds the terms of
`bertkit.distill.losses`. Two kinds:

- `HeadDistill` wraps any fine-tuning task whose model is one of bertkit's heads (a sequence
  classifier or regressor from `finetune.registry`, the MLM task in `distill.mlm`): reading,
  encoding, predicting, scoring and saving are the wrapped task's, so the student is saved,
  evaluated and reloaded exactly like a fine-tuned model. Its dev scores gain `teacher_agreement`,
  the share of dev predictions equal to the teacher's, or for regression their correlation
  (`HeadTask.agreement`: how much of the gap is left);
- `EmbeddingDistill` trains a bare encoder whose pooled sentence vectors (`--pooling`) match the
  teacher's (MSE), scored on sentence pairs (STS-B) as `bertkit evaluate --zero-shot` does.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from bertkit.distill.losses import (
    DistillWeights,
    hidden_cosine,
    soft_target_kl,
    vector_mse,
)
from bertkit.finetune.task import Batch, HeadTask, Prepared, Runtime, TaskBase, agreement


class HeadDistill:
    """A head task (`inner`) whose loss is DistilBERT's: soft targets + hard labels + cosine.

    Every attribute but `loss`, `score` and `settings` is the inner task's."""

    def __init__(self, inner: HeadTask, teacher: nn.Module, weights: DistillWeights, rt: Runtime, cosine: bool):
        self.inner = inner
        self.teacher = teacher.to(rt.device).eval().requires_grad_(False)
        self.weights = weights
        self.cosine = cosine and weights.cosine > 0  # only for a student as wide as the teacher
        self.regression = inner.regression
        self.reference: tuple[Prepared, list] | None = None  # (dev data, the teacher's predictions)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def remember_teacher(self, dev: Prepared, rt: Runtime) -> dict:
        """The teacher's dev predictions (for teacher_agreement) and its dev scores."""
        predictions = self.inner.predict(self.teacher, dev, rt)
        self.reference = (dev, predictions)
        return self.inner.score(dev, predictions)

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        w = self.weights
        with torch.no_grad():
            t = self.teacher(**batch.inputs, **self._teacher_targets(batch), output_hidden_states=self.cosine)
        s = model(**batch.inputs, **batch.targets, output_hidden_states=self.cosine)
        total = s.logits.new_zeros((), dtype=torch.float32)
        if w.hard:
            total = total + w.hard * s.loss
        if w.soft:
            soft = (torch.nn.functional.mse_loss(s.logits.float(), t.logits.float()) if self.regression
                    else soft_target_kl(s.logits, t.logits, w.temperature))
            total = total + w.soft * soft
        if self.cosine:
            total = total + w.cosine * hidden_cosine(s.hidden_states[-1], t.hidden_states[-1],
                                                     batch.inputs.get("attention_mask"))
        return total

    def _teacher_targets(self, batch: Batch) -> dict:
        """MLM heads take the labels to pick their output rows (so both give logits at the same
        positions); a classifier's teacher needs none."""
        return {"labels": batch.targets["labels"]} if self.inner.sparse_outputs else {}

    def score(self, data: Prepared, predictions) -> dict:
        metrics = self.inner.score(data, predictions)
        if self.reference is not None and self.reference[0] is data:
            metrics["teacher_agreement"] = self.inner.agreement(predictions, self.reference[1])
        return metrics

    def settings(self) -> dict:
        return self.inner.settings()


class EmbeddingDistill(TaskBase):
    """A bare encoder trained so its pooled sentence vectors match the teacher's.

    Training examples are sentences (one string each); dev examples are scored sentence pairs,
    and the dev score is the Pearson / Spearman (x100) of the student's cosines, as
    `bertkit evaluate --task stsb --zero-shot` computes them for the saved student."""

    name = "embedding"
    main_metric = "spearman"
    prediction_suffix = ".tsv"

    def __init__(self, teacher: nn.Module, tokenizer, weights: DistillWeights, rt: Runtime, cosine: bool,
                 pooling: str = "mean", max_seq_len: int = 128, normalize: bool = False):
        from bertkit.data.glue import glue_task

        self.teacher = teacher.to(rt.device).eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.weights = weights
        self.cosine = cosine and weights.cosine > 0
        self.pooling = pooling
        self.max_seq_len = max_seq_len
        self.normalize = normalize  # the saved student's sentence-transformers files end in Normalize
        self.spec = glue_task("stsb")
        self.reference: tuple[Prepared, list] | None = None

    def read(self, path) -> list[str]:
        from bertkit.distill.sentences import read_sentences

        return read_sentences(path)

    def read_dev(self, path) -> list:
        from bertkit.eval.sts import read_scored_pairs

        return read_scored_pairs("stsb", path)[0]

    def fit_labels(self, train_examples: list) -> None:
        """Sentences have no labels: the teacher's vectors are the targets."""

    def prepare(self, examples: list, train: bool = False) -> Prepared:
        texts = examples if train else [t for e in examples for t in (e.text_a, e.text_b)]
        encs = self.tokenizer.encode_batch(list(texts), max_length=self.max_seq_len)
        features = [{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encs]
        return Prepared(examples, features, [len(e.ids) for e in encs], not train,
                        cut=sum(e.truncated for e in encs))

    def collate(self, features: list[dict]) -> Batch:
        from bertkit.data.batching import collate

        return Batch(collate(features, self.tokenizer.pad_id))

    def new_model(self, model_dir: Path) -> nn.Module:
        from bertkit.model import BertModel

        return BertModel.from_pretrained(model_dir)

    load_model = new_model

    def save_model(self, model: nn.Module, out: Path, tokenizer) -> None:
        """An HF directory plus sentence-transformers' files (the student's pooling, the teacher's
        normalisation), so `SentenceTransformer(out)` gives the vectors `bertkit embed` gives."""
        from bertkit.st import write_sentence_transformers_files

        model.save_pretrained(out, tokenizer)
        write_sentence_transformers_files(out, self.pooling, self.max_seq_len, model.config.hidden_size, self.normalize)

    def _vectors(self, model: nn.Module, inputs: dict) -> tuple[Tensor, Tensor]:
        """(pooled sentence vectors (B, C), last hidden states (B, T, C))."""
        from bertkit.embed import pool

        out = model(**inputs)
        return pool(out.last_hidden_state, inputs["attention_mask"], self.pooling), out.last_hidden_state

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        w = self.weights
        with torch.no_grad():
            t_vec, t_hidden = self._vectors(self.teacher, batch.inputs)
        s_vec, s_hidden = self._vectors(model, batch.inputs)
        total = w.mse * vector_mse(s_vec, t_vec)
        if self.cosine:
            total = total + w.cosine * hidden_cosine(s_hidden, t_hidden, batch.inputs["attention_mask"])
        return total

    def predict(self, model: nn.Module, data: Prepared, rt: Runtime) -> list[float]:
        """Each pair's cosine of unit sentence vectors (the features are the pairs' two texts, in turn)."""
        from bertkit.embed import embed_texts

        texts = [t for e in data.examples for t in (e.text_a, e.text_b)]
        vectors = embed_texts(model, self.tokenizer, texts, pooling=self.pooling, normalize=True,
                              batch_size=rt.eval_batch_size, max_length=self.max_seq_len, device=rt.device,
                              progress=False)
        return (vectors[0::2].astype("float64") * vectors[1::2]).sum(axis=1).tolist()

    def remember_teacher(self, dev: Prepared, rt: Runtime) -> dict:
        predictions = self.predict(self.teacher, dev, rt)
        self.reference = (dev, predictions)
        return self.score(dev, predictions)

    def score(self, data: Prepared, predictions: list[float]) -> dict:
        from bertkit.eval.metrics import task_metrics

        metrics = task_metrics(self.spec, predictions, [float(e.label) for e in data.examples])
        if self.reference is not None and self.reference[0] is data:
            metrics["teacher_agreement"] = agreement(predictions, self.reference[1], regression=True)
        return metrics

    def write_predictions(self, path: Path, data: Prepared, predictions: list[float]) -> None:
        from bertkit.io import write_text

        write_text(path, "index\tcosine\n" + "".join(f"{i}\t{p:.6f}\n" for i, p in enumerate(predictions)))

    def settings(self) -> dict:
        return {"task": self.name, "pooling": self.pooling, "max_seq_len": self.max_seq_len}
