"""Pretraining (paper §3.1): MLM + NSP, MLM only, or left-to-right, from prepared shards.

- `setup.py`: `TrainConfig` (a run's arguments) and everything resolved before the first step;
- `objective.py`: inputs and labels per objective, summed losses, validation;
- `loop.py`: the pretraining loop (`pretrain(cfg)`), resumable and data-parallel;
- `report.py`: the status line, metrics.jsonl, throughput and MFU.
"""

from bertkit.pretrain.loop import DataStream, pretrain
from bertkit.pretrain.objective import OBJECTIVES, Objective, next_token_labels
from bertkit.pretrain.setup import TrainConfig

__all__ = ["OBJECTIVES", "DataStream", "Objective", "TrainConfig", "next_token_labels", "pretrain"]
