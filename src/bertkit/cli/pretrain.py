"""`bertkit pretrain --data DATA_DIR --out RUN_DIR`: pretrain BERT (MLM + NSP, MLM only, LTR, or
ELECTRA's replaced-token detection).

Under `torchrun --nproc-per-node N` the same command trains data-parallel; --batch-size is the
global batch, split over processes and --grad-accum micro-steps, so results do not depend on N.
With --init-from DIR it continues pretraining an existing model (domain adaptation): the
data must be prepared with DIR's vocab.txt, and the run's model/ is DIR's model after it.
SIGTERM or Ctrl-C saves a checkpoint and exits with status 143 or 130 (128 + the signal).
--recipe paper|budget fills the optimisation flags the user did not give (bertkit.pretrain.recipes).
The flags' defaults and choices are TrainConfig's (bertkit.pretrain.setup), and so is every check
of the options together: `check` prints its error with flags for field names.
"""

from __future__ import annotations

import argparse
import dataclasses

from bertkit.cli.args import (
    add_report_to,
    check_report_to,
    device_name,
    existing_dir,
    float_in,
    json_object,
    model_dir,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    tokenizer_dir,
)
from bertkit.errors import UserError
from bertkit.pretrain.recipes import RECIPES
from bertkit.pretrain.setup import INITS, OBJECTIVES, PRECISIONS, RTD_WEIGHT, TrainOptions


def default(name: str):
    """TrainConfig's default for a field, so its flag has the same one."""
    return next(f.default for f in dataclasses.fields(TrainOptions) if f.name == name)


def recipe_help(name: str) -> str:
    """'(default: paper X, budget Y)' for the help of a flag a recipe fills."""
    values = [f"{r} {'the model config' if v[name] is None else v[name]}" for r, v in RECIPES.items()]
    return f"(default: {', '.join(values)})"


def preset_name(text: str) -> str:
    from bertkit.config import PRESETS

    if text not in PRESETS:
        raise argparse.ArgumentTypeError(f"unknown preset {text!r}; choose from {', '.join(PRESETS)}")
    return text


