"""How a new model's weights start: BERT's initialisation, or one scaled to the model's width.

- "bert": every weight matrix and embedding N(0, initializer_range) (0.02), as BERT and
  transformers initialise; tuned for hidden sizes of 768-1024.
- "scaled": every weight matrix and embedding N(0, 1/sqrt(hidden_size)) (LeCun's fan-in scale:
  0.088 at hidden 128, 0.036 at 768), and the position table filled with sine and cosine waves
  (Vaswani et al. 2017) at the same scale, so neighbouring positions start similar and attention
  to nearby tokens is easy to learn. A narrow model initialised at 0.02 starts with attention
  logits ~20x too small at hidden 128 and stays on the masked-LM plateau (predict frequent
  tokens, copy the unmasked ones) for thousands of steps; measured on the demo's data in the
  README ("Pretraining recipes"). Only the starting values change: the architecture, the saved
  files and the config's initializer_range (which new fine-tuning heads use) are BERT's.

Biases start at 0 and LayerNorms at 1 in both (`bertkit.model.init_weights`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from bertkit.pretrain.setup import INITS


def sinusoids(positions: int, width: int) -> torch.Tensor:
    """(positions, width): sin in even columns, cos in odd ones, wavelengths 2pi to 10000 * 2pi."""
    pos = torch.arange(positions, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, width, 2, dtype=torch.float32) / width)
    table = torch.zeros(positions, width)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: width // 2])
    return table


@torch.no_grad()
def initialise(model: nn.Module, how: str) -> nn.Module:
    """Re-draw `model`'s weights by `how` (see INITS); "bert" leaves the constructor's init."""
    if how == "bert":
        return model
    if how != "scaled":
        raise ValueError(f"init must be one of {INITS}, not {how!r}")
    from bertkit.model import Embeddings

    std = model.config.hidden_size ** -0.5
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.normal_(0.0, std)
    for module in model.modules():  # after the loop above, which visits the tables too
        if isinstance(module, Embeddings) and module.position is not None:  # rotary and relative models have none
            P, C = module.position.weight.shape
            module.position.weight.copy_(sinusoids(P, C) * std * math.sqrt(2))  # entries of RMS std
    return model
