"""Pretraining (paper §3.1): MLM + NSP, MLM only, left-to-right, or ELECTRA's replaced-token
detection, from prepared shards.

- `setup.py`: `TrainConfig` (a run's options: defaults, checks, resume rules, the names they take)
  and everything resolved before the first step;
- `recipes.py`: the named recipes (`paper`, `budget`) that fill the options left unset, and why;
- `init.py`: a new model's starting weights;
- `build.py`: the model and objective a run's options name (new, from --init-from, from a
  checkpoint), and the final model folders;
- `objective.py`: inputs and labels per objective, summed losses, validation;
- `loop.py`: the pretraining loop (`pretrain(cfg)`), resumable and data-parallel;
- `report.py`: the status line, metrics.jsonl, throughput and MFU.
"""

from bertkit.lazy import lazy_exports

# Imported on first use, so the CLI reads TrainConfig's names and the recipes without torch.
_EXPORTS = {
    "DataStream": "bertkit.pretrain.loop",
    "pretrain": "bertkit.pretrain.loop",
    "Objective": "bertkit.pretrain.objective",
    "next_token_labels": "bertkit.pretrain.objective",
    "OBJECTIVES": "bertkit.pretrain.setup",
    "TrainConfig": "bertkit.pretrain.setup",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
