"""AdamW with BERT's parameter groups, and the learning-rate schedule as a pure function.

BERT decays every weight matrix and embedding but no bias and no LayerNorm parameter
(the original `AdamWeightDecayOptimizer` excluded "bias" and "LayerNorm"); decay is decoupled
from the gradient (Loshchilov & Hutter), as in `torch.optim.AdamW`.

The schedule is the paper's: linear warm-up from 0 to the peak, then linear decay to 0 at the
last step. `lr_at` takes floats so a time-budgeted run (`--minutes`) can use seconds in place of
steps with the same function. `lr_at_time` is the budget recipe's schedule: the same shape over
wall-clock seconds, starting at 0 and reaching 0 exactly at the end of the budget (Izsak et al.
2021 tie warm-up and decay to the time budget; cramming does the same for its one day).
"""

from __future__ import annotations

import torch
from torch import nn


def lr_at(step: float, total: float, warmup: float, peak: float) -> float:
    """The learning rate for `step` (0-based) of `total`, warming up over `warmup` steps.

    step < warmup: peak * (step + 1) / warmup, so the very first update is not wasted at 0;
    after: peak * (total - step) / (total - warmup), reaching 0 at step == total.
    """
    if total <= 0:
        raise ValueError(f"total steps must be positive, got {total}")
    if step < warmup:
        return peak * (step + 1) / warmup
    if total <= warmup:
        return peak
    return peak * max(0.0, (total - step) / (total - warmup))


def lr_at_time(elapsed_s: float, budget_s: float, warmup: float, peak: float) -> float:
    """The learning rate `elapsed_s` seconds into a run of `budget_s` seconds.

    Linear from 0 at t = 0 to `peak` at t = warmup * budget_s (`warmup` a fraction in [0, 1)),
    then linear to exactly 0 at t = budget_s, and 0 from then on (a run that overshoots its
    budget takes no further step of any size).
    """
    if budget_s <= 0:
        raise ValueError(f"budget must be positive, got {budget_s} s")
    if not 0 <= warmup < 1:
        raise ValueError(f"warmup is a fraction of the budget in [0, 1), got {warmup}")
    t = min(max(elapsed_s, 0.0), budget_s)
    rise = warmup * budget_s
    if t < rise:
        return peak * t / rise
    return peak * (budget_s - t) / (budget_s - rise)


def warmup_steps(warmup: float, total: int) -> int:
    """`--warmup` as steps: a value below 1 is a fraction of `total`, otherwise a step count."""
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    return round(warmup * total) if warmup < 1 else int(warmup)


def _no_decay(name: str, param: nn.Parameter, norms: set[int]) -> bool:
    return name.endswith("bias") or id(param) in norms or param.ndim < 2


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weights, and biases / LayerNorm parameters without decay.

    Tied parameters (the MLM decoder shares the word embeddings) appear once.
    """
    norms = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()}
    decay, no_decay = [], []
    for name, param in model.named_parameters():  # named_parameters() skips tied duplicates
        if not param.requires_grad:
            continue
        (no_decay if _no_decay(name, param, norms) else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, lr: float, weight_decay: float,
                    betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6) -> torch.optim.AdamW:
    """AdamW over `param_groups`, eps 1e-6 as in BERT's optimizer. The fused kernel on CUDA and
    CPU (on CPU it is 4-8x faster than the per-tensor loop: ~16 ms against 70-126 ms of a mini step)."""
    fused = next(model.parameters()).device.type in ("cuda", "cpu")
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas, eps=eps,
                             weight_decay=weight_decay, fused=fused or None)
