"""torch.compile for training: each Transformer block compiled in place.

Why per block and not the whole model: the sparse pretraining heads gather the labelled
positions with `nonzero`, a data-dependent shape. Compiling across it either breaks the graph or
(with `capture_dynamic_output_shape_ops`) asks inductor for unbacked sizes, which failed to
compile the backward pass on torch 2.11 / H200. Inside a block every size comes from an input's
shape, so the blocks compile with ordinary dynamic shapes, the gather stays eager, and the
module's parameter names (its checkpoints) do not change.
"""

from __future__ import annotations

import torch
from torch import nn

from bertkit.heads import MLMHead
from bertkit.model import Layer


def compile_blocks(model: nn.Module, **compile_kwargs) -> nn.Module:
    """torch.compile every Transformer layer (and an MLM head's transform) in place; returns `model`."""
    # One code object (Layer.forward) serves every layer, in train and eval, with and without
    # `rows`, static and then dynamic sizes: more cache entries than dynamo's default 8, past
    # which it silently runs the remaining layers eager (seen on the H200 at seq 512).
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 64))
    for m in model.modules():
        if isinstance(m, (Layer, MLMHead)):
            m.compile(**compile_kwargs)
    return model
