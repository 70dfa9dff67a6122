"""Fine-tuning's hyper-parameters and run options, `Hyper`, with what `--resume` may do with each.

Every field declares its resume rule (pretraining's `RESUME_RULES`): what changes the numbers a
run computes is FIXED, since a resumed run must end bit for bit as the uninterrupted one would;
how often it saves is CHANGEABLE; `resume` itself is INVOCATION. The run options a command line
takes from here (`FLAGS`: `--save-every`, `--resume`) also carry their help and range in the
field's metadata, and `bertkit.cli.args.add_field_flags` builds their flags from it: each is
declared once. This module imports no torch (the CLI reads it before any work starts);
`finetune.loop` re-exports `Hyper`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bertkit.pretrain.setup import CHANGEABLE, FIXED, INVOCATION, resume_rules


def _option(resume: str, default=dataclasses.MISSING, *, help: str | None = None, low: int | None = None):
    """A field with its resume rule; with `help` (and `low`, the least value of an integer) it is
    also a command-line flag, --field-name."""
    metadata = {"resume": resume, **({"help": help} if help else {}), **({"low": low} if low is not None else {})}
    return field(default=default, metadata=metadata)


@dataclass
class Hyper:
    """The fine-tuning hyper-parameters (defaults: the paper's) and how a run saves its progress."""

    epochs: int = _option(FIXED, 3)
    lr: float = _option(FIXED, 2e-5)  # peak learning rate
    batch_size: int = _option(FIXED, 32)
    warmup: float = _option(FIXED, 0.1)  # below 1: fraction of the steps; otherwise a step count
    weight_decay: float = _option(FIXED, 0.01)
    max_grad_norm: float = _option(FIXED, 1.0)  # 0: no clipping
    seeds: tuple[int, ...] = _option(FIXED, (1, 2, 3))
    group_by_length: bool = _option(FIXED, False)  # batches of similar length: less padding, same examples per epoch
    classifier_dropout: float | None = _option(FIXED, None)  # dropout before the output layer; None: the config's
    eval_every: int | None = _option(FIXED, None)  # also score dev every N optimizer steps; None: after each epoch
    adam_eps: float = _option(FIXED, 1e-6)  # BERT's; transformers' Trainer defaults to 1e-8
    early_stopping: int | None = _option(FIXED, None)  # stop a seed after this many evaluations without improvement
    metric_for_best: str | None = _option(FIXED, None)  # keep each seed's best evaluation by this dev metric; None:
    # the last (with early_stopping alone: the task's main metric)
    save_every: int | None = _option(
        CHANGEABLE, None, low=0,
        help="checkpoint the running seed (weights, optimiser, random state, best evaluation so far) every N steps "
             "as well as at each evaluation, so a killed run loses at most N steps (default: at each evaluation only; "
             "0: no checkpoints, a killed run keeps its finished seeds only)")
    resume: bool = _option(
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


FLAGS = tuple(f.name for f in dataclasses.fields(Hyper) if "help" in f.metadata)  # the fields that are flags


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
