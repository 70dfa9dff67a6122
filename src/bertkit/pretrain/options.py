"""A pretraining run's options, declared once: `TrainOptions` (each field with its flag's help,
range or choices and its `--resume` rule) and `TrainConfig`, the options complete and checked.

The recipe's values fill the fields a caller left unset, the architecture's defaults (`--arch`)
before them; every check of the options runs here, once, raising an `OptionError` that names
them as fields (or, for the CLI, as flags: cli/pretrain.py makes every flag from its field).
`command_line` writes a config back as the flags that make it. This module imports no torch.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.pretrain.recipes import RECIPES, fill
from bertkit.tracking import REPORT_TO

# MLM + NSP (BERT), MLM + sentence order (ALBERT), MLM only, left-to-right, replaced-token detection (ELECTRA)
# (bertkit.pretrain.objective)
OBJECTIVES = ("mlm+nsp", "mlm+sop", "mlm", "ltr", "electra")
PAIR_FORMATS = {"mlm+nsp": "nsp", "mlm+sop": "sop"}  # the prepared data a pair objective needs
SHARINGS = ("tied", "gdes")  # ELECTRA's token table shared by generator and model, or DeBERTaV3's (bertkit.electra)
RTD_WEIGHT = 50.0  # ELECTRA's weight of the discriminator's loss against the generator's (Clark et al. 2020)
INITS = ("bert", "scaled")  # a new model's weights (bertkit.pretrain.init)
PRECISIONS = ("fp32", "bf16", "auto")  # bertkit.devices.resolve_precision

# `--arch`: the family (bertkit.families) that makes a preset's shape its architecture, and the options its
# authors pretrain it with, filled where the run leaves them unset (before the recipe fills the rest)
ARCHS: dict[str, tuple[str, dict]] = {
    "bert": ("bert", {}),
    "roberta": ("roberta", {"objective": "mlm"}),
    "albert": ("albert", {"objective": "mlm+sop"}),
    "deberta": ("deberta-v2", {"objective": "electra", "embedding_sharing": "gdes", "generator_width": 1.0,
                               "generator_depth": 0.5}),
    "modernbert": ("modernbert", {"objective": "mlm", "mask_rate": 0.3}),
}
MASK_RATE = 0.15  # the paper's, where neither the run nor its architecture names one

# What `--resume` may do with each field (`check_resume`):
FIXED = "fixed"  # must be the same: it fixes what the run computes
RESOLVED = "resolved"  # fixed by what it names (the model's shape, the data, the tokenizer), compared there
CHANGEABLE = "changeable"  # may change; the change is recorded in RUN/config.json's "resumes"
INVOCATION = "invocation"  # how this invocation treats RUN_DIR; never recorded
RESUME_RULES = (FIXED, RESOLVED, CHANGEABLE, INVOCATION)


@dataclass(frozen=True)
class Range:
    """A numeric option's allowed values (an integer, or any number) between bounds; `describe` is
    the one phrase both the CLI's parse error and `TrainConfig`'s check use."""

    integer: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def allows(self, value) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or (value < self.high or (not self.high_open and value == self.high))

    def describe(self) -> str:
        if self.high is None:
            return "positive" if self.low == 0 and self.low_open else f"at least {self.low:g}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"in {left}{self.low:g}, {self.high:g}{right}"


POSITIVE_INT, NONNEGATIVE_INT = Range(True, 1), Range(True, 0)
POSITIVE, NONNEGATIVE = Range(low=0, low_open=True), Range(low=0)
FRACTION, PROBABILITY = Range(low=0, high=1, low_open=True, high_open=True), Range(low=0, high=1, high_open=True)


def option(resume: str, default=dataclasses.MISSING, *, help: str, flag: str | None = None,
           range: Range | None = None, choices: tuple | None = None, metavar: str | None = None,
           default_factory=dataclasses.MISSING, flag_default=dataclasses.MISSING):
    """A field with everything its command-line flag is made of (`bertkit.cli.args.add_option_flags`
    builds the flags of `TrainOptions` and fine-tuning's `Hyper` from these): its resume rule, help,
    range or choices (checked by `TrainConfig` too), metavar, its flag where that is not
    --field-name, and `flag_default` where the flag's default differs from the field's (None: the
    command decides from other flags)."""
    metadata = {"resume": resume, "help": help, "range": range, "choices": choices, "metavar": metavar,
                **({"flag": flag} if flag else {}),
                **({"flag_default": flag_default} if flag_default is not dataclasses.MISSING else {})}
    return field(default=default, default_factory=default_factory, metadata=metadata)


@dataclass(frozen=True)
class TrainOptions:
    """A run's options as a caller gives them: a recipe field may be None (the recipe's value).
    Build a `TrainConfig`, which fills them and checks the whole."""

    data: str = option(RESOLVED, help="folder written by `bertkit prepare`")  # compared by its manifest
    out: str = option(CHANGEABLE, help="run folder: checkpoints/, model/, metrics.jsonl, loss.png, ...")
    preset: str = option(RESOLVED, "mini", help="model shape: tiny, mini, small, medium, base, large")
    arch: str = option(FIXED, "bert", choices=tuple(ARCHS),
                        help="the architecture of that shape: bert; roberta (positions past the padding id, one "
                             "segment); albert (narrow embeddings, one layer's weights at every depth; MLM + sentence "
                             "order); deberta (DeBERTa-v3: relative attention; replaced-token detection with "
                             "gradient-disentangled sharing, a generator of the same width and half the depth); "
                             "modernbert (pre-LN, rotary, GeGLU, local/global attention, no biases; MLM at 30%%); "
                             "flags given explicitly win over its defaults; saved in its family's layout")
    steps: int | None = option(CHANGEABLE, None, range=POSITIVE_INT, help="optimizer updates (default 1000)")
    minutes: float | None = option(CHANGEABLE, None, range=POSITIVE,
                                    help="train for this much wall-clock time instead")
    # The recipe, then the fields it fills: None takes its value (bertkit.pretrain.recipes).
    recipe: str = option(FIXED, "paper", choices=tuple(RECIPES),
                          help="paper: BERT's settings; budget: no NSP, no dropout, higher lr, beta2 0.98, "
                               "width-scaled init, and with --minutes an lr schedule over wall-clock time that "
                               "reaches 0 at the deadline; flags given explicitly win")
    objective: str | None = option(FIXED, None, choices=OBJECTIVES,
                                    help="mlm+nsp (BERT), mlm (no NSP), ltr (left-to-right, next token), electra "
                                         "(replaced-token detection with a small generator; saves model/, "
                                         "discriminator/ and generator/)")
    batch_size: int | None = option(FIXED, None, range=POSITIVE_INT,
                                     help="global batch in sequences, over all processes and micro-steps")
    lr: float | None = option(CHANGEABLE, None, range=POSITIVE, help="peak learning rate")
    warmup: float | None = option(CHANGEABLE, None, range=NONNEGATIVE,
                                   help="warm-up: below 1 a fraction of the run, else steps")
    weight_decay: float | None = option(FIXED, None, range=NONNEGATIVE,
                                         help="AdamW's decoupled weight decay (not on biases and LayerNorm)")
    dropout: float | None = option(FIXED, None, range=PROBABILITY,
                                    help="every dropout while pretraining; the saved config keeps the model's own")
    precision: str | None = option(CHANGEABLE, None, choices=PRECISIONS,
                                    help="bf16: autocast (weights stay fp32); auto: bf16 where the GPU or CPU has "
                                         "bf16 hardware, else fp32")
    adam_beta2: float | None = option(FIXED, None, range=FRACTION, help="AdamW's second-moment decay")
    init: str | None = option(FIXED, None, choices=INITS,
                               help="a new model's weights: bert N(0, 0.02); scaled N(0, 1/sqrt(hidden)) and a "
                                    "sinusoidal position table (learns faster at small widths; same architecture "
                                    "and files)")
    grad_accum: int = option(FIXED, 1, range=POSITIVE_INT, help="micro-steps per update")
    mask_rate: float | None = option(FIXED, None, range=FRACTION,
                                      help="fraction of tokens to predict (default 0.15; --arch modernbert 0.3)")
    whole_word_mask: bool = option(FIXED, False, help="mask every piece of a chosen word")
    mask_rule: str = option(FIXED, "80/10/10", metavar="M/R/K",
                             help="of the chosen tokens, percent replaced by [MASK] / by a random token / kept")
    generator_width: float | None = option(FIXED, None, range=Range(low=0, high=1, low_open=True), metavar="FRACTION",
                                            help="--objective electra: the generator's width (hidden size, heads, "
                                                 "intermediate size) as a fraction of the model's (default: 1/4, and "
                                                 "1/3 from hidden size 768, as ELECTRA-Small and -Base)")
    generator_layers: int | None = option(FIXED, None, range=POSITIVE_INT,
                                           help="--objective electra: the generator's depth (default: the model's; "
                                                "DeBERTaV3's generator is half as deep)")
    embedding_sharing: str | None = option(FIXED, None, choices=SHARINGS,
                                            help="--objective electra: tied (ELECTRA: one token table for both) or "
                                                 "gdes (DeBERTaV3's gradient-disentangled sharing: the model's table "
                                                 "is the generator's, without its gradient, plus its own) "
                                                 "(default: tied)")
    rtd_weight: float | None = option(FIXED, None, range=POSITIVE,
                                       help=f"--objective electra: weight of the replaced-token detection loss "
                                            f"against the generator's MLM loss (default: {RTD_WEIGHT:g})")
    compile: bool = option(CHANGEABLE, False, help="torch.compile the model")
    save_every: int = option(CHANGEABLE, 1000, range=POSITIVE_INT, help="steps between checkpoints")
    eval_every: int = option(CHANGEABLE, 500, range=POSITIVE_INT, help="steps between validations")
    log_every: int = option(CHANGEABLE, 10, range=POSITIVE_INT, help="steps between status lines")
    eval_samples: int = option(CHANGEABLE, 512, range=NONNEGATIVE_INT,
                                help="validation sequences scored at each evaluation (0: no evaluation)")
    keep: int = option(CHANGEABLE, 2, range=NONNEGATIVE_INT, help="checkpoints to keep (0: all)")
    seed: int = option(FIXED, 0, range=NONNEGATIVE_INT, help="seed of the initial weights, data order and masking")
    resume: bool = option(INVOCATION, False,
                           help="continue RUN_DIR's newest complete checkpoint (same model, objective, batch, masking "
                                "and data; changed options such as --lr or --steps are recorded in "
                                "RUN_DIR/config.json's resumes)")
    max_grad_norm: float = option(CHANGEABLE, 1.0, range=NONNEGATIVE, help="clip the gradient norm (0: no clipping)")
    device: str = option(CHANGEABLE, "auto", help="auto, cpu or cuda")
    tokenizer: str | None = option(RESOLVED, None,
                                    help="check that DATA_DIR was prepared with this tokenizer (folder with vocab.txt)")
    # BertConfig fields (`option` returns a field(): each config gets its own dict from default_factory)
    config_overrides: dict = option(RESOLVED, flag="--config-json", metavar="JSON", default_factory=dict,  # noqa: RUF009
                                     help='model config overrides: a JSON object or a .json file, e.g. '
                                          '\'{"num_hidden_layers": 2}\'')
    overwrite: bool = option(INVOCATION, False, help="start again in a RUN_DIR that holds a previous run, deleting it")
    init_from: str | None = option(FIXED, None, metavar="DIR",
                                    help="continued pretraining: start from this HF directory (its shape and weights; "
                                         "a missing MLM head starts tied to the word embeddings; a left-to-right "
                                         "model continues bidirectionally); DATA_DIR must be prepared with its "
                                         "tokenizer; --preset is ignored")
    report_to: str = option(CHANGEABLE, "none", choices=REPORT_TO,
                             help="tensorboard: losses, lr, throughput and validation as they happen, in "
                                  "RUN_DIR/tensorboard (needs pip install 'bertkit[tensorboard]'); none: no curves")


class TrainConfig(TrainOptions):
    """A run's options, complete and checked: `TrainConfig(data=..., out=..., recipe="budget", lr=5e-4)`
    takes the budget recipe's value for every recipe field not given (or given as None)."""

    def __init__(self, data: str, out: str, *, recipe: str = "paper", **options):
        if recipe not in RECIPES:
            raise OptionError("{} must be one of {names}, not {value!r}", "recipe", names=", ".join(RECIPES),
                              value=recipe)
        options = fill(recipe, _arch_defaults(options))
        if options.get("objective") == "electra" and options.get("rtd_weight") is None:
            options["rtd_weight"] = RTD_WEIGHT
        if options.get("mask_rate") is None:
            options["mask_rate"] = MASK_RATE
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


