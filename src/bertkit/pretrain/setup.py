"""Everything a pretraining run resolves before its first step.

`TrainConfig` is the run's options as a frozen dataclass (saved in RUN_DIR/config.json), complete
once built: the recipe's values fill the fields a caller left unset, and every check of the options
runs here, once, raising an `OptionError` that names them as fields (or, for the CLI, as flags).
Each field declares what `--resume` may do with it (`RESUME_RULES`). `open_data` opens the
prepared data and its tokenizer; `model_config` builds the model's shape from a preset, the data's
vocabulary and overrides; `check_run_dir` refuses to overwrite a run (unless `overwrite`);
`check_resume` refuses to continue a checkpoint with another model shape, objective, batch,
masking, data or tokenizer, naming what differs, and returns the options a resumed run changes
(learning rate, length, cadences), which `run_record` appends to RUN/config.json's "resumes"
instead of rewriting the run's original arguments. All user mistakes become a one-line `UserError`.
This module imports no torch: the CLI takes its flags' choices from here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.pretrain.recipes import RECIPES, fill
from bertkit.tracking import REPORT_TO

# MLM + NSP (BERT), MLM only, left-to-right, replaced-token detection (ELECTRA) (bertkit.pretrain.objective)
OBJECTIVES = ("mlm+nsp", "mlm", "ltr", "electra")
RTD_WEIGHT = 50.0  # ELECTRA's weight of the discriminator's loss against the generator's (Clark et al. 2020)
INITS = ("bert", "scaled")  # a new model's weights (bertkit.pretrain.init)
PRECISIONS = ("fp32", "bf16", "auto")  # bertkit.devices.resolve_precision

# What `--resume` may do with each field (`check_resume`):
FIXED = "fixed"  # must be the same: it fixes what the run computes
RESOLVED = "resolved"  # fixed by what it names (the model's shape, the data, the tokenizer), compared there
CHANGEABLE = "changeable"  # may change; the change is recorded in RUN/config.json's "resumes"
INVOCATION = "invocation"  # how this invocation treats RUN_DIR; never recorded
RESUME_RULES = (FIXED, RESOLVED, CHANGEABLE, INVOCATION)


def _option(resume: str, default=dataclasses.MISSING, *, flag: str | None = None,
            default_factory=dataclasses.MISSING):
    """A field with its resume rule, and its `bertkit pretrain` flag where that is not --field-name."""
    metadata = {"resume": resume, **({"flag": flag} if flag else {})}
    return field(default=default, default_factory=default_factory, metadata=metadata)


@dataclass(frozen=True)
class TrainOptions:
    """A run's options as a caller gives them: a recipe field may be None (the recipe's value).
    Build a `TrainConfig`, which fills them and checks the whole."""

    data: str = _option(RESOLVED)  # DATA_DIR written by `bertkit prepare` (compared by its manifest)
    out: str = _option(CHANGEABLE)  # RUN_DIR: checkpoints, metrics, plots, final model
    preset: str = _option(RESOLVED, "mini")  # model shape, see bertkit.config.PRESETS
    steps: int | None = _option(CHANGEABLE, None)  # optimizer updates; default 1000 unless `minutes` is given
    minutes: float | None = _option(CHANGEABLE, None)  # wall-clock budget instead of a step count
    # The recipe, then the nine fields it fills: None takes its value (bertkit.pretrain.recipes).
    recipe: str = _option(FIXED, "paper")  # "paper" (BERT's settings) or "budget" (what learns most in little time)
    objective: str | None = _option(FIXED, None)  # one of OBJECTIVES
    batch_size: int | None = _option(FIXED, None)  # sequences per update, over all processes and micro-steps
    lr: float | None = _option(CHANGEABLE, None)  # peak learning rate
    warmup: float | None = _option(CHANGEABLE, None)  # below 1: fraction of the run; otherwise steps
    weight_decay: float | None = _option(FIXED, None)  # decoupled, not on biases and LayerNorm (in the checkpoint)
    dropout: float | None = _option(FIXED, None)  # every dropout while pretraining; None: the model config's
    precision: str | None = _option(CHANGEABLE, None)  # "fp32", "bf16" (autocast) or "auto" (bf16 where fast)
    adam_beta2: float | None = _option(FIXED, None)  # AdamW's second-moment decay
    init: str | None = _option(FIXED, None)  # a new model's weights: one of INITS (bertkit.pretrain.init)
    grad_accum: int = _option(FIXED, 1)  # micro-steps per update
    mask_rate: float = _option(FIXED, 0.15)  # fraction of tokens predicted
    whole_word_mask: bool = _option(FIXED, False)  # mask all pieces of a word together
    mask_rule: str = _option(FIXED, "80/10/10")  # of the chosen tokens, percent [MASK] / random / kept (Table 8)
    # electra only: the generator's fraction of the discriminator's width; None: 1/4, 1/3 from hidden 768
    generator_width: float | None = _option(FIXED, None)
    rtd_weight: float | None = _option(FIXED, None)  # electra only: the discriminator's loss weight; None: RTD_WEIGHT
    compile: bool = _option(CHANGEABLE, False)  # torch.compile the model
    save_every: int = _option(CHANGEABLE, 1000)  # steps between checkpoints
    eval_every: int = _option(CHANGEABLE, 500)  # steps between validations
    log_every: int = _option(CHANGEABLE, 10)  # steps between status lines
    eval_samples: int = _option(CHANGEABLE, 512)  # size of the fixed validation subset
    keep: int = _option(CHANGEABLE, 2)  # checkpoints kept
    seed: int = _option(FIXED, 0)  # seed of the initial weights, data order, masking and dropout
    resume: bool = _option(INVOCATION, False)  # continue from RUN_DIR's newest complete checkpoint
    max_grad_norm: float = _option(CHANGEABLE, 1.0)  # clip the global gradient norm; 0 disables
    device: str = _option(CHANGEABLE, "auto")  # "auto", "cpu" or "cuda"
    tokenizer: str | None = _option(RESOLVED, None)  # when given, must be the tokenizer DATA_DIR was prepared with
    # BertConfig fields (`_option` returns a field(): each config gets its own dict from default_factory)
    config_overrides: dict = _option(RESOLVED, flag="--config-json", default_factory=dict)  # noqa: RUF009
    overwrite: bool = _option(INVOCATION, False)  # start again in a RUN_DIR that holds a previous run, deleting it
    init_from: str | None = _option(FIXED, None)  # continued pretraining: this HF BERT directory's weights
    report_to: str = _option(CHANGEABLE, "none")  # live curves: one of bertkit.tracking.REPORT_TO (RUN/tensorboard)


class TrainConfig(TrainOptions):
    """A run's options, complete and checked: `TrainConfig(data=..., out=..., recipe="budget", lr=5e-4)`
    takes the budget recipe's value for every recipe field not given (or given as None)."""

    def __init__(self, data: str, out: str, *, recipe: str = "paper", **options):
        if recipe not in RECIPES:
            raise OptionError("{} must be one of {names}, not {value!r}", "recipe", names=", ".join(RECIPES),
                              value=recipe)
        options = fill(recipe, options)
        if options.get("objective") == "electra" and options.get("rtd_weight") is None:
            options["rtd_weight"] = RTD_WEIGHT
        super().__init__(data, out, recipe=recipe, **options)
        _check(self)

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


