"""`bertkit distill --to static`: a static embedding model (`bertkit.static`) from any encoder.

Model2Vec's recipe (Tulkens & van Dongen, 2024), on bertkit's own encoder:
1. every vocabulary token alone through the teacher, wrapped in its special tokens as one text
   would be ([CLS] t [SEP], <s> t </s>), pooled as the teacher pools (its sentence-transformers
   files; mean for a plain directory): one (V, C) table;
2. PCA to `dim` dimensions (centred, eigenvectors of the covariance, each sign fixed so its
   largest score is positive, as model2vec);
3. a weight per token: SIF a / (a + p(t)), p from token counts over `counts` when given, else
   Zipf's law on the vocabulary's order (model2vec 0.10's default); or log(1 + rank), model2vec's
   first release; or none. [UNK] and [PAD] get zero rows: an unknown word adds nothing (model2vec
   drops it), which is the same once the mean is normalised;
4. optionally (`corpus`) a short training of the table itself: the EmbeddingBag mean of each
   corpus sentence against the teacher's vector of it, projected by the same PCA, by cosine loss
   (Tokenlearn's idea without its extra steps). Only tokens the corpus holds move.
The rows keep the teacher's token ids, so the teacher's tokenizer (less its special tokens) is
the static model's.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from bertkit.errors import UserError
from bertkit.pretrain.options import FIXED, NONNEGATIVE_INT, POSITIVE, POSITIVE_INT, option

WEIGHTINGS = ("sif", "log-rank", "none")
STATIC_FLAGS = ("dim", "weighting", "sif_coefficient", "counts", "corpus", "refine_sentences", "refine_epochs",
                "refine_lr", "refine_batch_size", "refine_max_seq_len", "token_pooling", "token_batch_size")
UNUSED = re.compile(r"\[unused\d+\]")  # BERT's reserved rows: no rank of their own (model2vec drops them)


@dataclass
class StaticOptions:
    """What `bertkit distill --to static` is asked beyond the teacher and OUT (each a flag)."""

    dim: int | None = option(FIXED, None, range=POSITIVE_INT,
                             help="PCA dimensions of the vectors, at most the teacher's width (default: 256, or the "
                                  "teacher's width when it is narrower)")
    weighting: str = option(FIXED, "sif", choices=WEIGHTINGS,
                            help="token weights: sif a/(a+p) with p from --counts or Zipf's law on the vocabulary's "
                                 "order (model2vec), log-rank log(1+rank) (model2vec's first release), or none")
    sif_coefficient: float = option(FIXED, 1e-4, range=POSITIVE, help="SIF's a, for --weighting sif")
    counts: str | None = option(
        FIXED, None, metavar="PATH",
        help="a text file or folder whose token counts give SIF's p(t) (default: Zipf's law on the vocabulary order)")
    corpus: str | None = option(
        FIXED, None, metavar="PATH",
        help="a text file or folder: refine the table on its sentences against the teacher's vectors (default: "
             "no refinement)")
    refine_sentences: int = option(FIXED, 20000, range=POSITIVE_INT,
                                   help="--corpus: at most this many sentences, drawn with seed 0")
    refine_epochs: int = option(FIXED, 3, range=POSITIVE_INT, help="--corpus: passes over the sentences")
    refine_lr: float = option(FIXED, 0.02, range=POSITIVE, help="--corpus: Adam's learning rate on the table")
    refine_batch_size: int = option(FIXED, 128, range=POSITIVE_INT, help="--corpus: sentences per step")
    refine_max_seq_len: int = option(FIXED, 128, range=POSITIVE_INT,
                                     help="--corpus: the teacher reads at most this many tokens of a sentence")
    token_pooling: str | None = option(FIXED, None, choices=("mean", "cls", "max"),
                                       help="the teacher's pooling of each token alone (default: the teacher's own, "
                                            "as its files say; mean)")
    token_batch_size: int = option(FIXED, 512, range=POSITIVE_INT, help="tokens per teacher forward pass")
    seed: int = option(FIXED, 0, range=NONNEGATIVE_INT, help="--corpus: the sentences' draw and their order")


@dataclass
class StaticJob:
    teacher: str
    out: str
    options: StaticOptions = field(default_factory=StaticOptions)
    device: str = "cpu"


def resolve_dim(options: StaticOptions, width: int) -> int:
    """The table's width: the option, checked against the teacher's `width`."""
    if options.dim is None:
        return min(256, width)
    if options.dim > width:
        raise UserError(f"--dim {options.dim} is larger than the teacher's width {width}: PCA can only reduce it")
    return options.dim


@torch.inference_mode()
def token_vectors(teacher, tokenizer, pooling: str, batch_size: int = 512, device="cpu") -> torch.Tensor:
    """(V, C): each vocabulary token alone through the teacher, with its special tokens, pooled."""
    from bertkit.devices import autocast
    from bertkit.embed import pool

    ids = torch.tensor([tokenizer.template.wrap([t])[0] for t in range(len(tokenizer))])  # (V, T), T = 1 + specials
    teacher.to(device).eval()
    out = []
    for start in range(0, len(ids), batch_size):
        batch = ids[start:start + batch_size].to(device)  # (B, T)
        mask = torch.ones_like(batch)
        with autocast("fp32", device):
            hidden = teacher(batch, attention_mask=mask).last_hidden_state.float()  # (B, T, C)
        out.append(pool(hidden, mask, pooling).cpu())
    return torch.cat(out)  # (V, C)


def fit_pca(vectors: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean (C,), components (C, dim)): `(x - mean) @ components` is x's first `dim` principal
    scores, each component's sign chosen so its largest score over `vectors` is positive."""
    x = vectors.double()
    mean = x.mean(0)
    centred = x - mean
    _, eigvecs = torch.linalg.eigh(centred.T @ centred / max(len(x) - 1, 1))  # ascending
    components = eigvecs.flip(-1)[:, :dim]  # (C, dim), largest variance first
    scores = centred @ components
    signs = torch.sign(scores.gather(0, scores.abs().argmax(0, keepdim=True))[0])
    return mean.float(), (components * torch.where(signs == 0, 1.0, signs)).float()