def _arch_defaults(options: dict) -> dict:
    """`options` with its architecture's defaults where they are unset; a generator depth given as a
    fraction of the model's becomes layers (DeBERTa-v3: half)."""
    arch = options.get("arch", "bert")
    if arch not in ARCHS:
        raise OptionError("{} must be one of {names}, not {value!r}", "arch", names=", ".join(ARCHS), value=arch)
    defaults = dict(ARCHS[arch][1])
    depth = defaults.pop("generator_depth", None)
    if depth is not None and options.get("generator_layers") is None and options.get("objective") in (None, "electra"):
        try:
            layers = BertConfig.preset(options.get("preset", "mini"), **(options.get("config_overrides") or {}))
        except (TypeError, ValueError, UserError):
            layers = None  # a bad preset or override: its own check names it
        if layers is not None:
            defaults["generator_layers"] = max(1, round(layers.num_hidden_layers * depth))
    if options.get("objective") not in (None, defaults.get("objective")):  # another objective: not its generator
        defaults = {k: v for k, v in defaults.items() if k in ("mask_rate",)}
    return {**options, **{k: v for k, v in defaults.items() if options.get(k) is None}}


class OptionError(UserError):
    """A run's option out of its range, or options that do not go together. The message names them
    as TrainConfig's fields; `flags()` names them as `bertkit pretrain`'s flags."""

    def __init__(self, template: str, *fields: str, **values):
        """`template`: str.format text with one {} per name in `fields` and {key} for each of `values`."""
        super().__init__(template.format(*fields, **values))
        self.template, self.fields, self.values = template, fields, values

    def flags(self) -> str:
        return self.template.format(*map(flag_of, self.fields), **self.values)