class OptionError(UserError):
    """A run's option out of its range, or options that do not go together. The message names them
    as TrainConfig's fields; `flags()` names them as `bertkit pretrain`'s flags."""

    def __init__(self, template: str, *fields: str, **values):
        """`template`: str.format text with one {} per name in `fields` and {key} for each of `values`."""
        super().__init__(template.format(*fields, **values))
        self.template, self.fields, self.values = template, fields, values

    def flags(self) -> str:
        return self.template.format(*map(_flag, self.fields), **self.values)


def _flag(name: str) -> str:
    """The `bertkit pretrain` flag of a TrainConfig field."""
    found = next(f for f in dataclasses.fields(TrainOptions) if f.name == name)
    return found.metadata.get("flag", "--" + name.replace("_", "-"))


def _check(cfg: TrainConfig) -> None:
    """Every check of a run's options, in one place: an OptionError naming the first wrong one."""
    _check_ranges(cfg)
    if cfg.steps is not None and cfg.minutes is not None:
        raise OptionError("give {} or {}, not both", "steps", "minutes")
    if cfg.minutes is not None and cfg.warmup >= 1:
        raise OptionError("with {}, give {} as a fraction of the run (below 1)", "minutes", "warmup")
    if cfg.resume and cfg.overwrite:
        raise OptionError("{} continues a run and {} starts it again: give one", "resume", "overwrite")
    if cfg.init_from and cfg.objective == "ltr":
        raise OptionError("{} continues a bidirectional model: use {} mlm, mlm+nsp or electra", "init_from",
                          "objective")
    for name in ("generator_width", "rtd_weight"):
        if cfg.objective != "electra" and getattr(cfg, name) is not None:
            raise OptionError("{} applies to {} electra only", name, "objective")
    if cfg.init_from and cfg.config_overrides:
        raise OptionError("{} does not apply with {}: the model's shape is its config.json", "config_overrides",
                          "init_from")
    unknown = sorted(set(cfg.config_overrides) - {f.name for f in dataclasses.fields(BertConfig)})
    if unknown:
        raise OptionError("{}: unknown model config field(s) {names}", "config_overrides", names=", ".join(unknown))
    try:  # the overrides on their own (model_config checks them against the data once it is open)
        if not cfg.init_from:
            BertConfig.preset(cfg.preset, **cfg.config_overrides)
    except ValueError as e:
        raise OptionError("{}: bad model config: {problem}", "config_overrides", problem=e) from None
    try:
        cfg.masking()
    except ValueError as e:
        raise OptionError("{}: {problem}", "mask_rule", problem=e) from None