def vocabulary_ranks(tokenizer) -> np.ndarray:
    """(V,) each token's rank in the vocabulary's order, special and [unusedN] tokens skipped (they
    take the last ranks): what Zipf's law is applied to."""
    skip = set(tokenizer.special_ids)
    tokens = [tokenizer.inv_vocab.get(i, "") for i in range(len(tokenizer))]
    kept = [i for i, t in enumerate(tokens) if i not in skip and not UNUSED.fullmatch(t)]
    rest = [i for i in range(len(tokens)) if i in skip or UNUSED.fullmatch(tokens[i])]
    ranks = np.empty(len(tokens), dtype=np.float64)
    ranks[kept + rest] = np.arange(len(tokens))
    return ranks


def token_counts(paths, tokenizer) -> np.ndarray:
    """(V,) how often each token occurs in the text of `paths` (add-one smoothed)."""
    from bertkit.distill.sentences import read_sentences

    counts = np.ones(len(tokenizer), dtype=np.float64)
    sentences = read_sentences(list(paths), min_words=1)
    for start in range(0, len(sentences), 4096):
        for ids in tokenizer.encode_ids_batch(sentences[start:start + 4096]):
            np.add.at(counts, ids, 1)
    return counts


def token_weights(options: StaticOptions, tokenizer) -> np.ndarray:
    """(V,) each row's weight, as `options.weighting` says (see the module docstring)."""
    n = len(tokenizer)
    if options.weighting == "none":
        return np.ones(n)
    if options.weighting == "log-rank":
        return np.log1p(vocabulary_ranks(tokenizer) + 1)
    if options.counts:
        p = token_counts([options.counts], tokenizer)
    else:
        p = 1.0 / (vocabulary_ranks(tokenizer) + 2)  # Zipf: p(rank) proportional to 1/rank, from rank 1
    p = p / p.sum()
    return options.sif_coefficient / (options.sif_coefficient + p)


