"""What both training loops share: AdamW and its schedule, checkpoints, data parallelism,
per-block compilation. The loops themselves are `bertkit.pretrain.loop` and
`bertkit.finetune.loop`.
"""

from bertkit.train.checkpoint import Checkpoint, latest_checkpoint, list_checkpoints, load_optimizer, save_checkpoint
from bertkit.train.optim import build_optimizer, lr_at, param_groups, warmup_steps

__all__ = ["Checkpoint", "build_optimizer", "latest_checkpoint", "list_checkpoints", "load_optimizer", "lr_at",
           "param_groups", "save_checkpoint", "warmup_steps"]
