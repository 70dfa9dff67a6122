"""The scales `bertkit ablate` runs at: model shapes, pretraining settings, task sizes and rates.

A scale names one shape per model size (Table 6's "smaller", "reference", "larger"), how every
variant is pretrained (a recipe of `bertkit.pretrain.recipes` and each objective's peak learning
rate), the fixed task subsets and fine-tuning settings (`TaskSize`), and the measured seconds per
unit its time estimate adds up (`rates`).

- `tiny`: the tests' scale (a 20K-parameter model, a few steps); numbers mean nothing.
- `cpu-small`: 2 CPU cores, about 2 h 15 min of wall time on quiet cores with 3 seeds and every table (two
  processes on one folder). A 4-layer, hidden-128 reference (Table 6: the 2 x 128 tiny and
  4 x 256 mini beside it), an 8,000-entry vocabulary, 1,600 pretraining steps of 32 x 128 tokens
  with the budget recipe (width-scaled init with a sinusoidal position table, AdamW beta2 0.98,
  5% warm-up, no dropout while pretraining, bf16 autocast where the CPU has bf16 instructions) at
  each objective's own peak lr (`lr_by_objective`, chosen by `bertkit ablate --tune-lr`); Table 5
  also at equal wall time. The second run (BERT's init, lr 1e-3 for every objective) left the MLM
  models on the plateau: docs/ablations/cpu-small-run2/NOTE.md.
- `cpu-curve`: Table 5 along a compute axis (`t5-curve`, what a run without --only takes; `bertkit
  experiment table5`) on the reference shape the t5-shapes sweep chose (1 x 64) with the budget
  recipe: each objective pretrained at 1x, 3x and 9x the MLM + NSP reference's FLOPs (3,200 /
  9,600 / 28,800 of its steps; fewer for the costlier steps of LTR and ELECTRA), fine-tuned on
  SST-2, SQuAD, CoNLL-2003 and STS-B with every seed.
- `gpu`: one H200, about 10 minutes: the base shape at 128 tokens, bf16 and torch.compile, the
  paper recipe's init and beta2 (BERT's 0.02 suits hidden 768) at lr 4e-4 with no dropout, about 2
  minutes of pretraining per variant, full MRPC and CoNLL, larger SST-2 and SQuAD subsets. Not run
  yet (no device has been lent); its step counts follow from the H200 rate the benchmark measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bertkit.ablate.tables import PAPER_TABLES
from bertkit.pretrain.recipes import fill


@dataclass(frozen=True)
class TaskSize:
    train: int  # examples (sentences, pairs; more than the file holds: all) or, for squad, articles
    dev: int | None  # None: the whole dev set; for squad, the number of held-out articles
    epochs: int
    lr: float
    max_seq_len: int
    batch_size: int = 32


@dataclass(frozen=True)
class Scale:
    name: str
    vocab_size: int
    max_seq_len: int
    preset: str
    sizes: dict  # "reference" / "smaller" / "larger" -> (preset, BertConfig overrides)
    steps: int  # pretraining steps of every equal-steps variant
    batch_size: int  # pretraining sequences per step
    lr_by_objective: dict  # objective -> its pretraining's peak learning rate
    tasks: dict  # task -> TaskSize
    recipe: str = "budget"  # the pretraining recipe (bertkit.pretrain.recipes) filling what is left None
    warmup: float | None = None  # fraction of the run; None: the recipe's
    precision: str | None = None  # "fp32", "bf16" or "auto", pretraining and fine-tuning; None: the recipe's
    dropout: float | None = None  # every dropout while pretraining; None: the recipe's (fine-tuning keeps 0.1)
    time_minutes: float | None = None  # Table 5's equal-time budget; None: what the MLM + NSP reference took
    lr_grid: dict = field(default_factory=dict)  # objective -> candidate peak lrs that --tune-lr tries
    tune_steps: int = 0  # the steps of each --tune-lr pretraining
    feature_lr: float = 1e-3  # the feature-based tagger's learning rate
    compile: bool = False
    eval_samples: int = 512  # validation sequences each pretraining is scored on
    eval_points: int = 1  # validations along each equal-steps pretraining (its last step always)
    tables: tuple[str, ...] = PAPER_TABLES  # the tables a run without --only takes
    # Table 5's compute axis (t5-curve): budgets as multiples of the MLM + NSP reference's pretraining
    # FLOPs (`steps` x its useful FLOPs per step); (): no curve at this scale
    curve: tuple[float, ...] = ()
    largest_budget_seeds: int | None = None  # the curve's largest budget fine-tunes with the first N seeds only
    # seconds per unit, measured at this scale: pretraining step per size (and `{objective}_factor`,
    # an objective's step over an MLM step); fine-tuning per training example (squad: article) and
    # epoch; evaluation per cell; the fixed cost of a cell
    rates: dict = field(default_factory=dict)

    def shape(self, size: str) -> tuple[str, dict]:
        return self.sizes[size]

    def lr_for(self, objective: str) -> float:
        if objective not in self.lr_by_objective:
            raise ValueError(f"scale {self.name} has no learning rate for objective {objective!r} in lr_by_objective")
        return self.lr_by_objective[objective]

    def pretrain_options(self, objective: str) -> dict:
        """The TrainConfig options every pretraining of `objective` at this scale takes."""
        return {"recipe": self.recipe, "lr": self.lr_for(objective), "warmup": self.warmup,
                "dropout": self.dropout, "precision": self.precision}

    def pretrain_params(self, objective: str, fmt: str, size: str = "reference", mask_rule: str = "80/10/10",
                        lr: float | None = None, options: dict | None = None, **length) -> tuple:
        """A pretraining cell's params: what it trains, and every setting it trains with (`lr`: another
        than the scale's; `options`: other `TrainConfig` options, such as ELECTRA's rtd_weight, kept
        as one param only when given); `length` is steps=N, minutes=M, or minutes_of=CELL (the
        minutes that cell's pretraining took)."""
        recipe = {**self.pretrain_options(objective), **({"lr": lr} if lr is not None else {})}
        extra = (("options", tuple(sorted(options.items()))),) if options else ()
        return (("objective", objective), ("format", fmt), ("mask_rule", mask_rule), ("size", size),
                ("batch_size", self.batch_size), *sorted(recipe.items()), *extra, *length.items())

    def train_options(self, params: dict) -> dict:
        """The `TrainConfig` options a pretraining cell's params name (the model's shape included);
        a run adds its folders, length and cadences."""
        preset, overrides = self.shape(params["size"])
        recipe = {k: params[k] for k in self.pretrain_options(params["objective"])}
        return {**recipe, "preset": preset, "config_overrides": dict(overrides), "objective": params["objective"],
                "batch_size": params["batch_size"], "mask_rule": params["mask_rule"], "compile": self.compile,
                "eval_samples": self.eval_samples, **dict(params.get("options", ()))}

    @property
    def finetune_precision(self) -> str:
        """The pretraining's precision ("auto" resolved later, per device), which fine-tuning keeps."""
        return fill(self.recipe, {"precision": self.precision})["precision"]


_TINY_SHAPE = {"hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2, "intermediate_size": 37,
               "max_position_embeddings": 64}
# cpu-small's reference: 4 layers (Table 7 needs the last four), hidden 128, 2 heads
_CPU_SHAPE = {"num_hidden_layers": 4, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512}
# cpu-curve's reference: 1 layer, hidden 64, 2 heads (the t5-shapes sweep's choice)
_CURVE_SHAPE = {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 256}
# cpu-small's measured rates, one thread each for two processes sharing the 2 cores, bf16 autocast
# (docs/ablations/cpu-small-timings.json; the objectives' factors: docs/ablations/cpu-small-steps.json;
# head_ltr-bilstm, the LTR head with a BiLSTM over the plain head: the second run's cells, whose
# other rates came out 1.1-2x these on a shared machine): pretraining seconds per step per size (a
# size's fine-tuning scales the same way); fine-tuning seconds per training example (squad: article)
# and epoch; evaluation seconds per cell
CPU_SMALL_RATES = {"fixed": 2.0, "vocab": 60.0, "data": 30.0, "step_reference": 0.30, "step_smaller": 0.12,
                   "step_larger": 0.65, "ltr_factor": 2.9, "electra_factor": 1.45, "head_ltr-bilstm": 1.5,
                   "ft_mrpc": 10.08 / 1500, "ft_sst2": 6.68 / 3000, "ft_conll": 6.83 / 2000,
                   "fb_conll": 4.16 / 2000, "eval_conll": 2.2, "ft_squad": 86.0 / 6}
# STS-B's rate is derived, not measured: SST-2's per-example rate times the mean tokens of a pair over a
# sentence (32.9 against 15.3 over 3,000 training rows of each in an 8,000-entry Wikipedia WordPiece
# vocabulary, 2.14x). A check on a busy machine (load 8-12 on 2 cores; 800 examples, 1 epoch, grouped
# by length) took 1.4-1.5x SST-2's time per example, so the estimate errs long.
CPU_CURVE_RATES = {**CPU_SMALL_RATES, "ft_stsb": CPU_SMALL_RATES["ft_sst2"] * 32.9 / 15.3}
SCALES = {
    "tiny": Scale(
        "tiny", vocab_size=120, max_seq_len=32, preset="tiny",
        sizes={"reference": ("tiny", _TINY_SHAPE),
               "smaller": ("tiny", {**_TINY_SHAPE, "num_hidden_layers": 2}),
               "larger": ("tiny", {**_TINY_SHAPE, "hidden_size": 48, "num_attention_heads": 3})},
        steps=3, batch_size=8, lr_by_objective=dict.fromkeys(("mlm+nsp", "mlm", "ltr", "electra"), 2e-3),
        precision="fp32", eval_samples=8, lr_grid={"mlm": (1e-3, 3e-3), "electra": (1e-4, 1e-3)}, tune_steps=3,
        tasks={"mrpc": TaskSize(16, 8, 1, 1e-3, 32, 8), "sst2": TaskSize(16, 8, 1, 1e-3, 32, 8),
               "squad": TaskSize(1, 1, 1, 1e-3, 64, 8), "conll": TaskSize(16, 8, 1, 1e-3, 32, 8),
               "stsb": TaskSize(16, 8, 1, 1e-3, 32, 8)},
        curve=(1, 2), rates={"fixed": 1.0}),
    "cpu-small": Scale(
        "cpu-small", vocab_size=8000, max_seq_len=128, preset="tiny",
        sizes={"reference": ("tiny", _CPU_SHAPE), "smaller": ("tiny", {}), "larger": ("mini", {})},
        steps=1600, batch_size=32,
        # Chosen with `bertkit ablate --tune-lr` (docs/ablations/cpu-small-run3/lr-tuning.json, 400 steps
        # each, the run's own validation metric): MLM + NSP, MLM and LTR 1e-3 (MLM accuracy 5.3% / 7.7%
        # and next-token accuracy 11.7%, against 4.6% / 4.5% / 5.2% at 3e-3) and ELECTRA 1e-4 (balanced
        # replaced/original accuracy 61.0; 50.0 at 1e-3, where the discriminator collapses to "all
        # original"). The demo's 3e-3 does not carry over to this 4-layer shape on sentence pairs: a
        # reference pretrained at 3e-3 for 1,600 steps ended at validation MLM 4.6% and NSP 47%, and
        # every task fine-tuned on it stayed at its majority class (task-check-lr3e-3.json).
        lr_by_objective={"mlm+nsp": 1e-3, "mlm": 1e-3, "ltr": 1e-3, "electra": 1e-4},
        lr_grid={"mlm+nsp": (1e-3, 3e-3), "mlm": (1e-3, 3e-3), "ltr": (1e-3, 3e-3),
                 "electra": (5e-5, 1e-4, 3e-4, 1e-3)}, tune_steps=400,
        # Fine-tuning sizes from --check-tasks on the reference (task-check-finetune-lr1e-3.json, then
        # task-check.json): at lr 1e-3 SST-2 fell to its majority class in two seeds of three and
        # CoNLL tagged everything O; 3e-4 with more epochs (CoNLL: 10 epochs of 16) learns in every
        # seed. MRPC stays at its majority class at any lr tried (this model's NSP is at chance).
        tasks={"mrpc": TaskSize(3668, None, 3, 3e-4, 128), "sst2": TaskSize(6000, None, 3, 3e-4, 64),
               "squad": TaskSize(4, 3, 2, 1e-3, 192), "conll": TaskSize(2000, 1000, 10, 3e-4, 128, 16)},
        rates=CPU_SMALL_RATES),
    "cpu-curve": Scale(
        "cpu-curve", vocab_size=8000, max_seq_len=128, preset="tiny",
        # The reference shape from the sweep on this data (`bertkit experiment t5-shapes`,
        # docs/results/t5-shapes/report.md): at equal useful FLOPs (the old 4 x 128 reference's 1,200
        # steps) 1 layer x 64 with MLM + NSP at lr 3e-3 reached 19.9% validation MLM accuracy (packed
        # MLM 22.1%) where 4 x 128 at 1e-3 stayed at 11.9%, 2 x 128 at 14.4% and 1 x 128 at 17.4%.
        sizes={"reference": ("tiny", _CURVE_SHAPE), "smaller": ("tiny", _CURVE_SHAPE), "larger": ("tiny", _CPU_SHAPE)},
        # 1x = 3,200 steps of the reference, so the 9x pretrainings (28,800 steps, about 30 minutes on
        # one thread) stay under the 40-minute cell
        steps=3200, batch_size=32, tables=("t5-curve",), curve=(1, 3, 9), eval_points=4,
        # MLM + NSP, MLM and LTR at the sweep's 3e-3; ELECTRA at 3e-4: on 4 x 128 `--tune-lr` chose 1e-4
        # and 1e-3 collapsed (docs/ablations/cpu-small-run3/lr-tuning.json); the one-layer discriminator
        # takes a higher rate, untuned here (the RTD settings are the curve's next sweep)
        lr_by_objective={"mlm+nsp": 3e-3, "mlm": 3e-3, "ltr": 3e-3, "electra": 3e-4},
        lr_grid={"mlm+nsp": (1e-3, 3e-3), "mlm": (1e-3, 3e-3), "ltr": (1e-3, 3e-3),
                 "electra": (1e-4, 3e-4, 1e-3)}, tune_steps=400,
        # cpu-small's sizes with this shape's fine-tuning lr: a check on the 1x MLM and LTR models, seed 1
        # (docs/results/table5/finetune-check.json, `python bench/finetune_check.py`), found 3e-4 (chosen
        # for 4 x 128) far too low for one layer of 64: at 1e-3 SST-2 went from 64.9 to 71.8 and
        # CoNLL-2003 F1 from 27.6 to 43.7 (MLM), 3e-3 about the same; and SQuAD on 4 articles (F1 4.3)
        # measured nothing, so it trains on 16 (F1 8.5). STS-B: 4,000 of its 5,749 training pairs, the
        # whole dev set (1,500), fine-tuned as regression, scored by Spearman correlation
        tasks={"sst2": TaskSize(6000, None, 3, 1e-3, 64), "squad": TaskSize(16, 3, 2, 1e-3, 192),
               "conll": TaskSize(2000, 1000, 10, 1e-3, 128, 16), "stsb": TaskSize(4000, None, 3, 1e-3, 128),
               "mrpc": TaskSize(3668, None, 3, 1e-3, 128)},
        rates=CPU_CURVE_RATES),
    "gpu": Scale(
        "gpu", vocab_size=30522, max_seq_len=128, preset="base",
        sizes={"reference": ("base", {}), "smaller": ("small", {}), "larger": ("large", {})},
        steps=2000, batch_size=256, lr_by_objective=dict.fromkeys(("mlm+nsp", "mlm", "ltr", "electra"), 4e-4),
        recipe="paper", warmup=0.06, precision="bf16", dropout=0.0, compile=True,
        tasks={"mrpc": TaskSize(3668, None, 3, 4e-5, 128), "sst2": TaskSize(20000, None, 2, 4e-5, 64),
               "squad": TaskSize(24, 24, 2, 8e-5, 384), "conll": TaskSize(14041, None, 3, 5e-5, 128)},
        feature_lr=1e-3, eval_samples=2048, rates={"fixed": 5.0}),
}
