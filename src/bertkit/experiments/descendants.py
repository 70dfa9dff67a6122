"""`descendants`: BERT's descendants pretrained side by side on the demo's data, at equal FLOPs and at
equal wall time, and scored the same way.

Every arm is `bertkit pretrain --arch ARCH --recipe budget` on the tiny preset's shape, each with its
own objective (`bertkit.pretrain.options.ARCHS`: BERT and RoBERTa masked LM, ALBERT masked LM +
sentence order on `sop` pairs, DeBERTa-v3 replaced-token detection with gradient-disentangled
sharing, ModernBERT masked LM at 30%), on BBC News's training articles (the demo's split, one
WordPiece vocabulary for all, 128-token instances), with 3 pretraining seeds at two budgets:
- equal FLOPs: BERT runs a fixed step count; every other arch the steps that spend BERT's useful
  FLOPs, counted as the run's status line counts them (`bertkit.pretrain.report.useful_flops`);
- equal wall time: every other arch pretrains for the minutes BERT's run of the same seed took
  (BERT's row is its equal-FLOPs run; the cell reads that run's record).
Each pretrained model is scored: its validation MLM (DeBERTa: balanced RTD) accuracy, the demo's
topic probe (`bertkit.demo.labels`) and sense probe (`bertkit.demo.senses`), SST-2 and CoNLL-2003
fine-tuned on fixed subsets (one fine-tuning seed per pretraining seed, each its own cell), and a
strict load in transformers' class of its family. The report is `descendants_report.py`.

Scales: `cpu` (the default: about 5 minutes per BERT arm on one thread; two one-thread processes
share the folder: `OMP_NUM_THREADS=1 bertkit experiment descendants` in two terminals) and `tiny`.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
from dataclasses import dataclass, field

from bertkit.ablate.scales import TaskSize
from bertkit.experiments.calibrate import line as _line
from bertkit.experiments.calibrate import timed as _timed
from bertkit.experiments.core import Cell, Context, Experiment, shared_data
from bertkit.experiments.descendants_cells import (
    ARCH_NAMES,
    BUDGETS,
    OPTIONS,
    REFERENCE,
    TASKS,
    data_format,
    execute,
    flops_per_step,
    pretrain_id,
)
from bertkit.pretrain.setup import TrainConfig

PRESET, RECIPE = "tiny", "budget"
SETUP = ("corpus", "vocab", "data", "tasks")


@dataclass(frozen=True)
class Scale:
    articles_per_topic: int | None  # the demo corpus's first N articles of each topic (None: all 2,225)
    vocab_size: int
    max_seq_len: int  # tokens per pretraining instance
    val_fraction: float  # documents held out for pretraining's validation
    batch_size: int  # pretraining sequences per step
    bert_steps: int  # BERT's steps: the equal-FLOPs budget
    seeds: tuple[int, ...]  # pretraining seeds (each fine-tuning's seed too)
    eval_samples: int  # validation sequences scored at the end of each pretraining
    tasks: dict  # task -> TaskSize (train, dev, epochs, lr, max_seq_len, batch_size)
    probe_budgets: tuple[int, ...]  # labelled articles per topic of the topic probe (and "all")
    probe_draws: int
    probe_tokens: int  # each article's first tokens the probe reads
    cal_steps: tuple[int, int]  # the two pretraining lengths calibration times
    cal_examples: tuple[int, int]  # the two fine-tuning subset sizes calibration times
    shape: dict = field(default_factory=dict)  # overrides of the tiny preset's shape
    precision: str | None = None  # None: the recipe's ("auto": bf16 where the CPU has bf16 instructions)


SCALES = {
    # The tiny preset (2 layers, hidden 128, 4.4M parameters with BERT's embeddings), the budget recipe's
    # batch of 32 x 128 tokens. BERT's 1,200 steps take about 5 minutes on one thread of the 2-core machine
    # (the calibration measured 0.24-0.31 s per step beside other work; the report gives each run's minutes).
    # Fine-tuning as the demo's models were:
    # SST-2 on 8,000 sentences at 1e-4 for 3 epochs (bench/pretrain_objectives.py: 66-68% for the budget
    # recipe's MLM), CoNLL-2003 on 2,000 sentences at 3e-4 for 10 epochs of 16 (the ablation's task check:
    # fewer epochs or a higher lr tag everything O), scored on the whole SST-2 dev set and 1,000 CoNLL
    # dev sentences.
    "cpu": Scale(articles_per_topic=None, vocab_size=8000, max_seq_len=128, val_fraction=0.02, batch_size=32,
                 bert_steps=1200, seeds=(1, 2, 3), eval_samples=512,
                 tasks={"sst2": TaskSize(8000, 872, 3, 1e-4, 64, 32), "conll": TaskSize(2000, 1000, 10, 3e-4, 128, 16)},
                 probe_budgets=(4, 16, 64), probe_draws=5, probe_tokens=128, cal_steps=(10, 40),
                 cal_examples=(48, 144)),
    # CI: four articles per topic, a 32-wide model, a few steps; the numbers mean nothing.
    "tiny": Scale(articles_per_topic=4, vocab_size=300, max_seq_len=32, val_fraction=0.1, batch_size=8,
                  bert_steps=4, seeds=(1,), eval_samples=8,
                  tasks={"sst2": TaskSize(16, 8, 1, 1e-3, 32, 8), "conll": TaskSize(16, 8, 1, 1e-3, 32, 8)},
                  probe_budgets=(1,), probe_draws=2, probe_tokens=32, cal_steps=(1, 2), cal_examples=(4, 8),
                  shape={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37},
                  precision="fp32"),
}


def train_options(arch: str, s: Scale) -> dict:
    """What a pretraining of `arch` trains with at this scale (`OPTIONS`): the arch's defaults and the
    recipe's values, resolved by `TrainConfig` as `bertkit pretrain --arch ARCH --recipe budget` does."""
    cfg = TrainConfig(data="", out="", recipe=RECIPE, steps=1, preset=PRESET, arch=arch,
                      config_overrides=dict(s.shape), batch_size=s.batch_size, precision=s.precision,
                      eval_samples=s.eval_samples)
    return {k: getattr(cfg, k) for k in OPTIONS}


