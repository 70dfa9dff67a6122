"""Everything a pretraining run resolves before its first step.

`TrainConfig` is the run's arguments as a frozen dataclass (saved in RUN_DIR/config.json);
`open_data` opens the prepared data and its tokenizer; `model_config` builds the model's shape
from a preset, the data's vocabulary and overrides; `check_run_dir` refuses to overwrite a run
(unless `overwrite`); `check_resume` refuses to continue a checkpoint with another model shape,
objective, batch, masking, data or tokenizer, naming what differs, and returns the options a
resumed run may change (learning rate, length, cadences), which `run_record` appends to
RUN/config.json's "resumes" instead of rewriting the run's original arguments.
All user mistakes become a one-line `UserError`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.pretrain.objective import OBJECTIVES


@dataclass(frozen=True)
class TrainConfig:
    data: str  # DATA_DIR written by `bertkit prepare`
    out: str  # RUN_DIR: checkpoints, metrics, plots, final model
    preset: str = "mini"  # model shape, see bertkit.config.PRESETS
    steps: int | None = None  # optimizer updates; default 1000 unless `minutes` is given
    minutes: float | None = None  # wall-clock budget instead of a step count
    # The next seven fields: None takes the recipe's value (bertkit.pretrain.recipes.RECIPES).
    recipe: str = "paper"  # "paper" (BERT's settings) or "budget" (what learns most in little time)
    objective: str | None = None  # "mlm+nsp", "mlm" or "ltr"
    batch_size: int | None = None  # sequences per update, over all processes and micro-steps
    grad_accum: int = 1  # micro-steps per update
    lr: float | None = None  # peak learning rate
    warmup: float | None = None  # below 1: fraction of the run; otherwise steps
    weight_decay: float | None = None  # decoupled, not on biases and LayerNorm
    dropout: float | None = None  # every dropout while pretraining; None: the model config's (saved as is)
    precision: str | None = None  # "fp32", "bf16" (autocast) or "auto" (bf16 where the hardware runs it fast)
    adam_beta2: float | None = None  # AdamW's second-moment decay
    init: str | None = None  # a new model's weights: "bert" (N(0, 0.02)) or "scaled" (bertkit.pretrain.init)
    mask_rate: float = 0.15  # fraction of tokens predicted
    whole_word_mask: bool = False  # mask all pieces of a word together
    mask_rule: str = "80/10/10"  # of the chosen tokens, percent [MASK] / random / kept (Table 8's ablations)
    compile: bool = False  # torch.compile the model
    save_every: int = 1000  # steps between checkpoints
    eval_every: int = 500  # steps between validations
    log_every: int = 10  # steps between status lines
    eval_samples: int = 512  # size of the fixed validation subset
    keep: int = 2  # checkpoints kept
    seed: int = 0
    resume: bool = False  # continue from RUN_DIR's newest complete checkpoint
    max_grad_norm: float = 1.0  # clip the global gradient norm; 0 disables
    device: str = "auto"  # "auto", "cpu" or "cuda"
    tokenizer: str | None = None  # when given, must be the tokenizer DATA_DIR was prepared with
    config_overrides: dict = field(default_factory=dict)  # BertConfig fields to change
    overwrite: bool = False  # start again in a RUN_DIR that holds a previous run, deleting it
    init_from: str | None = None  # continued pretraining: start from this HF BERT directory's weights


    def __post_init__(self):
        from bertkit.pretrain.recipes import RECIPE_FIELDS, resolve

        for name, value in resolve(self.recipe, {k: getattr(self, k) for k in RECIPE_FIELDS}).items():
            object.__setattr__(self, name, value)  # frozen: filled once, here
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise UserError(f"dropout must be in [0, 1), not {self.dropout}")
        if self.objective not in OBJECTIVES:
            raise UserError(f"objective must be one of {', '.join(OBJECTIVES)}, not {self.objective!r}")
        if not 0 < self.adam_beta2 < 1:
            raise UserError(f"adam_beta2 must be in (0, 1), not {self.adam_beta2}")
        from bertkit.pretrain.init import INITS

        if self.init not in INITS:
            raise UserError(f"init must be one of {', '.join(INITS)}, not {self.init!r}")
        if self.precision not in ("fp32", "bf16", "auto"):
            raise UserError(f"precision must be fp32, bf16 or auto, not {self.precision!r}")
        if self.steps is not None and self.minutes is not None:
            raise UserError("give steps or minutes, not both")
        for name in ("batch_size", "grad_accum", "save_every", "eval_every", "log_every"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1, not {getattr(self, name)}")
        if (self.steps is not None and self.steps < 1) or (self.minutes is not None and self.minutes <= 0):
            raise UserError("steps / minutes must be positive")
        if self.minutes is not None and self.warmup >= 1:
            raise UserError("with a time budget (minutes), give warmup as a fraction of the run (below 1)")
        if self.warmup < 0:
            raise UserError(f"warmup must be >= 0, not {self.warmup}")
        if not 0 < self.mask_rate < 1:
            raise UserError(f"mask_rate must be between 0 and 1, not {self.mask_rate}")
        if not self.lr > 0:
            raise UserError(f"lr must be positive, not {self.lr}")
        for name in ("weight_decay", "max_grad_norm", "seed", "eval_samples", "keep"):
            if getattr(self, name) < 0:
                raise UserError(f"{name} must be at least 0, not {getattr(self, name)}")
        if self.resume and self.overwrite:
            raise UserError("resume continues a run and overwrite starts it again: choose one")
        if self.init_from and self.objective == "ltr":
            raise UserError("init_from continues a bidirectional model: use objective mlm or mlm+nsp, not ltr")
        if self.init_from and self.config_overrides:
            raise UserError("init_from takes the model's shape from its config.json: give no config overrides")
        try:
            self.masking()
        except ValueError as e:
            raise UserError(str(e)) from None

    def masking(self):
        """The run's MaskingConfig: rate, the MASK/random/keep rule, whole words or pieces."""
        from bertkit.data.masking import MaskingConfig

        return MaskingConfig.from_rule(self.mask_rule, self.mask_rate, self.whole_word_mask)

    @property
    def time_schedule(self) -> bool:
        """The budget recipe with `minutes`: the lr follows wall-clock time to 0 at the deadline
        (bertkit.train.optim.lr_at_time), and the loop stops before a step would overrun it."""
        return self.recipe == "budget" and self.minutes is not None

    @property
    def total_steps(self) -> int | None:
        """The step count, or None for a time-budgeted run."""
        if self.minutes is not None:
            return None
        return self.steps if self.steps is not None else 1000

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Arguments a resumed run must share with the run it continues: they fix what it computes.
# (weight_decay too: the optimizer's groups come back from the checkpoint.) The model's shape
# (preset, config_overrides), the data and the tokenizer are compared by what they resolve to.
_RESUME_FIXED = ("objective", "batch_size", "grad_accum", "seed", "mask_rate", "whole_word_mask", "mask_rule",
                 "weight_decay", "init_from", "recipe", "dropout", "adam_beta2", "init")