def _check_ranges(cfg: TrainConfig) -> None:
    """Each option on its own: one of its names, or in its range."""
    for name, names in (("objective", OBJECTIVES), ("init", INITS), ("report_to", REPORT_TO)):
        if getattr(cfg, name) not in names:
            raise OptionError("{} must be one of {names}, not {value!r}", name, names=", ".join(names),
                              value=getattr(cfg, name))
    if cfg.precision not in PRECISIONS:
        raise OptionError("{} must be fp32, bf16 or auto, not {value!r}", "precision", value=cfg.precision)
    if cfg.dropout is not None and not 0 <= cfg.dropout < 1:
        raise OptionError("{} must be in [0, 1), not {value}", "dropout", value=cfg.dropout)
    for name in ("adam_beta2", "mask_rate", "generator_width"):
        if getattr(cfg, name) is not None and not 0 < getattr(cfg, name) < 1:
            raise OptionError("{} must be in (0, 1), not {value}", name, value=getattr(cfg, name))
    for name in ("steps", "minutes", "lr", "rtd_weight"):
        if getattr(cfg, name) is not None and not getattr(cfg, name) > 0:
            raise OptionError("{} must be positive, not {value}", name, value=getattr(cfg, name))
    for name in ("batch_size", "grad_accum", "save_every", "eval_every", "log_every"):
        if getattr(cfg, name) < 1:
            raise OptionError("{} must be at least 1, not {value}", name, value=getattr(cfg, name))
    for name in ("warmup", "weight_decay", "max_grad_norm", "seed", "eval_samples", "keep"):
        if getattr(cfg, name) < 0:
            raise OptionError("{} must be at least 0, not {value}", name, value=getattr(cfg, name))


