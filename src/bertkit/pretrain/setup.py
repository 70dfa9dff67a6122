"""Everything a pretraining run resolves before its first step, once its options are complete.

The options themselves, `TrainOptions` / `TrainConfig` with every check and each field's
`--resume` rule, are `bertkit.pretrain.options` (re-exported here). This module opens the
prepared data and its tokenizer (`open_data`); builds the model's shape from a preset, the
architecture (`--arch`, through `bertkit.families`), the data's vocabulary and overrides
(`model_config`); refuses to overwrite a run (`check_run_dir`, unless `overwrite`); refuses to
continue a checkpoint with another model shape, objective, batch, masking, data or tokenizer,
naming what differs, and returns the options a resumed run changes (`check_resume`: learning rate,
length, cadences), which `run_record` appends to RUN/config.json's "resumes" instead of rewriting
the run's original arguments. All user mistakes become a one-line `UserError`. No torch here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.pretrain.options import (  # noqa: F401 - re-exported: the run's options live in options.py
    ARCHS,
    CHANGEABLE,
    FIXED,
    INITS,
    INVOCATION,
    MASK_RATE,
    OBJECTIVES,
    PAIR_FORMATS,
    PRECISIONS,
    RESOLVED,
    RESUME_RULES,
    RTD_WEIGHT,
    SHARINGS,
    OptionError,
    Range,
    TrainConfig,
    TrainOptions,
    command_line,
    flag_of,
    resume_rules,
)

# Manifest entries that say when and from where data was made, not what it holds.
_DATA_IGNORED = ("args", "created", "bertkit_version")
# what a previous run left (an ELECTRA run also its discriminator and generator)
RUN_MARKERS = ("config.json", "checkpoints", "metrics.jsonl", "model", "discriminator", "generator", "tensorboard")


def model_config(cfg: TrainConfig, manifest: dict) -> BertConfig:
    """The preset, fitted to the data's vocabulary and length, with the overrides applied; for
    continued pretraining, the starting model's own config."""
    if cfg.init_from:
        return _init_config(cfg, manifest)
    from bertkit.families import FAMILIES

    changes = {"vocab_size": int(manifest["vocab_size"]), "pad_token_id": int(manifest["pad_id"])}
    if cfg.objective == "ltr":
        changes["attention"] = "causal"
    try:  # the preset's shape with the overrides, made the architecture's (its own choices are the overrides')
        shape = BertConfig.preset(cfg.preset, **changes, **cfg.config_overrides)
        config = FAMILIES[ARCHS[cfg.arch][0]].from_bert(shape).replace(**cfg.config_overrides)
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
    fmt = train.manifest.get("format")
    if cfg.objective in PAIR_FORMATS and fmt != PAIR_FORMATS[cfg.objective]:
        raise UserError(f"--objective {cfg.objective} needs data prepared with `bertkit prepare --format "
                        f"{PAIR_FORMATS[cfg.objective]}`, this is {fmt!r}: use --objective mlm", data)
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
    from bertkit.hf import config_from_dict, config_to_dict

    trained = dataclasses.asdict(load_config(checkpoint_dir))
    # as config.json would hold it: a family's file may spell a default out (ALBERT's classifier dropout)
    asked = dataclasses.asdict(config_from_dict(config_to_dict(model_config(cfg, manifest))))
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
