"""Pretraining: the loop, AdamW and its schedule, checkpoints, data parallelism, plots.

`pretrain(TrainConfig(...))` is what `bertkit pretrain` runs; the pieces are importable for
experiments (`lr_at`, `param_groups`, `save_checkpoint` / `latest_checkpoint`).
"""

from bertkit.train.checkpoint import Checkpoint, latest_checkpoint, list_checkpoints, load_optimizer, save_checkpoint
from bertkit.train.loop import DataStream, pretrain
from bertkit.train.objective import Objective, next_token_labels
from bertkit.train.optim import build_optimizer, lr_at, param_groups, warmup_steps
from bertkit.train.setup import TrainConfig

__all__ = [
    "Checkpoint",
    "DataStream",
    "Objective",
    "TrainConfig",
    "build_optimizer",
    "latest_checkpoint",
    "list_checkpoints",
    "load_optimizer",
    "lr_at",
    "next_token_labels",
    "param_groups",
    "pretrain",
    "save_checkpoint",
    "warmup_steps",
]