def command_line(cfg: TrainConfig) -> list[str]:
    """`bertkit pretrain` with every option `cfg` resolved to as a flag (a new run's: no --resume)."""
    words = ["bertkit", "pretrain"]
    for f in dataclasses.fields(TrainOptions):
        value = getattr(cfg, f.name)
        if f.metadata["resume"] != INVOCATION and value is not None and value is not False and value != {}:
            text = json.dumps(value) if isinstance(value, dict) else str(value)
            words += [_flag(f.name)] if value is True else [_flag(f.name), text]
    return words


def resume_rules(cls: type = TrainOptions) -> dict[str, str]:
    """Each field's resume rule (RESUME_RULES); a TypeError naming a field that declares none, so
    a new option cannot slip through `--resume` unchecked."""
    rules = {f.name: f.metadata.get("resume") for f in dataclasses.fields(cls)}
    missing = [name for name, rule in rules.items() if rule not in RESUME_RULES]
    if missing:
        raise TypeError(f"{cls.__name__} field(s) {', '.join(missing)} declare no resume rule: give each "
                        f"_option(rule, default) with a rule of {', '.join(RESUME_RULES)}")
    return rules


# Manifest entries that say when and from where data was made, not what it holds.
_DATA_IGNORED = ("args", "created", "bertkit_version")
# what a previous run left (an ELECTRA run also its discriminator and generator)
RUN_MARKERS = ("config.json", "checkpoints", "metrics.jsonl", "model", "discriminator", "generator", "tensorboard")


def model_config(cfg: TrainConfig, manifest: dict) -> BertConfig:
    """The preset, fitted to the data's vocabulary and length, with the overrides applied; for
    continued pretraining, the starting model's own config."""
    if cfg.init_from:
        return _init_config(cfg, manifest)
    changes = {"vocab_size": int(manifest["vocab_size"]), "pad_token_id": int(manifest["pad_id"]),
               **cfg.config_overrides}
    if cfg.objective == "ltr":
        changes["attention"] = "causal"
    try:
        config = BertConfig.preset(cfg.preset, **changes)
    except (TypeError, ValueError) as e:
        raise UserError(f"bad model config: {e}") from None
    if config.max_tokens < int(manifest["max_seq_len"]):
        raise UserError(f"max_position_embeddings {config.max_position_embeddings} is below the data's "
                        f"max_seq_len {manifest['max_seq_len']}: raise it with --config-json")
    return config


def _init_config(cfg: TrainConfig, manifest: dict) -> BertConfig:
    """The config of the model `init_from` names, checked against the prepared data."""
    from bertkit.hf import load_config

    config = load_config(cfg.init_from)
    if config.attention == "causal":  # causal-then-masked: the left-to-right model continues bidirectionally
        config = config.replace(attention="bidirectional")
    if int(manifest["vocab_size"]) > config.vocab_size:
        raise UserError(f"the data's vocabulary ({manifest['vocab_size']} entries) is larger than the model's "
                        f"({config.vocab_size})", cfg.init_from)
    if config.max_tokens < int(manifest["max_seq_len"]):
        raise UserError(f"the model reads {config.max_tokens} tokens but the data's max_seq_len is "
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
    """A hint, once every check has passed, when the budget recipe's MLM (or ELECTRA) gets padded
    sentence pairs."""
    if cfg.recipe == "budget" and cfg.objective in ("mlm", "electra") and manifest.get("format") != "packed":
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
    rules = resume_rules(type(cfg))
    problems = _differences(before, now, [k for k, rule in rules.items() if rule == FIXED])
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
    if {trained["model_type"], asked["model_type"]} == {"bert", "electra"}:  # one encoder, ELECTRA's layout on disk
        trained["model_type"] = asked["model_type"]
    shape = _differences(trained, asked, trained)
    if shape:
        problems.append(f"model shape from --preset/--config-json ({', '.join(shape)})")
    if problems:
        raise UserError(f"--resume with settings that differ from the checkpoint it continues: {'; '.join(problems)}"
                        f" (give the run's own settings, or start a new run in another --out)", out)
    return {k: [before.get(k), now[k]] for k in now if rules[k] in (CHANGEABLE, RESOLVED) and before.get(k) != now[k]}


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
