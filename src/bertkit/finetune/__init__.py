"""Fine-tuning (paper §4): one generic loop, and one file per kind of task.

- `task.py`: the interface every task implements (`Task`, `Batch`, `Prepared`, `Runtime`);
- `loop.py`: the fine-tuning loop (the paper's recipe, several seeds, the best one saved);
- `sequence.py` (GLUE, your tables), `ner.py` (token classification), `squad.py` (spans),
  `feature_ner.py` (a BiLSTM on frozen features, paper §5.3);
- `registry.py`: task names -> task objects, and a saved model -> the task it was trained for.
"""

from bertkit.finetune.loop import Hyper, SeedRun, finetune, summarize
from bertkit.finetune.registry import GLUE_TASKS, RUN_FILE, TASKS, make_task, task_for_model
from bertkit.finetune.task import Batch, Prepared, Runtime, Task

__all__ = ["GLUE_TASKS", "RUN_FILE", "TASKS", "Batch", "Hyper", "Prepared", "Runtime", "SeedRun", "Task",
           "finetune", "make_task", "summarize", "task_for_model"]
