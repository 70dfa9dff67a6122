"""CPU inference in int8: dynamic quantization of every linear layer.

Weights of each `nn.Linear` (the fused QKV projection, attention output, both FFN matrices,
pooler and task heads) are stored as int8 with one scale per output channel; activations are
quantized on the fly per batch, and the matmuls run in int8 (fbgemm / oneDNN on x86, qnnpack on
ARM). Per-channel scales matter here: with one scale per tensor, the fused QKV matrix shares a
scale across query, key and value, and all-MiniLM-L6-v2's sentence vectors drift to cosine 0.93
of fp32's, against 0.97 per channel (64 SST-2 sentences). Embeddings, LayerNorm, softmax and GELU
stay fp32. On CPU this is ~2x faster than fp32 for BERT-base at a cost of a fraction of a point of
accuracy (bench/README.md has the numbers).

The result is for inference only: no gradients, CPU only, not saveable as a model directory
(save the fp32 model and quantize after loading).
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn


def quantize_int8(model: nn.Module, inplace: bool = False) -> nn.Module:
    """An eval-mode copy of `model` (or `model` itself) with int8 dynamic-quantized nn.Linear layers.

    The tied MLM decoder is not an nn.Linear (it reads the embedding table) and stays fp32.
    """
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 dynamic quantization runs on CPU: move the model with .cpu() first")
    target = model if inplace else copy.deepcopy(model)
    target.eval()
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    # The engine packs the weights, and the packed weights keep their kernels whatever the global
    # engine is later. oneDNN's kernels ran BERT-base 1.85x faster than fp32 on an AVX2 EPYC,
    # x86/fbgemm's 1.63x (bench/README.md), so prefer it, and restore the global setting after.
    engines = torch.backends.quantized.supported_engines
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = next(e for e in ("onednn", "x86", "fbgemm", "qnnpack") if e in engines)
    try:
        with warnings.catch_warnings():
            # torch.ao.quantization announces its move to torchao; the API still works in this torch.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", UserWarning)
            return quantize_dynamic(target, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8,
                                    inplace=True)
    finally:
        torch.backends.quantized.engine = previous


def maybe_int8(model: nn.Module, int8: bool) -> nn.Module:
    """`model` as it is, or (`int8`) quantized in place: the one switch every `--int8` flag goes through."""
    return quantize_int8(model, inplace=True) if int8 else model


def is_quantized(model: nn.Module) -> bool:
    return any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules())