# Never recorded as a change: how this invocation was asked to treat the folder.
_RESUME_IGNORED = ("resume", "overwrite")
# Manifest entries that say when and from where data was made, not what it holds.
_DATA_IGNORED = ("args", "created", "bertkit_version")
RUN_MARKERS = ("config.json", "checkpoints", "metrics.jsonl", "model")  # what a previous run left


def parse_overrides(text: str | None) -> dict:
    """`--config-json`: a JSON object, inline or in a file, of BertConfig fields."""
    if not text:
        return {}
    source: object = None
    if not text.lstrip().startswith("{"):
        source = Path(text)
        if not source.is_file():
            raise UserError("--config-json: neither a JSON object nor a file", source)
        text = source.read_text(encoding="utf-8")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"--config-json is not valid JSON ({e})", source) from None
    if not isinstance(value, dict):
        raise UserError("--config-json must be a JSON object of model config fields", source)
    return value


def model_config(cfg: TrainConfig, manifest: dict) -> BertConfig:
    """The preset, fitted to the data's vocabulary and length, with the overrides applied; for
    continued pretraining, the starting model's own config."""
    if cfg.init_from:
        return _init_config(cfg, manifest)
    names = {f.name for f in dataclasses.fields(BertConfig)}
    unknown = sorted(set(cfg.config_overrides) - names)
    if unknown:
        raise UserError(f"--config-json: unknown model config field(s) {', '.join(unknown)}")
    changes = {"vocab_size": int(manifest["vocab_size"]), "pad_token_id": int(manifest["pad_id"]),
               **cfg.config_overrides}
    if cfg.objective == "ltr":
        changes["attention"] = "causal"
    try:
        config = BertConfig.preset(cfg.preset, **changes)
    except (TypeError, ValueError) as e:
        raise UserError(f"bad model config: {e}") from None
    if config.max_position_embeddings < int(manifest["max_seq_len"]):
        raise UserError(f"max_position_embeddings {config.max_position_embeddings} is below the data's "
                        f"max_seq_len {manifest['max_seq_len']}: raise it with --config-json")
    return config


