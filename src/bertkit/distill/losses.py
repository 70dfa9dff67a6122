"""Distillation losses as pure functions of logits and hidden states (DistilBERT, Sanh et al. 2019).

- `soft_target_kl`: Hinton et al.'s soft targets, KL(teacher || student) of the two softmaxes at
  temperature T, times T^2 so its gradient keeps the same scale as the hard-label loss whatever T;
- `hidden_cosine`: 1 - cos(student, teacher) per real token, averaged (DistilBERT's L_cos), which
  aligns the direction of the student's hidden states with the teacher's; only for equal widths;
- `vector_mse`: mean squared error between sentence vectors (Reimers & Gurevych 2020's
  embedding distillation: the student learns to reproduce the teacher's vectors).

`DistillWeights` says how the terms are added up; a weight of 0 skips its term entirely.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class DistillWeights:
    """How much each term counts; DistilBERT's temperature 2 by default."""

    temperature: float = 2.0
    soft: float = 1.0  # KL to the teacher's softened outputs (MSE to its outputs for regression)
    hard: float = 1.0  # the task's own loss on the gold labels (or MLM labels)
    cosine: float = 1.0  # hidden_cosine on the last layer, when the widths match
    mse: float = 1.0  # vector_mse between sentence vectors (embedding students)

    def __post_init__(self):
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive, not {self.temperature}")
        if min(self.soft, self.hard, self.cosine, self.mse) < 0:
            raise ValueError("loss weights must not be negative")


def soft_target_kl(student_logits: Tensor, teacher_logits: Tensor, temperature: float) -> Tensor:
    """T^2 * mean over rows of KL(softmax(t/T) || softmax(s/T)); logits are (N, K), N rows of K classes."""
    t = temperature
    log_p_student = F.log_softmax(student_logits.float() / t, dim=-1)  # (N, K)
    log_p_teacher = F.log_softmax(teacher_logits.float() / t, dim=-1)  # (N, K)
    kl = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum(-1)  # (N,)
    return kl.mean() * t * t


def hidden_cosine(student: Tensor, teacher: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """Mean of 1 - cos(student_i, teacher_i) over the real tokens; states are (B, T, C), mask (B, T)."""
    cos = F.cosine_similarity(student.float(), teacher.float(), dim=-1)  # (B, T)
    if attention_mask is None:
        return (1.0 - cos).mean()
    keep = attention_mask.to(cos.dtype)
    return ((1.0 - cos) * keep).sum() / keep.sum().clamp(min=1.0)


def vector_mse(student: Tensor, teacher: Tensor) -> Tensor:
    """Mean squared error between (B, C) sentence vectors, over every element."""
    return F.mse_loss(student.float(), teacher.float())
