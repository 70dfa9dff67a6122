"""Fine-tuning's hyper-parameters and run options, `Hyper`, with what `--resume` may do with each.

Every field declares its resume rule (pretraining's `RESUME_RULES`): what changes the numbers a
run computes is FIXED, since a resumed run must end bit for bit as the uninterrupted one would;
how often it saves is CHANGEABLE; `resume` itself is INVOCATION. Every field is also a flag of
`bertkit finetune` (`FLAGS`): its help, range and metavar live in the field's metadata, from which
`bertkit.cli.args.add_option_flags` makes the flag, and `command_line` writes a `Hyper` back as
flags: each option is declared once. This module imports no torch (the CLI reads it before any work starts);
`finetune.loop` re-exports `Hyper`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bertkit.pretrain.options import (
    CHANGEABLE,
    FIXED,
    INVOCATION,
    NONNEGATIVE,
    NONNEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    PROBABILITY,
    flag_words,
    option,
    resume_rules,
)


@dataclass
class Hyper:
    """The fine-tuning hyper-parameters (defaults: the paper's) and how a run saves its progress."""

    epochs: int = option(FIXED, 3, range=POSITIVE_INT, help="passes over the training set, per seed")
    lr: float = option(FIXED, 2e-5, range=POSITIVE, flag_default=None,
                        help="peak learning rate (default 2e-5; 1e-3 for the --feature-based tagger)")
    batch_size: int = option(FIXED, 32, range=POSITIVE_INT, help="training examples per step")
    warmup: float = option(FIXED, 0.1, range=NONNEGATIVE, help="warm-up: below 1 a fraction of the steps, else steps")
    weight_decay: float = option(FIXED, 0.01, range=NONNEGATIVE, help="AdamW's decoupled weight decay")
    max_grad_norm: float = option(
        FIXED, 1.0, range=NONNEGATIVE,
        help="clip the gradient's global norm at this value before each step, as the paper (0: no clipping)")
    seeds: tuple[int, ...] = option(FIXED, (1, 2, 3), metavar="SEEDS", flag_default="1,2,3",
                                     help="comma-separated seeds; one full fine-tuning run per seed")
    group_by_length: bool = option(FIXED, False,
                                    help="batch inputs of similar length together (less padding; faster on CPU)")
    classifier_dropout: float | None = option(
        FIXED, None, range=PROBABILITY,
        help="dropout on the vector the output layer reads, in [0, 1) (default: the model config's "
             "classifier_dropout, else its hidden_dropout_prob: 0.1 for BERT)")
    eval_every: int | None = option(
        FIXED, None, range=POSITIVE_INT, metavar="N",
        help="also score dev every N optimizer steps, for the learning curve (default: after each epoch only)")
    adam_eps: float = option(FIXED, 1e-6, range=POSITIVE,
                              help="AdamW's epsilon (default 1e-6, BERT's; transformers' Trainer uses 1e-8)")
    early_stopping: int | None = option(
        FIXED, None, range=POSITIVE_INT, metavar="PATIENCE",
        help="stop a seed after PATIENCE dev evaluations in a row without improving --metric-for-best, and save "
             "its best evaluation's weights (default: train every epoch)")
    metric_for_best: str | None = option(
        FIXED, None, metavar="NAME",
        help="save each seed's best evaluation by this dev metric (greater is better; lower for a name ending in "
             "'loss'), and the seed whose best is best (default: the last evaluation by the task's main metric; "
             "with --early-stopping, the main metric)")
    save_every: int | None = option(
        CHANGEABLE, None, range=NONNEGATIVE_INT, metavar="N",
        help="checkpoint the running seed (weights, optimiser, random state, best evaluation so far) every N steps "
             "as well as at each evaluation, so a killed run loses at most N steps (default: at each evaluation only; "
             "0: no checkpoints, a killed run keeps its finished seeds only)")
    resume: bool = option(
        INVOCATION, False,
        help="continue the unfinished run of the same command in --out: its finished seeds are kept and the running "
             "one continues from its newest checkpoint, ending as the uninterrupted run would; another setting is "
             "refused")

    @property
    def keep_best(self) -> bool:
        """Whether each seed's model is its best evaluation's (else its last)."""
        return self.early_stopping is not None or self.metric_for_best is not None

    @property
    def checkpoints(self) -> bool:
        """Whether the running seed is checkpointed at all (`save_every` 0: never)."""
        return self.save_every != 0


FLAGS = tuple(f.name for f in dataclasses.fields(Hyper))  # every field is a `bertkit finetune` flag
RUN_FLAGS = ("save_every", "resume")  # how a run saves and continues, not what it computes


def command_line(hp: Hyper) -> list[str]:
    """The `bertkit finetune` flags that give `hp` (with --lr always, --resume when set)."""
    return flag_words(hp, dataclasses.fields(Hyper))


def fixed_fields() -> list[str]:
    """The fields a resumed run must keep as they were."""
    return [name for name, rule in resume_rules(Hyper).items() if rule == FIXED]


def as_record(hp: Hyper) -> dict:
    """The hyper-parameters as JSON holds them (the seeds a list)."""
    return {**dataclasses.asdict(hp), "seeds": list(hp.seeds)}


def resume_settings(hp: Hyper, job: dict) -> dict:
    """What a resumed run must find as it was: `job` (the command's other settings that fix what it
    computes) and the FIXED hyper-parameters."""
    return {**job, "hyper": {k: v for k, v in as_record(hp).items() if k in fixed_fields()}}