def _init_config(cfg: TrainConfig, manifest: dict) -> BertConfig:
    """The config of the model `init_from` names, checked against the prepared data."""
    from bertkit.hf import load_config

    config = load_config(cfg.init_from)
    if config.attention == "causal":
        raise UserError("is a left-to-right (causal) model; continued pretraining runs MLM", cfg.init_from)
    if int(manifest["vocab_size"]) > config.vocab_size:
        raise UserError(f"the data's vocabulary ({manifest['vocab_size']} entries) is larger than the model's "
                        f"({config.vocab_size})", cfg.init_from)
    if config.max_position_embeddings < int(manifest["max_seq_len"]):
        raise UserError(f"the model has {config.max_position_embeddings} positions but the data's max_seq_len is "
                        f"{manifest['max_seq_len']}: prepare it with a smaller --max-seq-len", cfg.init_from)
    return config


def open_data(cfg: TrainConfig):
    """(train dataset, validation dataset or None, tokenizer) for DATA_DIR, checked."""
    from bertkit.data import PretrainingDataset, check_tokenizer
    from bertkit.tokenizer import Tokenizer

    data = Path(cfg.data)
    if not data.is_dir():
        raise UserError("no such data directory (make one with `bertkit prepare`)", data)
    train = PretrainingDataset(data, split="train")
    if len(train) == 0:
        raise UserError("the train split holds no sequences", data)
    try:
        val = PretrainingDataset(data, split="val")
    except UserError:
        val = None  # data prepared without a validation split: the run just skips evaluation
    tokenizer = Tokenizer.from_pretrained(data / "tokenizer")
    if cfg.tokenizer:
        check_tokenizer(data, Tokenizer.from_pretrained(cfg.tokenizer))
    if cfg.init_from:  # continued pretraining keeps the model's tokenizer: the data must use it
        own = Tokenizer.from_pretrained(cfg.init_from)
        if own.fingerprint != train.manifest["tokenizer_fingerprint"]:
            raise UserError(f"was prepared with another vocabulary ({train.manifest['tokenizer_fingerprint']}) than "
                            f"--init-from's ({own.fingerprint}): prepare it with --tokenizer {cfg.init_from}", data)
    if cfg.objective == "mlm+nsp" and train.manifest.get("format") != "nsp":
        raise UserError(f"--objective mlm+nsp needs data prepared with sentence pairs (format nsp), "
                        f"this is {train.manifest.get('format')!r}: use --objective mlm", data)
    return train, val, tokenizer


def data_note(cfg: TrainConfig, manifest: dict) -> str | None:
    """A hint, once every check has passed, when the budget recipe's MLM gets padded sentence pairs."""
    if cfg.recipe == "budget" and cfg.objective == "mlm" and manifest.get("format") != "packed":
        return (f"note: {cfg.data} holds sentence pairs with padding; the budget recipe learns more per minute on "
                f"packed sequences (bertkit prepare --format packed)")
    return None