def equal_flops_steps(reference_steps: int, reference_flops: float, arch_flops: float) -> int:
    """The steps of an arch whose step costs `arch_flops` that spend what `reference_steps` of the
    reference's steps spend (at least one)."""
    return max(1, round(reference_steps * reference_flops / arch_flops))


def _setup_cells(s: Scale) -> list[Cell]:
    cells = [Cell("corpus", "corpus", (("articles_per_topic", s.articles_per_topic), ("test_fraction", 0.2),
                                       ("split_seed", 0)), keeps=True),
             Cell("vocab", "vocab", (("vocab_size", s.vocab_size),), ("corpus",), keeps=True)]
    for fmt in sorted({data_format(train_options(a, s)["objective"]) for a in ARCH_NAMES}):
        params = (("format", fmt), ("max_seq_len", s.max_seq_len), ("val_fraction", s.val_fraction), ("seed", 0))
        cells.append(Cell(f"data/{fmt}", "data", params, ("corpus", "vocab"), rate=f"data/{fmt}", keeps=True))
    for task in TASKS:
        size = s.tasks[task]
        cells.append(Cell(f"tasks/{task}", "tasks", (("task", task), ("train", size.train), ("dev", size.dev)),
                          rate=f"tasks/{task}", keeps=True))
    return cells