def mask_rule(text: str) -> str:
    """M/R/K, read by the one parser of a masking rule (it imports torch: argparse reaches it only
    once every flag has parsed, when the run imports torch anyway)."""
    from bertkit.data.masking import MaskingConfig

    try:
        MaskingConfig.from_rule(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("--data", required=True, type=existing_dir, help="folder written by `bertkit prepare`")
    a("--out", required=True, help="run folder: checkpoints/, model/, metrics.jsonl, loss.png, ...")
    a("--preset", type=preset_name, default=default("preset"),
      help="model shape: tiny, mini, small, medium, base, large")
    a("--recipe", default=default("recipe"), choices=tuple(RECIPES),
      help="paper: BERT's settings; budget: no NSP, no dropout, higher lr, beta2 0.98, width-scaled init, and "
           "with --minutes an lr schedule over wall-clock time that reaches 0 at the deadline; flags given "
           "explicitly win")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--steps", type=positive_int, help="optimizer updates (default 1000)")
    length.add_argument("--minutes", type=positive_float, help="train for this much wall-clock time instead")
    _add_recipe_flags(a)
    a("--grad-accum", type=positive_int, default=default("grad_accum"), help="micro-steps per update")
    a("--mask-rate", type=float_in(0, 1, low_open=True, high_open=True), default=default("mask_rate"),
      help="fraction of tokens to predict")
    a("--whole-word-mask", action="store_true", help="mask every piece of a chosen word")
    a("--mask-rule", type=mask_rule, default=default("mask_rule"), metavar="M/R/K",
      help="of the chosen tokens, percent replaced by [MASK] / by a random token / kept")
    a("--mask-all", action="store_true", help="ablation: chosen tokens always become [MASK] (--mask-rule 100/0/0)")
    a("--generator-width", type=float_in(0, 1, low_open=True, high_open=True), default=None, metavar="FRACTION",
      help="--objective electra: the generator's width (hidden size, heads, intermediate size) as a fraction of the "
           "model's (default: 1/4, and 1/3 from hidden size 768, as ELECTRA-Small and -Base)")
    a("--rtd-weight", type=positive_float, default=None,
      help=f"--objective electra: weight of the replaced-token detection loss against the generator's MLM loss "
           f"(default: {RTD_WEIGHT:g})")
    a("--compile", action="store_true", help="torch.compile the model")
    a("--save-every", type=positive_int, default=default("save_every"), help="steps between checkpoints")
    a("--eval-every", type=positive_int, default=default("eval_every"), help="steps between validations")
    a("--log-every", type=positive_int, default=default("log_every"), help="steps between status lines")
    a("--eval-samples", type=nonnegative_int, default=default("eval_samples"),
      help="validation sequences scored at each evaluation (0: no evaluation)")
    a("--keep", type=nonnegative_int, default=default("keep"), help="checkpoints to keep (0: all)")
    a("--seed", type=nonnegative_int, default=default("seed"),
      help="seed of the initial weights, data order and masking")
    a("--resume", action="store_true",
      help="continue RUN_DIR's newest complete checkpoint (same model, objective, batch, masking and data; "
           "changed options such as --lr or --steps are recorded in RUN_DIR/config.json's resumes)")
    a("--overwrite", action="store_true", help="start again in a RUN_DIR that holds a previous run, deleting it")
    a("--max-grad-norm", type=nonnegative_float, default=default("max_grad_norm"),
      help="clip the gradient norm (0: no clipping)")
    a("--device", type=device_name, default=default("device"), help="auto, cpu or cuda")
    a("--tokenizer", type=tokenizer_dir,
      help="check that DATA_DIR was prepared with this tokenizer (folder with vocab.txt)")
    a("--init-from", type=model_dir, default=None, metavar="DIR",
      help="continued pretraining: start from this HF BERT directory (its shape and weights; a missing MLM head "
           "starts tied to the word embeddings); DATA_DIR must be prepared with its vocab.txt; --preset is ignored")
    a("--config-json", type=json_object, default=None,
      help='model config overrides: a JSON object or a .json file, e.g. \'{"num_hidden_layers": 2}\'')
    add_report_to(parser, "RUN_DIR/tensorboard")


def _add_recipe_flags(a) -> None:
    """The flags a recipe fills when they are not given (bertkit.pretrain.recipes.RECIPE_FIELDS)."""
    a("--objective", default=None, choices=OBJECTIVES,
      help="mlm+nsp (BERT), mlm (no NSP), ltr (left-to-right, next token), electra (replaced-token detection "
           "with a small generator; saves model/, discriminator/ and generator/) " + recipe_help("objective"))
    a("--batch-size", type=positive_int, default=None, help="global batch in sequences " + recipe_help("batch_size"))
    a("--lr", type=positive_float, default=None, help="peak learning rate " + recipe_help("lr"))
    a("--warmup", type=nonnegative_float, default=None,
      help="warm-up: below 1 a fraction of the run, else steps " + recipe_help("warmup"))
    a("--weight-decay", type=nonnegative_float, default=None,
      help="AdamW's decoupled weight decay " + recipe_help("weight_decay"))
    a("--dropout", type=float_in(0, 1, high_open=True), default=None,
      help="every dropout while pretraining; the saved config keeps the model's own " + recipe_help("dropout"))
    a("--adam-beta2", type=float_in(0, 1, low_open=True, high_open=True), default=None,
      help="AdamW's second-moment decay " + recipe_help("adam_beta2"))
    a("--init", default=None, choices=INITS,
      help="a new model's weights: bert N(0, 0.02); scaled N(0, 1/sqrt(hidden)) and a sinusoidal position "
           "table (learns faster at small widths; same architecture and files) " + recipe_help("init"))
    a("--precision", default=None, choices=PRECISIONS,
      help="bf16: autocast (weights stay fp32); auto: bf16 where the GPU or CPU has bf16 hardware, else fp32 "
           + recipe_help("precision"))


def check(args) -> None:
    """Every check of the options together is TrainConfig's: its error, in flags."""
    from bertkit.pretrain.setup import OptionError

    try:
        train_config(args)
    except OptionError as e:
        raise UserError(e.flags()) from None
    check_report_to(args)


def train_config(args):
    from bertkit.pretrain.setup import TrainConfig

    return TrainConfig(
        data=args.data, out=args.out, preset=args.preset, steps=args.steps, minutes=args.minutes,
        recipe=args.recipe, objective=args.objective, batch_size=args.batch_size, lr=args.lr, warmup=args.warmup,
        weight_decay=args.weight_decay, dropout=args.dropout, precision=args.precision, adam_beta2=args.adam_beta2,
        init=args.init, grad_accum=args.grad_accum, mask_rate=args.mask_rate, whole_word_mask=args.whole_word_mask,
        mask_rule="100/0/0" if args.mask_all else args.mask_rule, generator_width=args.generator_width,
        rtd_weight=args.rtd_weight, compile=args.compile, save_every=args.save_every,
        eval_every=args.eval_every, log_every=args.log_every, eval_samples=args.eval_samples, keep=args.keep,
        seed=args.seed, resume=args.resume, max_grad_norm=args.max_grad_norm, device=args.device,
        tokenizer=args.tokenizer, config_overrides=args.config_json or {}, overwrite=args.overwrite,
        init_from=args.init_from, report_to=args.report_to,
    )


def run(args) -> int:
    from bertkit.pretrain.loop import pretrain

    return pretrain(train_config(args))
