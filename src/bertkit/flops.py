"""Useful FLOPs of a BERT step, and the matrix rate of this machine measured in the same run.

Useful FLOPs count the work the task needs, the same for every implementation, so an
implementation that computes more (transformers' full-vocabulary MLM logits) gets no credit:
- dense layers: 2 FLOPs per weight per token forward, 6 for forward + backward, over the
  encoder's matrices (QKV, attention output, FFN in/out of every layer, and an embedding
  projection where there is one; embeddings are lookups);
- attention: QK^T and AV, 2 * 2 * L^2 * C per sequence of L real tokens per layer, forward;
- MLM head (training only): transform (C x E) and decoder (E x V) on the labelled ~15% of tokens
  (E, the embeddings' width, is C in BERT).
MFU is useful FLOP/s over the matrix rate: the benchmark measures it (a large fp32 matmul on
CPU, bf16 on GPU); the pretraining status line uses the GPU's datasheet peak instead.
"""

from __future__ import annotations

import time

import torch

from bertkit.config import BertConfig


def encoder_matrix_params(config: BertConfig) -> int:
    """Weights multiplied per token in the encoder: 4 C^2 (QKV + output) + 2 C I per layer, and
    E C for an embedding projection."""
    C = config.hidden_size
    projection = config.embedding_width * C if config.embedding_size is not None else 0
    return config.num_hidden_layers * (4 * C * C + 2 * C * config.intermediate_size) + projection


def step_flops(config: BertConfig, lengths: list[int], labelled: int = 0, training: bool = False) -> float:
    """Useful FLOPs of one step over sequences of the given real lengths.

    `labelled` is the number of MLM-labelled positions (training); forward-only steps count 2
    FLOPs per multiply-add, training steps 6 (forward, and backward to inputs and weights).
    """
    C, V, E = config.hidden_size, config.vocab_size, config.embedding_width
    factor = 6 if training else 2
    tokens = sum(lengths)
    dense = factor * encoder_matrix_params(config) * tokens
    attention = (factor // 2) * 4 * C * config.num_hidden_layers * sum(L * L for L in lengths)
    head = factor * (C * E + E * V) * labelled if training else 0
    return float(dense + attention + head)


# Dense bf16 tensor-core peaks (FLOP/s) by device name; fp32 runs use TF32, half of these.
_PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12,
              "L4": 121e12, "RTX 4090": 165e12, "RTX 3090": 71e12}


def peak_flops(device: torch.device, precision: str) -> float | None:
    """A known GPU's datasheet matrix peak for `precision`; None on CPU or an unknown GPU."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    peak = next((v for k, v in _PEAK_BF16.items() if k in name), None)
    return None if peak is None else peak * (1.0 if precision == "bf16" else 0.5)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matrix_rate(device: torch.device, repeats: int = 5) -> tuple[float, str]:
    """Measured FLOP/s of a large matmul (the best of `repeats`), and what was measured."""
    if device.type == "cuda":
        n, dtype = 8192, torch.bfloat16
    else:
        n, dtype = 2048, torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b  # warm-up: allocation, kernel selection
    _sync(device)
    best = float("inf")
    inner = 10 if device.type == "cuda" else 1
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            a @ b
        _sync(device)
        best = min(best, (time.perf_counter() - start) / inner)
    return 2 * n**3 / best, f"{n}x{n} {str(dtype).removeprefix('torch.')} matmul"
