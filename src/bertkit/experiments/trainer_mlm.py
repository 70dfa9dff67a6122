"""What the pretraining comparisons share (`bench/pretrain_recipes.py`, the `levers` and
`objectives` experiments): the masked-LM accuracy of a model on one fixed masking of a validation
split, and transformers' `Trainer` on `BertForMaskedLM` at the budget recipe's settings over a
wall-clock budget.

The Trainer run starts from the very weights bertkit's loop would draw (same seed, shape and init,
saved as an HF directory), follows the budget recipe's time-based lr schedule (`lr_at_time` in a
LambdaLR) and stops by the loop's rule (when the next step would end past the budget), so the two
implementations are compared at the same schedule over the same time.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path


class Scorer:
    """MLM accuracy on a prepared folder's validation split, masked once (15%, 80/10/10, fixed seed)."""

    def __init__(self, data: Path):
        from bertkit.data import Masker, PretrainingDataset, continuation_table
        from bertkit.data.masking import MaskingConfig
        from bertkit.pretrain.objective import Objective
        from bertkit.tokenizer import Tokenizer

        self.val = PretrainingDataset(data, split="val")
        m = self.val.manifest
        masker = Masker(MaskingConfig.from_rule("80/10/10", 0.15, False), int(m["vocab_size"]), int(m["mask_id"]),
                        list(m["special_ids"]), continuation_table(Tokenizer.from_pretrained(Path(data) / "tokenizer")))
        self.objective = Objective("mlm", masker, seed=12345)

    def __call__(self, model_dir: Path) -> float:
        import torch

        from bertkit.heads import BertForMaskedLM
        from bertkit.pretrain.objective import evaluate

        model = BertForMaskedLM.from_pretrained(model_dir)
        metrics = evaluate(model, self.objective, self.val, torch.device("cpu"), len(self.val), 64,
                           contextlib.nullcontext)
        return metrics["mlm_accuracy"]


def hf_clock(budget_s: float, warmup: float, peak: float, out: Path, marks: int):
    """A TrainerCallback that keeps the time schedule's clock, saves the model at `marks` evenly
    spaced times and stops training when the next step would end past the budget."""
    from transformers import TrainerCallback

    from bertkit.train.optim import lr_at_time

    class Clock(TrainerCallback):
        def __init__(self):
            self.t0, self.step_s, self.began, self.first, self.points = None, 0.0, 0.0, True, []

        def factor(self, _step=0) -> float:  # LambdaLR's multiplier of the peak lr
            if self.t0 is None:
                return 0.0
            return lr_at_time(time.perf_counter() - self.t0 + self.step_s, budget_s, warmup, peak) / peak

        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_begin(self, args, state, control, **kw):
            self.began = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kw):
            now = time.perf_counter()
            if not self.first:  # the first step is slow (set-up), as in bertkit's estimate
                self.step_s = 0.8 * self.step_s + 0.2 * (now - self.began) if self.step_s else now - self.began
            self.first = False
            elapsed = now - self.t0
            if elapsed >= budget_s * (len(self.points) + 1) / marks - 1e-9 and len(self.points) < marks - 1:
                path = out / f"step-{state.global_step:07d}"
                model.save_pretrained(path)
                self.points.append((elapsed, state.global_step, path))
            if elapsed + self.step_s > budget_s:
                control.should_training_stop = True
            return control

    return Clock()


def hf_dataset(data: Path):
    """The packed training instances as a list of feature dicts for the collator."""
    import numpy as np

    from bertkit.data import PretrainingDataset

    train = PretrainingDataset(data, split="train")
    batch = train.batch(np.arange(len(train)))
    return [{"input_ids": ids.tolist(), "attention_mask": mask.tolist()}
            for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]


def starting_weights(data: Path, init: str, out: Path, preset: str = "tiny", seed: int = 0,
                     config_overrides: dict | None = None) -> Path:
    """The budget run's starting weights, drawn as bertkit's loop draws them (same seed, shape and
    init) and saved as an HF directory, so the Trainer run starts from the very same model."""
    import torch

    from bertkit.heads import BertForMaskedLM
    from bertkit.pretrain.init import initialise
    from bertkit.pretrain.setup import TrainConfig, model_config

    cfg = TrainConfig(data=str(data), out=str(out), preset=preset, recipe="budget", seed=seed, init=init,
                      config_overrides=dict(config_overrides or {}))
    torch.manual_seed(seed)
    model = initialise(BertForMaskedLM(model_config(cfg, json.loads((Path(data) / "manifest.json").read_text()))),
                       init)
    model.save_pretrained(out)
    return out


def run_transformers(data: Path, vocab: Path, start: Path, out: Path, minutes: float, hyper: dict, marks: int,
                     preset: str = "tiny", seed: int = 0, config_overrides: dict | None = None) -> dict:
    """`Trainer` on `BertForMaskedLM` for `minutes` with `hyper` (the budget recipe's values as a run
    resolved them), from `starting_weights` drawn into `start`; the vocabulary folder `vocab`."""
    import torch
    import transformers
    from transformers import (
        BertForMaskedLM,
        BertTokenizerFast,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,
    )

    tokenizer = BertTokenizerFast(vocab_file=str(Path(vocab) / "vocab.txt"))
    start = starting_weights(data, hyper["init"], start, preset, seed, config_overrides)
    model = BertForMaskedLM.from_pretrained(start, hidden_dropout_prob=hyper["dropout"],
                                            attention_probs_dropout_prob=hyper["dropout"])
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=hyper["batch_size"],
                             learning_rate=hyper["lr"], weight_decay=hyper["weight_decay"], adam_epsilon=1e-6,
                             adam_beta2=hyper["adam_beta2"],
                             max_grad_norm=hyper["max_grad_norm"], max_steps=10**7, logging_steps=100,
                             save_strategy="no", report_to="none", use_cpu=True, dataloader_num_workers=0,
                             dataloader_pin_memory=False, disable_tqdm=True, seed=seed,
                             bf16=hyper["precision"] == "bf16")  # the budget recipe's autocast, as resolved
    clock = hf_clock(minutes * 60, hyper["warmup"], hyper["lr"], out, marks)

    class TimedTrainer(Trainer):
        def create_scheduler(self, num_training_steps, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, clock.factor)
            return self.lr_scheduler

    collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm_probability=0.15)
    trainer = TimedTrainer(model=model, args=args, train_dataset=hf_dataset(data), data_collator=collator,
                           callbacks=[clock])
    result = trainer.train()
    final = out / "model"
    model.save_pretrained(final)
    return {"final": final, "steps": result.global_step, "last_lr": trainer.lr_scheduler.get_last_lr()[0],
            "elapsed_s": time.perf_counter() - clock.t0, "points": clock.points,
            "hyper": {**hyper, "objective": "mlm"}, "transformers": transformers.__version__}
