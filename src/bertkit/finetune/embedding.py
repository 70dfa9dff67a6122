"""`--task embedding`: a bi-encoder (Sentence-BERT) trained on text pairs, saved for sentence-transformers.

The model is the bare encoder plus a pooling (cls, mean or max over the real tokens). Training
rows (`bertkit.data.pairs`) are (anchor, positive[, negatives...]) for the in-batch contrastive
loss, or scored pairs for CoSENT (`bertkit.finetune.contrastive`); the loss is chosen by the
rows unless --loss says. For the contrastive loss every other row's positive is a negative, so
a batch never holds the same text twice (`no_duplicate_batches`): a repeated text would be a
false negative. A batch embeds each distinct text once; with `grad_cache` it is embedded a
chunk at a time (GradCache) so the batch size is not bounded by memory.

Dev rows with scores are scored as STS (Spearman of cosines, x100); otherwise as retrieval:
each distinct anchor is a query, the dev positives and negatives are the corpus, and NDCG@10,
MRR@10, Recall@10/100 and MAP@100 are those of `eval.retrieval` (fractions, as
InformationRetrievalEvaluator). The saved directory is a sentence-transformers model
(modules.json, 1_Pooling, 2_Normalize with --normalize): `SentenceTransformer(dir)` gives the
vectors `bertkit embed --pooling P [--normalize]` gives.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import torch
from torch import Tensor, nn

from bertkit.errors import UserError
from bertkit.finetune.task import Batch, Prepared, Runtime, TaskBase

DEFAULT_TEMPERATURE = 0.05  # scale 20, sentence-transformers' default for both losses


def no_duplicate_batches(texts: list[tuple], batch_size: int, g: torch.Generator) -> list[list[int]]:
    """An epoch's batches of row indices in a random order, no text (any column) twice in a batch;
    a row that would repeat one waits for the next batch."""
    queue = deque(torch.randperm(len(texts), generator=g).tolist())
    batches = []
    while queue:
        batch, seen, skipped = [], set(), []
        while queue and len(batch) < batch_size:
            i = queue.popleft()
            if seen.isdisjoint(texts[i]):
                batch.append(i)
                seen.update(texts[i])
            else:
                skipped.append(i)
        queue.extendleft(reversed(skipped))
        batches.append(batch)
    return batches


class EmbeddingTask(TaskBase):
    name = "embedding"
    prediction_suffix = ".tsv"

    def __init__(self, tokenizer, max_seq_len: int, pooling: str = "mean", loss: str | None = None,
                 temperature: float | None = None, symmetric: bool = False, grad_cache: int | None = None,
                 matryoshka_dims: tuple[int, ...] | list[int] = (), normalize: bool = False,
                 matryoshka_weights: tuple[float, ...] | list[float] = (), query_prompt: str = "",
                 passage_prompt: str = ""):
        self.tokenizer, self.max_seq_len, self.pooling, self.loss_name = tokenizer, max_seq_len, pooling, loss
        self.temperature = temperature or DEFAULT_TEMPERATURE
        self.symmetric, self.grad_cache, self.normalize = symmetric, grad_cache, normalize
        self.matryoshka_dims = tuple(matryoshka_dims or ())
        self.matryoshka_weights = tuple(matryoshka_weights or ())
        if self.matryoshka_weights and len(self.matryoshka_weights) != len(self.matryoshka_dims):
            raise UserError(f"--matryoshka-weights names {len(self.matryoshka_weights)} weights for "
                            f"{len(self.matryoshka_dims)} --matryoshka-dims")
        self.query_prompt, self.passage_prompt = query_prompt or "", passage_prompt or ""
        self.main_metric = "ndcg@10"

    @classmethod
    def from_settings(cls, tokenizer, settings: dict, model_dir: Path | None = None, rt=None) -> EmbeddingTask:
        """Its own settings (`TaskKind.options`); one not given (None) takes the default above."""
        return cls(tokenizer, settings.get("max_seq_len") or 128, settings.get("pooling") or "mean",
                   settings.get("loss"), settings.get("temperature"), bool(settings.get("symmetric")),
                   settings.get("grad_cache"), settings.get("matryoshka_dims") or (), bool(settings.get("normalize")),
                   settings.get("matryoshka_weights") or (), settings.get("query_prompt") or "",
                   settings.get("passage_prompt") or "")

    def read(self, path) -> list:
        from bertkit.data.pairs import read_pair_rows

        return read_pair_rows(path)

    def fit_labels(self, rows: list) -> None:
        """Pick the loss from the training rows (CoSENT when every row has a score) and check it fits."""
        scored = all(r.score is not None for r in rows)
        self.loss_name = self.loss_name or ("cosent" if scored else "contrastive")
        if self.loss_name == "cosent":
            if not scored:
                raise UserError("--loss cosent needs a score on every training row")
            if self.symmetric:
                raise UserError("--symmetric applies to the contrastive loss, not cosent")

    def prepare(self, rows: list, train: bool = False) -> Prepared:
        if not rows:
            raise UserError("no rows to encode")
        index: dict[str, int] = {}
        prompted = [(self.query_prompt + r.texts[0], *(self.passage_prompt + t for t in r.texts[1:])) for r in rows]
        keys = [tuple(index.setdefault(t, len(index)) for t in texts) for texts in prompted]
        texts = list(index)
        encs = self.tokenizer.encode_batch(texts, max_length=self.max_seq_len)
        features = [{"keys": k, "ids": tuple(encs[i].ids for i in k), "score": r.score} for k, r in zip(keys, rows)]
        if not train:
            self.main_metric = "spearman" if all(r.score is not None for r in rows) else "ndcg@10"
        return Prepared(rows, features, [max(len(encs[i].ids) for i in k) for k in keys], True,
                        decoding=texts, cut=sum(e.truncated for e in encs))

    def batches(self, data: Prepared, batch_size: int, g: torch.Generator) -> list[list[int]]:
        """Contrastive batches never hold a text twice (`no_duplicate_batches`); CoSENT's are random."""
        if self.loss_name == "cosent":
            order = torch.randperm(len(data.features), generator=g).tolist()
            return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        return no_duplicate_batches([f["keys"] for f in data.features], batch_size, g)

    def collate(self, features: list[dict]) -> Batch:
        """Each distinct text of the batch once (U rows); targets index into them."""
        from bertkit.data.batching import collate

        position: dict[int, int] = {}
        rows: list = []

        def at(key: int, ids) -> int:
            if key not in position:
                position[key] = len(rows)
                rows.append({"input_ids": ids})
            return position[key]

        anchor = [at(f["keys"][0], f["ids"][0]) for f in features]
        positive = [at(f["keys"][1], f["ids"][1]) for f in features]
        negative = [at(k, ids) for f in features for k, ids in zip(f["keys"][2:], f["ids"][2:])]
        targets = {"anchor": torch.tensor(anchor), "positive": torch.tensor(positive),
                   "negative": torch.tensor(negative, dtype=torch.long)}
        if all(f["score"] is not None for f in features):
            targets["score"] = torch.tensor([f["score"] for f in features], dtype=torch.float32)
        return Batch(collate(rows, self.tokenizer.pad_id), targets)

    def new_model(self, model_dir: Path) -> nn.Module:
        from bertkit.model import BertModel

        model = BertModel.from_pretrained(model_dir)
        too_wide = [d for d in self.matryoshka_dims if d > model.config.hidden_size]
        if too_wide:
            raise UserError(f"--matryoshka-dims {too_wide[0]} exceeds the model's width {model.config.hidden_size}")
        return model

    @property
    def prompts(self) -> dict[str, str]:
        """What config_sentence_transformers.json saves: the prompts trained with, by role."""
        return {name: p for name, p in (("query", self.query_prompt), ("passage", self.passage_prompt)) if p}

    load_model = new_model

    def save_model(self, model: nn.Module, out: Path, tokenizer) -> None:
        from bertkit.st import write_sentence_transformers_files

        model.save_pretrained(out, tokenizer)
        write_sentence_transformers_files(out, self.pooling, self.max_seq_len, model.config.hidden_size, self.normalize,
                                          self.prompts, self.matryoshka_dims)

    def encode(self, model: nn.Module, inputs: dict[str, Tensor]) -> Tensor:
        """(U, C) pooled vectors of the batch's texts, embedded in groups of similar length
        (`length_groups`), each cut to its longest text, then put back in row order: a batch
        of short queries and long passages is not padded to the passages' length throughout."""
        from bertkit.data.batching import length_groups
        from bertkit.embed import pool

        mask = inputs["attention_mask"]
        lengths = mask.sum(dim=1).tolist()
        parts, order = [], []
        for group in length_groups(lengths):
            rows = torch.tensor(group, device=mask.device)
            width = max(lengths[i] for i in group)
            sub = {k: v[rows, :width] for k, v in inputs.items()}
            parts.append(pool(model(**sub).last_hidden_state, sub["attention_mask"], self.pooling))
            order += group
        vectors = torch.cat(parts)
        inverse = torch.empty(len(order), dtype=torch.long, device=vectors.device)
        inverse[torch.tensor(order, device=vectors.device)] = torch.arange(len(order), device=vectors.device)
        return vectors[inverse]

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        from bertkit.finetune.contrastive import CachedEmbeddings, cosent_loss, in_batch_loss, matryoshka

        if self.grad_cache:
            vectors = CachedEmbeddings(lambda x: self.encode(model, x), batch.inputs, self.grad_cache).vectors
        else:
            vectors = self.encode(model, batch.inputs)
        t, scale = batch.targets, 1.0 / self.temperature

        def one(v: Tensor) -> Tensor:
            v = v.float()
            if self.loss_name == "cosent":
                return cosent_loss(v[t["anchor"]], v[t["positive"]], t["score"], scale)
            return in_batch_loss(v[t["anchor"]], v[torch.cat([t["positive"], t["negative"]])], scale, self.symmetric)

        return matryoshka(one, vectors, self.matryoshka_dims, self.matryoshka_weights or None)

    def predict(self, model: nn.Module, data: Prepared, rt: Runtime):
        """Scored rows: each pair's cosine; otherwise {query key: its 100 best corpus keys}."""
        from bertkit.embed import embed_texts
        from bertkit.eval.retrieval import rank_documents

        vectors = embed_texts(model, self.tokenizer, data.decoding, pooling=self.pooling, normalize=True,
                              batch_size=rt.eval_batch_size, max_length=self.max_seq_len, device=rt.device,
                              progress=False)
        keys = [f["keys"] for f in data.features]
        if self.main_metric == "spearman":
            return [float(vectors[k[0]].astype("float64") @ vectors[k[1]]) for k in keys]
        queries = list(dict.fromkeys(k[0] for k in keys))
        corpus = list(dict.fromkeys(i for k in keys for i in k[1:]))
        ranked = rank_documents(vectors[queries] @ vectors[corpus].T, [f"{i:09d}" for i in corpus], 100)
        return {f"{q:09d}": r for q, r in zip(queries, ranked)}

    def score(self, data: Prepared, predictions) -> dict:
        if self.main_metric == "spearman":
            from bertkit.data.glue import custom_spec
            from bertkit.eval.metrics import task_metrics

            return task_metrics(custom_spec("embedding", "regression"), predictions, [r.score for r in data.examples])
        from bertkit.eval.retrieval import retrieval_metrics

        qrels: dict[str, set[str]] = {}
        for f in data.features:
            qrels.setdefault(f"{f['keys'][0]:09d}", set()).add(f"{f['keys'][1]:09d}")
        return retrieval_metrics(predictions, qrels)

    def write_predictions(self, path: Path, data: Prepared, predictions) -> None:
        from bertkit.io import write_text

        if self.main_metric == "spearman":
            write_text(path, "index\tcosine\n" + "".join(f"{i}\t{p:.6f}\n" for i, p in enumerate(predictions)))
            return
        texts = [" ".join(t.split()) for t in data.decoding]
        lines = [f"{texts[int(q)]}\t{rank}\t{texts[int(d)]}\n" for q, ranked in predictions.items()
                 for rank, d in enumerate(ranked[:10], start=1)]
        write_text(path, "query\trank\tdocument\n" + "".join(lines))

    def settings(self) -> dict:
        return {"task": self.name, "max_seq_len": self.max_seq_len, "pooling": self.pooling, "loss": self.loss_name,
                "temperature": self.temperature, "symmetric": self.symmetric, "grad_cache": self.grad_cache,
                "matryoshka_dims": list(self.matryoshka_dims), "normalize": self.normalize,
                "matryoshka_weights": list(self.matryoshka_weights), "query_prompt": self.query_prompt,
                "passage_prompt": self.passage_prompt}
