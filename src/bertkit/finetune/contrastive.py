"""The bi-encoder losses, on sentence vectors, and GradCache (cached gradients for large batches).

- `in_batch_loss`: Sentence-BERT's multiple-negatives ranking loss (van den Oord's InfoNCE with
  in-batch negatives): each anchor's cosine to every candidate (the batch's positives, then its
  hard negatives) times `scale` (1 / temperature), cross-entropy towards its own positive.
  `symmetric` averages it with the reverse direction (each positive picks its anchor among the
  batch's anchors), as sentence-transformers' MultipleNegativesSymmetricRankingLoss;
- `cosent_loss`: CoSENT (Su, 2022) on scored pairs: log(1 + sum over pairs (i, j) with
  score_i > score_j of exp(scale * (cos_j - cos_i))), which only asks the cosines to be in the
  gold order;
- `matryoshka`: sentence-transformers' MatryoshkaLoss (Kusupati et al., 2022): the loss of each
  listed prefix width of the vectors, cut and made unit length again, times its weight, summed; the
  full width counts only when listed, as there. Truncated vectors then still work;
- `CachedEmbeddings` (Gao et al., 2021, "GradCache"): embed a batch a chunk at a time without
  building the graph, compute the loss on those vectors, and when the loss's gradient reaches
  them re-embed each chunk with the graph (same dropout: its RNG state is replayed) and push
  that chunk's gradient through. The gradients equal the plain batch's while only one chunk's
  activations are held: the contrastive batch is no longer limited by memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """(N, C), (M, C) -> (N, M) cosines."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def in_batch_loss(anchors: Tensor, candidates: Tensor, scale: float, symmetric: bool = False) -> Tensor:
    """anchors (B, C); candidates (M >= B, C), row i < B anchor i's positive, the rest negatives."""
    B = anchors.shape[0]
    scores = scale * cosine_matrix(anchors, candidates)  # (B, M)
    target = torch.arange(B, device=anchors.device)
    loss = F.cross_entropy(scores, target)
    if symmetric:
        loss = (loss + F.cross_entropy(scores[:, :B].T, target)) / 2  # (B positives, B anchors)
    return loss


def cosent_loss(a: Tensor, b: Tensor, scores: Tensor, scale: float) -> Tensor:
    """a, b (B, C) the pairs' vectors, scores (B,) their gold similarity."""
    cos = scale * F.cosine_similarity(a, b, dim=-1)  # (B,)
    diff = cos[None, :] - cos[:, None]  # (B, B): [i, j] = cos_j - cos_i
    wrong = scores[:, None] > scores[None, :]  # pair i should score above pair j
    terms = diff.masked_fill(~wrong, float("-inf")).flatten()
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)


def matryoshka(loss: Callable[[Tensor], Tensor], vectors: Tensor, dims: Sequence[int],
               weights: Sequence[float] | None = None) -> Tensor:
    """sum of weight_d * loss(unit(vectors[:, :d])) over `dims` (weights 1 when None); no dims:
    loss(vectors). The widest first, as sentence-transformers sums them."""
    if not dims:
        return loss(vectors)
    weights = [1.0] * len(dims) if weights is None else list(weights)
    if len(weights) != len(dims):
        raise ValueError(f"{len(weights)} Matryoshka weights for {len(dims)} dims")
    total = vectors.new_zeros(())
    for d, w in sorted(zip(dims, weights), key=lambda dw: -dw[0]):
        total = total + w * loss(truncate(vectors, d))
    return total


def truncate(vectors: Tensor, d: int) -> Tensor:
    """(N, C) -> (N, d): the first d components at unit length (fp32 for the norm, as
    sentence-transformers' `shrink`)."""
    if not 1 <= d <= vectors.shape[-1]:
        raise ValueError(f"a Matryoshka width {d} outside 1..{vectors.shape[-1]}")
    return F.normalize(vectors[..., :d].float(), p=2, dim=-1).to(vectors.dtype)


def _rng_state(device: torch.device):
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


@contextlib.contextmanager
def _replayed(state, device: torch.device):
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state(state[1], device)
        yield


class CachedEmbeddings:
    """`vectors`: (U, C) embeddings of a batch's U texts, computed `chunk` texts at a time with
    no graph; a leaf whose gradient, when it arrives, is pushed through the encoder chunk by chunk.

    `encode(inputs)` maps a dict of (n, T) tensors to (n, C) vectors."""

    def __init__(self, encode: Callable[[dict], Tensor], inputs: dict[str, Tensor], chunk: int):
        self.encode, self.inputs = encode, inputs
        n = inputs["input_ids"].shape[0]
        self.slices = [slice(s, min(s + chunk, n)) for s in range(0, n, chunk)]
        device = inputs["input_ids"].device
        self.device = device
        self.autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
        self.states, parts = [], []
        with torch.no_grad():
            for s in self.slices:
                self.states.append(_rng_state(device))
                parts.append(encode(self._chunk(s)))
        self.vectors = torch.cat(parts).detach().requires_grad_()
        self.vectors.register_hook(self._backward)

    def _chunk(self, s: slice) -> dict[str, Tensor]:
        """Rows `s`, cut to their longest input (less padding than the whole batch's)."""
        width = int(self.inputs["attention_mask"][s].sum(dim=1).max())
        return {k: v[s, :width] for k, v in self.inputs.items()}

    def _backward(self, grad: Tensor) -> Tensor:
        enabled, dtype = self.autocast
        for s, state in zip(self.slices, self.states):
            with _replayed(state, self.device), torch.enable_grad(), \
                    torch.autocast(self.device.type, dtype=dtype, enabled=enabled):
                out = self.encode(self._chunk(s))
            out.backward(grad[s].to(out.dtype))
        return grad