def check_run_dir(cfg: TrainConfig, has_checkpoint: bool) -> None:
    """Refuse to write into an existing run without --resume (or --overwrite), and to overwrite
    a folder that is not a previous run."""
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise UserError("exists and is not a folder", out)
    if cfg.resume or not (out.exists() and any(out.iterdir())):
        return
    if not any((out / m).exists() for m in RUN_MARKERS):
        raise UserError("is a folder of other files, not a previous run; choose another --out", out)
    if not cfg.overwrite:
        raise UserError("run folder exists; pass --resume to continue it, --overwrite to start it again, "
                        "or choose another --out", out)


def clear_run_dir(cfg: TrainConfig) -> None:
    """--overwrite, once every check has passed: delete the previous run's files."""
    import shutil

    out = Path(cfg.out)
    for name in RUN_MARKERS:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for plot in out.glob("*.png"):
        plot.unlink()


def read_run_config(out: str | Path) -> dict:
    from bertkit.io import read_json

    return read_json(Path(out) / "config.json", "a run's config")


def _in_force(saved: dict) -> dict:
    """The run's arguments as they stand after its recorded resumes."""
    train = dict(saved.get("train", {}))
    for resume in saved.get("resumes", []):
        train.update({k: change[1] for k, change in resume.get("changed", {}).items()})
    return train


def _differences(before: dict, now: dict, keys) -> list[str]:
    return [f"{k} {before[k]!r} -> {now[k]!r}" for k in keys if k in before and k in now and before[k] != now[k]]


def check_resume(cfg: TrainConfig, checkpoint_dir: Path, manifest: dict) -> dict:
    """Refuse to continue a checkpoint that this run would not continue exactly: another
    objective, batch, seed or masking; another model shape; other data or another tokenizer.
    Returns the options that do change, {name: [before, now]}, for the run's history."""
    from bertkit.hf import load_config

    out = Path(cfg.out)
    saved = read_run_config(out) if (out / "config.json").is_file() else {}
    before, now = _in_force(saved), cfg.to_dict()
    problems = _differences(before, now, _RESUME_FIXED)
    if "data" in saved:
        keys = sorted(set(saved["data"]) | set(manifest))
        old_data = {k: v for k, v in saved["data"].items() if k not in _DATA_IGNORED}
        new_data = {k: v for k, v in manifest.items() if k not in _DATA_IGNORED}
        changed = [k for k in keys if k not in _DATA_IGNORED and old_data.get(k) != new_data.get(k)]
        if changed:
            shown = [f"{k} {old_data.get(k)!r} -> {new_data.get(k)!r}" if not isinstance(new_data.get(k), dict)
                     else k for k in changed]
            problems.append(f"data (another prepared corpus: {', '.join(shown[:4])})")
    trained = dataclasses.asdict(load_config(checkpoint_dir))
    asked = dataclasses.asdict(model_config(cfg, manifest))
    shape = _differences(trained, asked, trained)
    if shape:
        problems.append(f"model shape from --preset/--config-json ({', '.join(shape)})")
    if problems:
        raise UserError(f"--resume with settings that differ from the checkpoint it continues: {'; '.join(problems)}"
                        f" (give the run's own settings, or start a new run in another --out)", out)
    return {k: [before.get(k), now[k]] for k in now
            if k not in _RESUME_IGNORED and k not in _RESUME_FIXED and before.get(k) != now[k]}


def run_record(cfg: TrainConfig, model: dict, manifest: dict, extra: dict, resumed_step: int | None,
               changes: dict) -> dict:
    """RUN/config.json's content: a new run's arguments, or the original ones with this resume
    (its step, time and changed options) appended to "resumes"."""
    import time

    if resumed_step is None or not (Path(cfg.out) / "config.json").is_file():
        return {"model": model, "train": cfg.to_dict(), "data": manifest, **extra, "resumes": []}
    saved = read_run_config(cfg.out)
    resume = {"step": resumed_step, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "changed": changes, **extra}
    return {**saved, "resumes": [*saved.get("resumes", []), resume]}
