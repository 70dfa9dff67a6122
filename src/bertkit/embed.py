"""Sentence vectors and layer features from a BERT encoder (the paper's feature-based approach).

`pool` turns token vectors into one vector per text ([CLS], or the mean or max over real tokens,
padding ignored); `select_layers` picks and combines hidden layers (the paper's best NER feature
was the concatenation of the last four); `embed_texts` runs a whole list of texts through the
encoder, and `token_features` keeps every token's vector instead (`bertkit features`). Texts are
batched longest first so each batch pads to a similar length, which on mixed-length input is several
times faster than input order; rows come back in input order. `load_encoder` reads the encoder out
of a model directory of any head (the head is skipped).

Mean pooling counts [CLS] and [SEP] like every real token, as sentence-transformers does, so a
sentence-transformers checkpoint gives its published vectors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bertkit.data.batching import length_mask, pad_rows
from bertkit.devices import autocast
from bertkit.errors import UserError
from bertkit.long_inputs import Plan, Policy, merge_reports, pool_chunks
from bertkit.matryoshka import check_dimensions, truncate_rows
from bertkit.model import BertModel
from bertkit.tokenizer import Tokenizer

POOLINGS = ("cls", "mean", "max")
COMBINES = ("concat", "sum", "mean")


def pool(hidden: Tensor, attention_mask: Tensor, how: str = "cls") -> Tensor:
    """(B, T, C) token vectors and a (B, T) 1/0 mask -> (B, C); mean and max skip padding.
    The one pooling: `embed_texts`, fine-tuning, search, serve, and the exported graph (it
    traces to plain ONNX ops)."""
    if how == "cls":
        return hidden[:, 0]
    keep = attention_mask.to(torch.bool)[:, :, None]  # (B, T, 1)
    if how == "mean":
        total = hidden.masked_fill(~keep, 0.0).sum(dim=1)  # (B, C)
        count = keep.sum(dim=1).clamp(min=1).to(hidden.dtype)  # (B, 1)
        return total / count
    if how == "max":
        return hidden.masked_fill(~keep, torch.finfo(hidden.dtype).min).amax(dim=1)
    raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, not {how!r}")


def select_layers(hidden_states: Sequence[Tensor], layers: Sequence[int], combine: str = "concat") -> Tensor:
    """Pick layers from (embeddings, layer 1, ..., layer L), each (B, T, C), and combine them.

    Indices count like Python's: 0 is the embedding output, -1 the last layer. "concat" gives
    (B, T, C*k) in the order asked; "sum" and "mean" give (B, T, C).
    """
    check_layers(layers, len(hidden_states))
    chosen = [hidden_states[i] for i in layers]
    if combine == "concat":
        return torch.cat(chosen, dim=-1)  # (B, T, C*k)
    if combine == "sum":
        return torch.stack(chosen).sum(dim=0)
    if combine == "mean":
        return torch.stack(chosen).mean(dim=0)
    raise ValueError(f"combine must be one of {', '.join(COMBINES)}, not {combine!r}")


def check_layers(layers: Sequence[int], n: int) -> None:
    """A UserError unless every index names one of n hidden states (the layers plus the embeddings)."""
    if not layers:
        raise UserError("no layers chosen")
    for i in layers:
        if not -n <= i < n:
            raise UserError(f"layer {i} does not exist: this model has {n - 1} layers plus embeddings "
                            f"(choose from {-n}..{n - 1})")


def load_encoder(path: str | os.PathLike) -> tuple[BertModel, Tokenizer]:
    """The bare encoder and tokenizer of a model directory, whatever head it was saved with."""
    model = BertModel.from_pretrained(path)
    tokenizer = Tokenizer.from_pretrained(path)
    if len(tokenizer) > model.config.vocab_size:
        raise UserError(f"vocab.txt has {len(tokenizer)} entries but the model only "
                        f"{model.config.vocab_size}: tokenizer and weights do not belong together", path)
    return model.eval(), tokenizer


def text_plan(tokenizer: Tokenizer, texts: Sequence[str], max_length: int, policy: Policy | None = None) -> Plan:
    """Every text's rows under `policy` (truncation when None): its first `max_length` tokens, or
    all of it in windows (`bertkit.long_inputs`)."""
    policy = policy or Policy()
    contents = tokenizer.encode_ids_batch(list(texts))
    return Plan(contents, max_length, tokenizer, stride=policy.stride, first_only=not policy.windows)


@torch.inference_mode()
def embed_texts(model: BertModel, tokenizer: Tokenizer, texts: Sequence[str], *, pooling: str = "mean",
                layers: Sequence[int] = (-1,), combine: str = "concat", normalize: bool = False,
                batch_size: int = 32, max_length: int = 512, device: str | torch.device = "cpu",
                progress: bool = True, report: dict | None = None, precision: str = "fp32",
                policy: Policy | None = None, chunks: bool = False, dimensions: int | None = None):
    """One float32 vector per text: (N, C), or (N, C*k) for k concatenated layers; with
    `dimensions` d, (N, d): each row's first d components, unit length again when `normalize`
    (`bertkit.matryoshka.truncate_rows`; a long text's chunks are cut before they are averaged).

    `precision` "bf16" runs the encoder under bf16 autocast (`devices.autocast`); pooling and
    normalising stay fp32.

    Texts longer than `max_length` tokens (or the model's position limit, if smaller) are cut, or
    with `policy` windows read in overlapping chunks whose vectors are averaged by their token
    counts (`long_inputs.pool_chunks`; each chunk normalised first when `normalize`); with
    `chunks` too, ((R, C) one vector per chunk, (R,) the text of each) instead. A `report` dict
    given is filled with `long_inputs.LongReport.as_dict()` and the old keys "cut" (texts cut to
    the limit) and "max_length". The model is moved to `device` and run in eval mode; its
    training flag is restored after.
    """
    if pooling not in POOLINGS:
        raise UserError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}")
    if combine not in COMBINES:
        raise UserError(f"combine must be one of {', '.join(COMBINES)}, not {combine!r}")
    if batch_size < 1:
        raise UserError(f"batch size must be at least 1, got {batch_size}")
    layers = list(layers)
    check_layers(layers, model.config.num_hidden_layers + 1)
    check_dimensions(dimensions, model.config.hidden_size * (len(layers) if combine == "concat" else 1))
    max_length = min(max_length, model.config.max_tokens)
    (policy or Policy()).check_window(max_length - tokenizer.template.single_count)
    plan = text_plan(tokenizer, texts, max_length, policy)
    summary = plan.report((policy or Policy()).name)
    if report is not None:
        report.update(summary.as_dict(), cut=0 if summary.policy == "windows" else summary.long,
                      max_length=max_length)
    vectors = _embed_rows(model, plan, layers, combine, pooling, normalize, batch_size, device, progress, precision)
    vectors = truncate_rows(vectors, dimensions, normalize)
    if chunks:
        return vectors, plan.owner
    if len(plan) == len(texts):  # one row per text: truncation, or nothing long
        return vectors
    counts = plan.lengths
    return np.stack([pool_chunks(vectors[plan.rows(i)], counts[plan.rows(i)], normalize) for i in range(len(texts))])


def _embed_rows(model, plan: Plan, layers: list[int], combine: str, pooling: str, normalize: bool, batch_size: int,
                device, progress: bool, precision: str) -> np.ndarray:
    """(R, width) the vector of each row of `plan`, batched longest first."""
    from tqdm import tqdm

    width = model.config.hidden_size * (len(layers) if combine == "concat" else 1)
    lengths = plan.lengths
    order = sorted(range(len(plan)), key=lambda r: -lengths[r])
    out = np.zeros((len(plan), width), dtype=np.float32)
    was_training = model.training
    model.to(device).eval()
    only_last = layers == [-1]
    graph_pooled = only_last and getattr(model, "pooled", lambda *_: False)(pooling, normalize)
    try:
        with tqdm(total=len(order), unit="text", disable=not progress, desc="embedding") as bar:
            for start in range(0, len(order), batch_size):
                batch = order[start:start + batch_size]
                ids = pad_rows([plan.row(r)[0] for r in batch], plan.pad_id).to(device)  # (B, T)
                mask = length_mask(lengths[batch], ids.shape[1]).to(device)  # (B, T)
                with autocast(precision, device):
                    result = model(ids, attention_mask=mask, output_hidden_states=not only_last)
                bar.update(len(batch))
                if graph_pooled:  # an ONNX export's own pooled (and normalised) vectors
                    out[batch] = result.sentence_embedding
                    continue
                if only_last:
                    hidden = result.last_hidden_state  # (B, T, C)
                else:
                    hidden = select_layers([h.float() for h in result.hidden_states], layers, combine)  # (B, T, C*k)
                vectors = pool(hidden.float(), mask, pooling)  # (B, width)
                if normalize:
                    vectors = F.normalize(vectors, p=2, dim=-1)
                out[batch] = vectors.cpu().numpy()
    finally:
        model.train(was_training)
    return out


@torch.no_grad()
def token_features(model: BertModel, tokenizer: Tokenizer, sentences: Sequence[str], layers: Sequence[int],
                   combine: str = "concat", max_length: int = 128, batch_size: int = 32,
                   device: str | torch.device = "cpu", progress: bool = True, report: dict | None = None,
                   policy: Policy | None = None):
    """(features (N, F) float32, offsets (S+1,), tokens) for every token of every sentence.

    Sentence i's tokens, [CLS] and [SEP] included, are rows offsets[i]:offsets[i+1]; F is C times
    the number of layers for "concat", C otherwise. Sentences longer than `max_length` tokens (or
    the model's position limit, if smaller) are cut, or with `policy` windows read whole: each
    token's vector from the window where it has the most context ([CLS] from the first window,
    [SEP] from the last), the token vectors late chunking pools. Windows run in input order, a
    batch at a time, each placed into its sentence's array at once. `report` as in `embed_texts`, with
    "windows_per_input" too.
    """
    from tqdm import tqdm

    check_layers(layers, model.config.num_hidden_layers + 1)
    max_length = min(max_length, model.config.max_tokens)
    policy = policy or Policy()
    policy.check_window(max_length - tokenizer.template.single_count)
    chunks, tokens, reports, windows = [], [], [], []
    before, after = (tokenizer.convert_ids_to_tokens(t for t, _ in part) for part in tokenizer.template.single)
    model.to(device).eval()
    bar = tqdm(total=len(sentences), unit="sentence", disable=not progress, leave=False)
    for i in range(0, len(sentences), batch_size):
        encodings = tokenizer.encode_batch(list(sentences[i : i + batch_size]), truncation=False,
                                           add_special_tokens=False)
        plan = Plan([e.ids for e in encodings], max_length, tokenizer, stride=policy.stride,
                    first_only=not policy.windows)
        reports.append(plan.report(policy.name))
        windows += np.bincount(plan.owner, minlength=len(encodings)).tolist()
        for j, features in enumerate(_plan_features(model, plan, layers, combine, batch_size, device)):
            chunks.append(features)
            tokens.extend([*before, *encodings[j].tokens[: len(features) - len(before) - len(after)], *after])
        bar.update(len(encodings))
    bar.close()
    if report is not None:
        total = merge_reports(reports, policy.name, max_length)
        report.update(total.as_dict(), cut=0 if policy.windows else total.long, max_length=max_length,
                      windows_per_input=windows)
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int64)
    width = chunks[0].shape[1] if chunks else 0
    features = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros((0, width), np.float32)
    return features, offsets, tokens


def _plan_features(model, plan: Plan, layers, combine: str, batch_size: int, device):
    """Yield each input's (covered + 2, F) token features, its rows run in order, `batch_size` at a time."""
    lengths = plan.lengths
    outs: dict[int, np.ndarray] = {}
    best: dict[int, np.ndarray] = {}
    for start in range(0, len(plan), batch_size):
        batch = list(range(start, min(start + batch_size, len(plan))))
        ids = pad_rows([plan.row(r)[0] for r in batch], plan.pad_id).to(device)  # (B, T)
        mask = length_mask(lengths[batch], ids.shape[1]).to(device)  # (B, T)
        hidden = model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        h = select_layers(hidden, layers, combine).float().cpu().numpy()  # (B, T, F)
        for k, r in enumerate(batch):
            i = int(plan.owner[r])
            if i not in outs:
                best[i] = plan.best_rows(i)
                outs[i] = np.empty((len(best[i]) + 2, h.shape[-1]), dtype=np.float32)
            plan.place(r, h[k], outs[i], best[i])
            if r == plan.rows(i)[-1]:  # rows run in input order: input i is complete
                best.pop(i)
                yield outs.pop(i)
