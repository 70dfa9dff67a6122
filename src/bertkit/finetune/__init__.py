"""Fine-tuning (paper §4): one generic loop, and one file per kind of task.

- `task.py`: the interface every task implements (`Task`, its defaults `TaskBase` and `HeadTask`,
  `Batch`, `Prepared`, `Runtime`);
- `loop.py`: the fine-tuning loop (the paper's recipe, several seeds, the best one saved);
- the tasks: `sequence.py` (GLUE, your tables), `ner.py` (token classification), `squad.py`
  (spans), `feature_ner.py` (a BiLSTM on frozen features, paper §5.3), `embedding.py` (a
  bi-encoder on text pairs, saved for sentence-transformers), `rerank.py` (a cross-encoder);
- `contrastive.py`: the bi-encoder's losses on sentence vectors, and GradCache;
- `ltr.py`: heads for a left-to-right model, with or without a BiLSTM (paper Table 5);
- `registry.py`: the one table of task names -> task classes, and a saved model -> the task it
  was trained for;
- `run.py`: `bertkit finetune` and `bertkit evaluate` as library calls (`run_job`, `evaluate_saved`);
- `search_space.py`, `tune.py`: `bertkit tune`, hyper-parameter search with Optuna (`run_study`).
"""

from bertkit.lazy import lazy_exports

# Imported on first use, so `bertkit finetune --help` and a mistyped flag need no torch.
_EXPORTS = {
    **dict.fromkeys(("Hyper", "SeedRun", "finetune", "summarize"), "bertkit.finetune.loop"),
    **dict.fromkeys(("GLUE_TASKS", "RUN_FILE", "TASKS", "TaskKind", "make_task", "task_for_model"),
                    "bertkit.finetune.registry"),
    **dict.fromkeys(("Batch", "HeadTask", "Prepared", "Runtime", "Task", "TaskBase"), "bertkit.finetune.task"),
    **dict.fromkeys(("TuneJob", "run_study"), "bertkit.finetune.tune"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