def _bags(tokenizer, texts: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
    ids = [np.asarray(t, dtype=np.int64) for t in tokenizer.encode_ids_batch(texts)]
    return ids, np.array([len(i) for i in ids])


def refine(table: torch.Tensor, targets: torch.Tensor, tokenizer, sentences: list[str], options: StaticOptions,
           log=print) -> list[float]:
    """Train `table` (V, D) in place so each sentence's mean of rows points where its target (N, D)
    does (cosine loss, Adam); the mean loss of each epoch."""
    ids, lengths = _bags(tokenizer, sentences)
    keep = np.flatnonzero(lengths > 0)
    weight = torch.nn.Parameter(table.clone())
    optimizer = torch.optim.Adam([weight], lr=options.refine_lr)
    order_rng = random.Random(options.seed)
    losses = []
    for epoch in range(options.refine_epochs):
        order = keep.tolist()
        order_rng.shuffle(order)
        total, steps = 0.0, 0
        for start in range(0, len(order), options.refine_batch_size):
            batch = order[start:start + options.refine_batch_size]
            flat = torch.from_numpy(np.concatenate([ids[i] for i in batch]))
            offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths[batch])[:-1]]))
            mean = torch.nn.functional.embedding_bag(flat, weight, offsets, mode="mean")  # (B, D)
            loss = 1 - torch.nn.functional.cosine_similarity(mean, targets[batch], dim=-1).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total, steps = total + loss.item(), steps + 1
        losses.append(total / max(steps, 1))
        log(f"  refine epoch {epoch + 1}/{options.refine_epochs}: cosine loss {losses[-1]:.4f}")
    table.copy_(weight.detach())
    return losses


def _corpus(options: StaticOptions) -> list[str]:
    from bertkit.distill.sentences import read_sentences

    sentences = read_sentences([options.corpus])
    if len(sentences) > options.refine_sentences:
        sentences = random.Random(options.seed).sample(sentences, options.refine_sentences)
    return sentences


def distill_static(job: StaticJob, log=print) -> dict:
    """Distil `job.teacher` into a static model at `job.out` (published whole, atomically); the
    record written beside it as static.json."""
    from bertkit.embed import embed_texts, load_encoder
    from bertkit.hf import load_config
    from bertkit.io import atomic_dir
    from bertkit.st import model_normalizes, model_pooling
    from bertkit.static import save_static

    options = job.options
    dim = resolve_dim(options, load_config(job.teacher).hidden_size)
    started = time.perf_counter()
    teacher, tokenizer = load_encoder(job.teacher)
    pooling = options.token_pooling or model_pooling(job.teacher)[0]
    sentences = _corpus(options) if options.corpus else []  # a bad corpus is found before the long part
    times = {}
    t0 = time.perf_counter()
    vectors = token_vectors(teacher, tokenizer, pooling, options.token_batch_size, job.device)  # (V, C)
    times["tokens_s"] = time.perf_counter() - t0
    mean, components = fit_pca(vectors, dim)
    weights = torch.from_numpy(token_weights(options, tokenizer)).float()
    table = ((vectors - mean) @ components) * weights[:, None]  # (V, dim)
    silent = [i for i in {tokenizer.unk_id, tokenizer.pad_id} if i < len(table)]
    table[silent] = 0.0
    log(f"bertkit distill: {len(table):,} tokens through {job.teacher} ({pooling} pooling) in "
        f"{times['tokens_s']:.1f}s; PCA {vectors.shape[1]} -> {dim}; weights {options.weighting}")
    record = {"teacher": str(job.teacher), "pooling": pooling, "vocab_size": len(table), "dim": dim,
              "teacher_width": int(vectors.shape[1]), "options": asdict(options)}
    if sentences:
        t0 = time.perf_counter()
        targets = embed_texts(teacher, tokenizer, sentences, pooling=pooling, normalize=False,
                              max_length=options.refine_max_seq_len, device=job.device, progress=False)
        targets = (torch.from_numpy(targets) - mean) @ components  # the teacher's vectors in the table's space
        times["teacher_sentences_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        record["refine_losses"] = refine(table, targets, tokenizer, sentences, options, log)
        table[silent] = 0.0  # an unknown word still adds nothing
        times["refine_s"] = time.perf_counter() - t0
        record["refine_sentences"] = len(sentences)
    record["seconds"] = {**{k: round(v, 2) for k, v in times.items()},
                         "total_s": round(time.perf_counter() - started, 2)}
    record["teacher_normalizes"] = model_normalizes(job.teacher)
    with atomic_dir(job.out) as tmp:
        save_static(tmp, table, tokenizer, normalize=True, info=record)
    return record