def field_flag(f: dataclasses.Field) -> str:
    """A declared option's flag: its metadata's "flag", else --field-name."""
    return f.metadata.get("flag", "--" + f.name.replace("_", "-"))


def flag_of(name: str) -> str:
    """The `bertkit pretrain` flag of a TrainConfig field."""
    return field_flag(next(f for f in dataclasses.fields(TrainOptions) if f.name == name))


def flag_words(obj, fields) -> list[str]:
    """The flags that give `obj` its values of `fields` (declared options): a switch for True,
    nothing for None, False or {}, JSON for a dict, a comma-separated list for a tuple."""
    words = []
    for f in fields:
        value = getattr(obj, f.name)
        if value is None or value is False or value == {}:
            continue
        if value is True:
            words.append(field_flag(f))
            continue
        text = json.dumps(value) if isinstance(value, dict) else (
            ",".join(map(str, value)) if isinstance(value, tuple) else str(value))
        words += [field_flag(f), text]
    return words


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
    for name in ("generator_width", "generator_layers", "embedding_sharing", "rtd_weight"):
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
    """Each option on its own, by its field's declared choices or range."""
    for f in dataclasses.fields(TrainOptions):
        value, choices, allowed = getattr(cfg, f.name), f.metadata["choices"], f.metadata["range"]
        if value is None:
            continue
        if choices is not None and value not in choices:
            raise OptionError("{} must be one of {names}, not {value!r}", f.name, names=", ".join(choices), value=value)
        if allowed is not None and not allowed.allows(value):
            raise OptionError("{} must be {bound}, not {value}", f.name, bound=allowed.describe(), value=value)


def command_line(cfg: TrainConfig) -> list[str]:
    """`bertkit pretrain` with every option `cfg` resolved to as a flag (a new run's: no --resume)."""
    fields = [f for f in dataclasses.fields(TrainOptions) if f.metadata["resume"] != INVOCATION]
    return ["bertkit", "pretrain", *flag_words(cfg, fields)]


def resume_rules(cls: type = TrainOptions) -> dict[str, str]:
    """Each field's resume rule (RESUME_RULES); a TypeError naming a field that declares none, so
    a new option cannot slip through `--resume` unchecked."""
    rules = {f.name: f.metadata.get("resume") for f in dataclasses.fields(cls)}
    missing = [name for name, rule in rules.items() if rule not in RESUME_RULES]
    if missing:
        raise TypeError(f"{cls.__name__} field(s) {', '.join(missing)} declare no resume rule: give each "
                        f"option(rule, default) with a rule of {', '.join(RESUME_RULES)}")
    return rules