def _pretrain_cell(s: Scale, arch: str, budget: str, seed: int, options: dict, steps: int) -> Cell:
    """One pretraining: `steps` at equal FLOPs; at equal time, the minutes BERT's run of this seed took."""
    data = f"data/{data_format(options['objective'])}"
    cadences = (("save_every", max(1, s.bert_steps // 8)), ("log_every", max(1, s.bert_steps // 20)))
    params = (*options.items(), *cadences, ("seed", seed))
    if budget == "flops":
        return Cell(pretrain_id(arch, budget, seed), "pretrain", (*params, ("steps", steps)), (data,),
                    rate=f"pretrain/{arch}", units=float(steps), keeps=True)
    reference = pretrain_id(REFERENCE, "flops", seed)
    # timed as BERT's steps at BERT's rate plus this arch's fixed cost (calibrate's "pretrain-time/ARCH")
    return Cell(pretrain_id(arch, budget, seed), "pretrain", (*params, ("minutes_of", reference)), (data, reference),
                rate=f"pretrain-time/{arch}", units=float(s.bert_steps), keeps=True, records_only=(reference,))


def _scoring_cells(s: Scale, arch: str, budget: str, seed: int) -> list[Cell]:
    """The probes (and the transformers check) and one fine-tuning per task of one pretrained model."""
    model = pretrain_id(arch, budget, seed)
    arm = f"{arch}/{budget}/seed{seed}"
    params = (("articles_per_topic", s.articles_per_topic), ("test_fraction", 0.2), ("split_seed", 0),
              ("budgets", s.probe_budgets), ("draws", s.probe_draws), ("probe_seed", 0),
              ("max_len", s.probe_tokens))
    cells = [Cell(f"score/{arm}", "score", params, (model,), rate=f"score/{arch}")]
    for task in TASKS:
        size = s.tasks[task]
        ft = (("task", task), ("train", size.train), ("dev", size.dev), ("epochs", size.epochs), ("lr", size.lr),
              ("batch_size", size.batch_size), ("max_seq_len", size.max_seq_len), ("seed", seed),
              ("precision", s.precision or "auto"))
        cells.append(Cell(f"finetune/{arm}/{task}", "finetune", ft, (model, f"tasks/{task}"),
                          rate=f"finetune/{task}/{arch}", units=finetune_units(size.train, size.dev, size.epochs)))
    return cells


def finetune_units(train: int, dev: int, epochs: int) -> float:
    """A fine-tuning's cost in training examples: each epoch trains on `train` and scores `dev`
    (a forward pass, about a third of a training example's forward and backward)."""
    return float(epochs * (train + dev / 3))


@functools.lru_cache(maxsize=4)
def plan_of(scale: str) -> tuple[Cell, ...]:
    """Setup, then seed by seed: BERT, each other arch at equal FLOPs, each at equal time, every
    pretraining followed by its scoring (so a stopped session leaves whole rows)."""
    s = SCALES[scale]
    cells = _setup_cells(s)
    options = {a: train_options(a, s) for a in ARCH_NAMES}
    flops = {a: flops_per_step(o, s.vocab_size, s.max_seq_len) for a, o in options.items()}
    for seed in s.seeds:
        for budget in BUDGETS:
            for arch in ARCH_NAMES:
                if budget == "time" and arch == REFERENCE:
                    continue  # BERT's equal-time run is its equal-FLOPs run
                steps = equal_flops_steps(s.bert_steps, flops[REFERENCE], flops[arch])
                cells.append(_pretrain_cell(s, arch, budget, seed, options[arch], steps))
                cells += _scoring_cells(s, arch, budget, seed)
    return tuple(cells)


def plan(scale: str, env: dict) -> list[Cell]:
    return list(plan_of(scale))


# ---- calibration: the real cells, short, in work/calibration/ ----
def calibrate(scale: str, cells: list[Cell], ctx: Context) -> dict[str, tuple[float, float]]:
    """{rate: (fixed s, s per unit)} on this machine. In a folder of its own (its records apart
    from the run's): the setup cells for real (their times), then for each arch a pretraining of two
    short lengths (the difference gives seconds per step), a scoring of the longer one's model and a
    fine-tuning of it on two small subsets of each task. An equal-time pretraining costs BERT's
    steps at BERT's rate plus its arch's fixed cost."""
    from bertkit.experiments.runner import run_cells

    s = SCALES[scale]
    cal = Context(ctx.work / "calibration", ctx.work / "calibration" / "cells", scale, ctx.env, ctx.device)
    setup = [c for c in plan_of(scale) if c.kind in SETUP]
    done = run_cells(setup, execute, cal, log=lambda line: None)
    out = {c.rate_key: (done[c.id]["time_s"], 0.0) for c in setup}
    wanted = {c.rate_key for c in cells}
    archs = [a for a in ARCH_NAMES if any(k.endswith("/" + a) for k in wanted)]
    if any(k.startswith("pretrain-time/") for k in wanted) and REFERENCE not in archs:
        archs.insert(0, REFERENCE)
    subsets = _calibration_subsets(s, cal)
    if archs:  # a warm-up: the first calls in a process import and allocate what the later ones reuse
        _arch_rates(scale, archs[0], subsets, cal)
    for arch in archs:
        out.update(_arch_rates(scale, arch, subsets, cal))
    for arch in ARCH_NAMES:
        if REFERENCE in archs and arch in archs:
            out[f"pretrain-time/{arch}"] = (out[f"pretrain/{arch}"][0], out[f"pretrain/{REFERENCE}"][1])
    return out


_CAL_MODEL = "calibration/pretrain"  # the calibration's short pretraining (one arch at a time)


def _arch_rates(scale: str, arch: str, subsets: dict, cal: Context) -> dict[str, tuple[float, float]]:
    """One arch's pretraining (two short lengths), scoring and fine-tuning rates."""
    s = SCALES[scale]
    pre = next(c for c in plan_of(scale) if c.id == pretrain_id(arch, "flops", s.seeds[0]))
    times = [_timed(lambda n=n: _short_pretrain(pre, n, cal)) for n in s.cal_steps]
    out = {f"pretrain/{arch}": _line(*times, *s.cal_steps)}
    score = next(c for c in plan_of(scale) if c.id == f"score/{arch}/flops/seed{s.seeds[0]}")
    probe = _calibration_cell(score, needs=(_CAL_MODEL,))
    out[f"score/{arch}"] = (_timed(lambda: execute(probe, cal)), 0.0)
    for task in TASKS:
        out[f"finetune/{task}/{arch}"] = _finetune_rate(scale, arch, task, subsets[task], cal)
    return out


def _calibration_cell(cell: Cell, needs: tuple[str, ...], cell_id: str = "", **changes) -> Cell:
    params = {**dict(cell.params), **changes}
    return dataclasses.replace(cell, id=cell_id or f"calibration/{cell.kind}", params=tuple(params.items()),
                               needs=needs)


def _short_pretrain(pre: Cell, steps: int, cal: Context) -> None:
    shutil.rmtree(cal.path(_CAL_MODEL), ignore_errors=True)  # a fresh run, not a resumed one
    execute(_calibration_cell(pre, pre.needs[:1], _CAL_MODEL, steps=steps), cal)


def _calibration_subsets(s: Scale, cal: Context) -> dict[str, list[str]]:
    """Each task's two calibration subsets (training and dev sets of `cal_examples` each)."""
    out = {}
    for task in TASKS:
        out[task] = []
        for n in s.cal_examples:
            cell = Cell(f"calibration/tasks/{task}/{n}", "tasks", (("task", task), ("train", n), ("dev", n)))
            execute(cell, cal)
            out[task].append(cell.id)
    return out


def _finetune_rate(scale: str, arch: str, task: str, subsets: list[str], cal: Context) -> tuple[float, float]:
    """A fine-tuning's rate from the calibration model, on the task's two subsets for one epoch."""
    s = SCALES[scale]
    cell = next(c for c in plan_of(scale) if c.id == f"finetune/{arch}/flops/seed{s.seeds[0]}/{task}")
    times = [_timed(lambda n=n, sub=sub: execute(_calibration_cell(cell, (_CAL_MODEL, sub), train=n, dev=n, epochs=1),
                                                  cal))
             for n, sub in zip(s.cal_examples, subsets)]
    return _line(*times, *(finetune_units(n, n, 1) for n in s.cal_examples))


def report(cells: list[Cell], records: dict, ctx: Context):
    from bertkit.experiments.descendants_report import build_report

    return build_report(cells, records, SCALES[ctx.scale].bert_steps)


EXPERIMENT = Experiment(
    name="descendants", title="BERT's descendants side by side: equal FLOPs and equal wall time",
    scales=tuple(SCALES), plan=plan, execute=execute, report=report, calibrate=calibrate,
    cost="5 archs x 3 seeds at equal FLOPs and 4 x 3 at equal time (BERT's 1,200 steps: about 5 minutes), each "
         "scored and fine-tuned on SST-2 and CoNLL: about 1 h 55 min with two one-thread processes on 2 cores "
         "(the longest cell, ModernBERT at equal FLOPs, about 10 minutes)",
    env_defaults={"data_dir": shared_data()})
