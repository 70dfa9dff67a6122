"""Scales and the cells a scale runs: what `bertkit ablate` will do, before it does any of it.

A cell is one resumable unit: the vocabulary, one prepared data format, the task subsets, one
pretraining, or one fine-tuning (or feature-based tagger) with one seed. Cells are listed in an
order that runs each one after the cells it needs, and named by what they compute, so two
tables that need the same pretraining or fine-tuning share one cell.

Scales:
- `tiny`: the tests' scale (a 20K-parameter model, a few steps); numbers mean nothing.
- `cpu-small`: 2 CPU cores, under 2 hours with 3 seeds and every table (two processes on one
  folder). A 4-layer, hidden-128 reference (Table 6: the 2 x 128 tiny and 4 x 256 mini beside
  it) and an 8,000-entry vocabulary; 1,600 pretraining steps of 32 x 128 tokens each with the
  budget recipe's settings (lr 1e-3, no dropout while pretraining, bf16 autocast where the CPU
  has bf16 instructions); fine-tuning at lr 1e-3 (these small shapes barely move at BERT's 1e-4)
  on fixed subsets (MRPC 1,500 pairs, SST-2 3,000 sentences, CoNLL-2003 2,000 sentences, SQuAD
  4 articles evaluated on 3 others). `estimate_s` sums per-cell costs from measured rates
  (CPU_SMALL_RATES, docs/ablations/cpu-small-timings.json); `bertkit ablate --plan-only` prints
  them. The first run (600 steps, fp32, fine-tuning at 1e-4) learned nothing:
  docs/ablations/cpu-small-first-run/.
- `gpu`: one H200, about 10 minutes: the base shape at 128 tokens, bf16 and torch.compile,
  about 2 minutes of pretraining per variant, full MRPC and CoNLL, larger SST-2 and SQuAD
  subsets. It has not been run yet; its step counts follow from the H200 rate the benchmark
  measured and are to be checked on the first run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bertkit.ablate.tables import (
    FEATURES,
    TABLES,
    TASKS,
    Column,
    Row,
    Variant,
    all_rows,
    cell_how,
)
from bertkit.errors import UserError


@dataclass(frozen=True)
class TaskSize:
    train: int  # examples (sentences, pairs) or, for squad, articles
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
    steps: int
    batch_size: int
    lr: float
    tasks: dict  # task -> TaskSize
    feature_lr: float = 1e-3  # the feature-based tagger's learning rate
    warmup: float = 0.06
    precision: str = "fp32"  # "fp32", "bf16" or "auto" (bf16 where the hardware has it; pretraining and fine-tuning)
    dropout: float | None = None  # every dropout while pretraining (None: the model's 0.1); fine-tuning keeps 0.1
    compile: bool = False
    eval_samples: int = 512
    # seconds per unit, measured at this scale: pretraining step per size; fine-tuning per
    # training example and epoch; evaluation per dev example; the fixed cost of a cell
    rates: dict = field(default_factory=dict)

    def shape(self, size: str) -> tuple[str, dict]:
        return self.sizes[size]


_TINY_SHAPE = {"hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2, "intermediate_size": 37,
               "max_position_embeddings": 64}
# cpu-small's reference: 4 layers (Table 7 needs the last four), hidden 128, 2 heads
_CPU_SHAPE = {"num_hidden_layers": 4, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512}
# cpu-small's measured rates (docs/ablations/cpu-small-timings.json): pretraining seconds per step
# per size; fine-tuning seconds per training example and epoch; evaluation seconds per cell
CPU_SMALL_RATES = {"fixed": 2.0, "vocab": 60.0, "data": 30.0, "step_reference": 0.30, "step_smaller": 0.12,
                   "step_larger": 0.65, "ft_mrpc": 10.08 / 1500, "ft_sst2": 6.68 / 3000, "ft_conll": 6.83 / 2000,
                   "fb_conll": 4.16 / 2000, "eval_conll": 2.2, "ft_squad": 86.0 / 6}
SCALES = {
    "tiny": Scale(
        "tiny", vocab_size=120, max_seq_len=32, preset="tiny",
        sizes={"reference": ("tiny", _TINY_SHAPE),
               "smaller": ("tiny", {**_TINY_SHAPE, "num_hidden_layers": 2}),
               "larger": ("tiny", {**_TINY_SHAPE, "hidden_size": 48, "num_attention_heads": 3})},
        steps=3, batch_size=8, lr=2e-3, eval_samples=8,
        tasks={"mrpc": TaskSize(16, 8, 1, 1e-3, 32, 8), "sst2": TaskSize(16, 8, 1, 1e-3, 32, 8),
               "squad": TaskSize(1, 1, 1, 1e-3, 64, 8), "conll": TaskSize(16, 8, 1, 1e-3, 32, 8)},
        rates={"fixed": 1.0}),
    "cpu-small": Scale(
        "cpu-small", vocab_size=8000, max_seq_len=128, preset="tiny",
        sizes={"reference": ("tiny", _CPU_SHAPE), "smaller": ("tiny", {}), "larger": ("mini", {})},
        steps=1600, batch_size=32, lr=1e-3, precision="auto", dropout=0.0,
        tasks={"mrpc": TaskSize(1500, None, 3, 1e-3, 128), "sst2": TaskSize(3000, None, 2, 1e-3, 64),
               "squad": TaskSize(4, 3, 2, 1e-3, 192), "conll": TaskSize(2000, 1000, 3, 1e-3, 128)},
        # seconds per unit with one thread each for two processes sharing the 2 cores, bf16 autocast:
        # docs/ablations/cpu-small-timings.json
        rates=CPU_SMALL_RATES),
    "gpu": Scale(
        "gpu", vocab_size=30522, max_seq_len=128, preset="base",
        sizes={"reference": ("base", {}), "smaller": ("small", {}), "larger": ("large", {})},
        steps=2000, batch_size=256, lr=4e-4, precision="bf16", dropout=0.0, compile=True,
        tasks={"mrpc": TaskSize(3668, None, 3, 4e-5, 128), "sst2": TaskSize(20000, None, 2, 4e-5, 64),
               "squad": TaskSize(24, 24, 2, 8e-5, 384), "conll": TaskSize(14041, None, 3, 5e-5, 128)},
        feature_lr=1e-3, eval_samples=2048, rates={"fixed": 5.0}),
}


@dataclass(frozen=True)
class Cell:
    id: str  # unique; also the cell's folder under work/ ("pretrain/bert", "finetune/bert/mrpc/ft/seed1")
    kind: str  # "vocab", "data", "tasks", "pretrain", "finetune"
    params: tuple  # (name, value) pairs: what the cell computes
    needs: tuple[str, ...] = ()
    estimate_s: float = 0.0

    def param(self, name: str, default=None):
        return dict(self.params).get(name, default)


@dataclass
class Plan:
    scale: Scale
    seeds: tuple[int, ...]
    tasks: tuple[str, ...]
    rows: list[Row]
    cells: list[Cell]

    @property
    def estimate_s(self) -> float:
        return sum(c.estimate_s for c in self.cells)


def select_rows(only: list[str] | None) -> list[Row]:
    """--only: table keys (t5..t8) and row keys (t5-ltr, ...); None: every row."""
    rows = all_rows()
    if not only:
        return list(rows.values())
    tables = {t.key: t for t in TABLES}
    chosen: dict[str, Row] = {}
    for name in only:
        if name in tables:
            chosen.update((r.key, r) for r in tables[name].rows)
        elif name in rows:
            chosen[name] = rows[name]
        else:
            raise UserError(f"--only: no table or row {name!r}; choose from {', '.join([*tables, *rows])}")
    return [r for r in rows.values() if r.key in chosen]  # the tables' order


def _columns(row: Row) -> list[Column]:
    return [c for t in TABLES for c in t.columns if row in t.rows]


def num_layers(scale: Scale, size: str) -> int:
    from bertkit.config import BertConfig

    preset, overrides = scale.shape(size)
    return BertConfig.preset(preset, **overrides).num_hidden_layers


def feature_layers(how: str, layers: int) -> tuple[tuple[int, ...], str]:
    chosen, combine = FEATURES[how]
    return (tuple(range(1, layers + 1)) if chosen == "all" else chosen), combine


def _pretrain_cell(scale: Scale, v: Variant) -> Cell:
    rate = scale.rates.get(f"step_{v.size}", 0.0)
    if v.objective == "ltr":  # next-token logits at every position, not at the masked 15% only
        rate *= scale.rates.get("ltr_factor", 1.0)
    params = (("objective", v.objective), ("format", v.format), ("mask_rule", v.mask_rule), ("size", v.size))
    return Cell(f"pretrain/{v.name}", "pretrain", params, ("vocab", f"data/{v.format}"),
                scale.rates.get("fixed", 0.0) + rate * scale.steps)


def _finetune_cell(scale: Scale, v: Variant, task: str, how: str, seed: int) -> Cell:
    size = scale.tasks[task]
    per_example = scale.rates.get(f"{'fb' if how.startswith('fb') else 'ft'}_{task}", 0.0)
    estimate = scale.rates.get("fixed", 0.0) + per_example * size.train * size.epochs \
        + scale.rates.get(f"eval_{task}", 0.0)
    params = (("variant", v.name), ("task", task), ("how", how), ("seed", seed))
    return Cell(f"finetune/{v.name}/{task}/{how}/seed{seed}", "finetune", params,
                (f"pretrain/{v.name}", f"tasks/{task}"), estimate)


def build_plan(scale_name: str, seeds: tuple[int, ...], tasks: tuple[str, ...] | None = None,
               only: list[str] | None = None) -> Plan:
    """The cells for these rows, tasks and seeds at this scale, each once, in running order."""
    if scale_name not in SCALES:
        raise UserError(f"--scale must be one of {', '.join(SCALES)}, not {scale_name!r}")
    scale = SCALES[scale_name]
    tasks = tuple(tasks or TASKS)
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        raise UserError(f"--tasks: unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    rows = select_rows(only)
    pretrains: dict[str, Cell] = {}
    finetunes: dict[str, Cell] = {}
    for row in rows:
        for column in _columns(row):
            if column.task != "pretrain" and column.task not in tasks:
                continue
            pretrains.setdefault(row.variant.name, _pretrain_cell(scale, row.variant))
            if column.task == "pretrain":
                continue
            for seed in seeds:
                cell = _finetune_cell(scale, row.variant, column.task, cell_how(row, column), seed)
                finetunes.setdefault(cell.id, cell)
    if not pretrains:
        raise UserError("--only and --tasks leave no cell to run (no chosen row has a chosen task)")
    formats = sorted({c.param("format") for c in pretrains.values()})
    used = sorted({c.param("task") for c in finetunes.values()}, key=TASKS.index)
    fixed = scale.rates.get("fixed", 0.0)
    setup = [Cell("vocab", "vocab", (("vocab_size", scale.vocab_size),), (), scale.rates.get("vocab", fixed))]
    setup += [Cell(f"data/{f}", "data", (("format", f),), ("vocab",), scale.rates.get("data", fixed)) for f in formats]
    setup += [Cell(f"tasks/{t}", "tasks", (("task", t),), (), fixed) for t in used]
    # Fine-tunings grouped by seed: a stopped run has whole seeds done, and a report with one
    # seed of every cell early.
    ordered = sorted(finetunes.values(), key=lambda c: c.param("seed"))
    return Plan(scale, tuple(seeds), tasks, rows, [*setup, *pretrains.values(), *ordered])


def describe(plan: Plan) -> str:
    """The plan as `--plan-only` prints it: counts by kind, each cell and its estimate."""
    kinds: dict[str, list[Cell]] = {}
    for c in plan.cells:
        kinds.setdefault(c.kind, []).append(c)
    lines = [f"scale {plan.scale.name}: {len(plan.cells)} cells, about {plan.estimate_s / 60:.0f} minutes "
             f"({', '.join(f'{len(v)} {k}' for k, v in kinds.items())}); seeds {','.join(map(str, plan.seeds))}"]
    for kind, cells in kinds.items():
        lines.append(f"  {kind}: {sum(c.estimate_s for c in cells) / 60:.1f} min")
    lines += [f"    {c.id}  ~{c.estimate_s:.0f}s" for c in plan.cells]
    return "\n".join(lines)
