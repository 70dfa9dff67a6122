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

from bertkit.data.batching import collate, pad_rows, to_device
from bertkit.devices import autocast
from bertkit.errors import UserError
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


@torch.inference_mode()
def embed_texts(model: BertModel, tokenizer: Tokenizer, texts: Sequence[str], *, pooling: str = "mean",
                layers: Sequence[int] = (-1,), combine: str = "concat", normalize: bool = False,
                batch_size: int = 32, max_length: int = 512, device: str | torch.device = "cpu",
                progress: bool = True, report: dict | None = None, precision: str = "fp32") -> np.ndarray:
    """One float32 vector per text: (N, C), or (N, C*k) for k concatenated layers.

    `precision` "bf16" runs the encoder under bf16 autocast (`devices.autocast`); pooling and
    normalising stay fp32.

    Texts longer than `max_length` tokens (or the model's position limit, if smaller) are cut;
    a `report` dict given is filled with how many were ("cut") and the limit ("max_length").
    The model is moved to `device` and run in eval mode; its training flag is restored after.
    """
    from tqdm import tqdm

    if pooling not in POOLINGS:
        raise UserError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}")
    if combine not in COMBINES:
        raise UserError(f"combine must be one of {', '.join(COMBINES)}, not {combine!r}")
    if batch_size < 1:
        raise UserError(f"batch size must be at least 1, got {batch_size}")
    layers = list(layers)
    check_layers(layers, model.config.num_hidden_layers + 1)
    width = model.config.hidden_size * (len(layers) if combine == "concat" else 1)
    max_length = min(max_length, model.config.max_position_embeddings)
    encodings = tokenizer.encode_batch(list(texts), max_length=max_length, truncation=True)
    if report is not None:
        report.update(cut=sum(e.truncated for e in encodings), max_length=max_length)
    order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i]))
    out = np.zeros((len(encodings), width), dtype=np.float32)
    was_training = model.training
    model.to(device).eval()
    only_last = layers == [-1]
    graph_pooled = only_last and getattr(model, "pooled", lambda *_: False)(pooling, normalize)
    try:
        with tqdm(total=len(order), unit="text", disable=not progress, desc="embedding") as bar:
            for start in range(0, len(order), batch_size):
                batch = order[start:start + batch_size]
                ids = pad_rows([encodings[i].ids for i in batch], tokenizer.pad_id).to(device)  # (B, T)
                mask = pad_rows([encodings[i].attention_mask for i in batch], 0).to(device)  # (B, T)
                with autocast(precision, device):
                    result = model(ids, attention_mask=mask, output_hidden_states=not only_last)
                if graph_pooled:  # an ONNX export's own pooled (and normalised) vectors
                    out[batch] = result.sentence_embedding
                    bar.update(len(batch))
                    continue
                if only_last:
                    hidden = result.last_hidden_state  # (B, T, C)
                else:
                    hidden = select_layers([h.float() for h in result.hidden_states], layers, combine)  # (B, T, C*k)
                vectors = pool(hidden.float(), mask, pooling)  # (B, width)
                if normalize:
                    vectors = F.normalize(vectors, p=2, dim=-1)
                out[batch] = vectors.cpu().numpy()
                bar.update(len(batch))
    finally:
        model.train(was_training)
    return out


@torch.no_grad()
def token_features(model: BertModel, tokenizer: Tokenizer, sentences: Sequence[str], layers: Sequence[int],
                   combine: str = "concat", max_length: int = 128, batch_size: int = 32,
                   device: str | torch.device = "cpu", progress: bool = True, report: dict | None = None):
    """(features (N, F) float32, offsets (S+1,), tokens) for every token of every sentence.

    Sentence i's tokens, [CLS] and [SEP] included, are rows offsets[i]:offsets[i+1]; F is C times
    the number of layers for "concat", C otherwise. Sentences longer than `max_length` tokens
    (or the model's position limit, if smaller) are cut, and counted in `report` as in `embed_texts`.
    """
    from tqdm import tqdm

    check_layers(layers, model.config.num_hidden_layers + 1)
    max_length = min(max_length, model.config.max_position_embeddings)
    chunks, tokens, lengths, cut = [], [], [], 0
    model.to(device).eval()
    bar = tqdm(total=len(sentences), unit="sentence", disable=not progress, leave=False)
    for i in range(0, len(sentences), batch_size):
        encodings = tokenizer.encode_batch(list(sentences[i : i + batch_size]), max_length=max_length)
        cut += sum(e.truncated for e in encodings)
        batch = collate([{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encodings], tokenizer.pad_id)
        out = model(**to_device(batch, device), output_hidden_states=True)
        h = select_layers(out.hidden_states, layers, combine).float().cpu()  # (B, T, F)
        for row, e in zip(h, encodings):
            chunks.append(row[: len(e.ids)].numpy())
            tokens.extend(e.tokens)
            lengths.append(len(e.ids))
        bar.update(len(encodings))
    bar.close()
    if report is not None:
        report.update(cut=cut, max_length=max_length)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    width = chunks[0].shape[1] if chunks else 0
    features = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros((0, width), np.float32)
    return features, offsets, tokens
