"""The cells a scale runs: what `bertkit ablate` will do, before it does any of it.

A cell is one resumable unit: the vocabulary, one prepared data format, the task subsets, one
pretraining, or one fine-tuning (or feature-based tagger) with one seed. Cells are listed in an
order that runs each one after the cells it needs, and named by what they compute, so two
tables that need the same pretraining or fine-tuning share one cell. A cell's `params` hold
every setting it computes with (the scale's learning rates, sizes, epochs), so a record made
with other settings is not taken for this cell's (`bertkit.experiments.runner.read_done`).

`estimate_s` sums per-cell costs from the scale's measured rates (`scales.CPU_SMALL_RATES`);
`bertkit ablate --plan-only` prints them. The scales themselves are in `scales.py`; a scale with a
compute curve adds its `t5-curve` table (`curve.py`) to the paper's, and a run without --only takes
the scale's `tables`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.ablate.curve import budget_name, curve_table
from bertkit.ablate.scales import SCALES, Scale, TaskSize
from bertkit.ablate.tables import (
    CURVE_KEY,
    FEATURES,
    NOT_RUN,
    TABLES,
    TASKS,
    TIME_REFERENCE,
    Column,
    Row,
    Table,
    Variant,
    all_rows,
    cell_how,
)
from bertkit.errors import UserError
from bertkit.experiments.calibrate import wall_estimate as _wall
from bertkit.experiments.core import Cell

__all__ = ["SCALES", "Cell", "Plan", "Scale", "TaskSize", "build_plan", "describe", "setup_cells"]


@dataclass
class Plan:
    scale: Scale
    seeds: tuple[int, ...]
    tasks: tuple[str, ...]
    rows: list[Row]
    cells: list[Cell]
    tables: tuple[Table, ...] = TABLES  # the scale's: the paper's, and its compute curve where it has one

    @property
    def estimate_s(self) -> float:
        return sum(c.estimate_s for c in self.cells)


def get_scale(name: str) -> Scale:
    if name not in SCALES:
        raise UserError(f"--scale must be one of {', '.join(SCALES)}, not {name!r}")
    return SCALES[name]


def tables_for(scale: Scale) -> tuple[Table, ...]:
    """The paper's tables, and the compute curve where the scale has one."""
    return (*TABLES, curve_table(scale)) if scale.curve else TABLES


def select_rows(scale: Scale, tables: tuple[Table, ...], only: list[str] | None) -> list[Row]:
    """--only: table keys (t5, t5-time, ..., t8, t5-curve) and row keys (t5-ltr, ...); None: the rows
    of the scale's `tables`."""
    rows = all_rows(tables)
    by_key = {t.key: t for t in tables}
    chosen: dict[str, Row] = {}
    for name in only or scale.tables:
        if name in by_key:
            chosen.update((r.key, r) for r in by_key[name].rows)
        elif name in rows:
            chosen[name] = rows[name]
        elif name.startswith(CURVE_KEY) and not scale.curve:
            raise UserError(f"--only {name}: scale {scale.name} has no compute curve; choose from "
                            f"{', '.join(n for n, s in SCALES.items() if s.curve)}")
        else:
            raise UserError(f"--only: no table or row {name!r}; choose from {', '.join([*by_key, *rows])}")
    return [r for r in rows.values() if r.key in chosen]  # the tables' order


def _columns(row: Row, tables: tuple[Table, ...]) -> list[Column]:
    return [c for t in tables for c in t.columns if row in t.rows]


def num_layers(scale: Scale, size: str) -> int:
    from bertkit.config import BertConfig

    preset, overrides = scale.shape(size)
    return BertConfig.preset(preset, **overrides).num_hidden_layers


def feature_layers(how: str, layers: int) -> tuple[tuple[int, ...], str]:
    chosen, combine = FEATURES[how]
    return (tuple(range(1, layers + 1)) if chosen == "all" else chosen), combine


def step_seconds(scale: Scale, size: str, objective: str) -> float:
    """The estimated seconds of one pretraining step: the size's MLM step times the objective's factor
    (LTR: next-token logits at every position, not at the masked 15%; ELECTRA: the generator too)."""
    return scale.rates.get(f"step_{size}", 0.0) * scale.rates.get(f"{objective}_factor", 1.0)


def _pretrain_cell(scale: Scale, v: Variant) -> Cell:
    fixed, needs = scale.rates.get("fixed", 0.0), ("vocab", f"data/{v.format}")
    if v.budget == "steps":
        length = {"steps": v.steps or scale.steps}
        seconds = step_seconds(scale, v.size, v.objective) * length["steps"]
    elif scale.time_minutes is not None:
        length, seconds = {"minutes": scale.time_minutes}, 60 * scale.time_minutes
    else:  # the minutes the reference took: it runs first
        reference = f"pretrain/{TIME_REFERENCE.name}"
        length, needs = {"minutes_of": reference}, (*needs, reference)
        seconds = step_seconds(scale, TIME_REFERENCE.size, TIME_REFERENCE.objective) * scale.steps
    params = scale.pretrain_params(v.objective, v.format, v.size, v.mask_rule, **length)
    return Cell(f"pretrain/{v.name}", "pretrain", params, needs, fixed + seconds)


def finetune_settings(scale: Scale, task: str, how: str) -> tuple:
    """What a fine-tuning cell trains with: the task's size and epochs, its lr (the feature-based
    tagger's own), batch and length."""
    size: TaskSize = scale.tasks[task]
    lr = scale.feature_lr if how.startswith("fb-") else size.lr
    return (("train", size.train), ("epochs", size.epochs), ("lr", lr), ("batch_size", size.batch_size),
            ("max_seq_len", size.max_seq_len))


def _finetune_cell(scale: Scale, v: Variant, task: str, how: str, seed: int) -> Cell:
    """One fine-tuning; its estimate from the reference's rate per example and epoch, times the
    size's step cost over the reference's and the head's factor (`head_ltr-bilstm`)."""
    size = scale.tasks[task]
    per_example = scale.rates.get(f"{'fb' if how.startswith('fb') else 'ft'}_{task}", 0.0)
    reference = scale.rates.get("step_reference")
    if reference and v.size != "reference":
        per_example *= scale.rates.get(f"step_{v.size}", reference) / reference
    per_example *= scale.rates.get(f"head_{how}", 1.0)
    estimate = scale.rates.get("fixed", 0.0) + per_example * size.train * size.epochs \
        + scale.rates.get(f"eval_{task}", 0.0)
    params = (("variant", v.name), ("task", task), ("how", how), ("seed", seed), *finetune_settings(scale, task, how))
    return Cell(f"finetune/{v.name}/{task}/{how}/seed{seed}", "finetune", params,
                (f"pretrain/{v.name}", f"tasks/{task}"), estimate)


def setup_cells(scale: Scale, formats, tasks) -> list[Cell]:
    """The vocabulary, the prepared data formats and the task subsets."""
    fixed = scale.rates.get("fixed", 0.0)
    cells = [Cell("vocab", "vocab", (("vocab_size", scale.vocab_size),), (), scale.rates.get("vocab", fixed))]
    cells += [Cell(f"data/{f}", "data", (("format", f), ("max_seq_len", scale.max_seq_len)), ("vocab",),
                   scale.rates.get("data", fixed)) for f in sorted(formats)]
    for t in tasks:
        size = scale.tasks[t]
        cells.append(Cell(f"tasks/{t}", "tasks", (("task", t), ("train", size.train), ("dev", size.dev)), (), fixed))
    return cells


def _check_tasks(tasks: tuple[str, ...] | None, rows: list[Row], tables) -> tuple[str, ...]:
    """--tasks, each a known task; None: the tasks of the chosen rows' columns."""
    if tasks is None:
        used = {c.task for r in rows for c in _columns(r, tables)}
        return tuple(t for t in TASKS if t in used)
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        raise UserError(f"--tasks: unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    return tuple(tasks)


def _add(cells: dict[str, Cell], cell: Cell) -> None:
    """`cell` once: rows that share it must compute it with the same settings."""
    if cells.setdefault(cell.id, cell).params != cell.params:
        raise ValueError(f"two rows make cell {cell.id} with different settings")


def build_plan(scale_name: str, seeds: tuple[int, ...], tasks: tuple[str, ...] | None = None,
               only: list[str] | None = None) -> Plan:
    """The cells for these rows, tasks and seeds at this scale, each once, in running order."""
    scale = get_scale(scale_name)
    tables = tables_for(scale)
    rows = select_rows(scale, tables, only)
    tasks = _check_tasks(tasks, rows, tables)
    pretrains: dict[str, Cell] = {}
    finetunes: dict[str, Cell] = {}
    for row in rows:
        for column in _columns(row, tables):
            how = cell_how(row, column)
            if (column.task != "pretrain" and column.task not in tasks) or how == NOT_RUN:
                continue
            if column.task != "pretrain" and column.task not in scale.tasks:
                raise UserError(f"--tasks: scale {scale.name} has no size for task {column.task}")
            _add(pretrains, _pretrain_cell(scale, row.variant))
            if column.task == "pretrain":
                continue
            for seed in seeds[:row.seeds]:
                _add(finetunes, _finetune_cell(scale, row.variant, column.task, how, seed))
    if not pretrains:
        raise UserError("--only and --tasks leave no cell to run (no chosen row has a chosen task)")
    needed = {n for c in pretrains.values() for n in c.needs}
    reference = f"pretrain/{TIME_REFERENCE.name}"
    if reference in needed and reference not in pretrains:
        # an equal-time pretraining takes the reference's minutes: the reference runs first
        pretrains = {reference: _pretrain_cell(scale, TIME_REFERENCE), **pretrains}
    formats = {c.param("format") for c in pretrains.values()}
    used = sorted({c.param("task") for c in finetunes.values()}, key=TASKS.index)
    # Fine-tunings grouped by seed: a stopped run has whole seeds done, and a report with one
    # seed of every cell early.
    ordered = sorted(finetunes.values(), key=lambda c: c.param("seed"))
    cells = [*setup_cells(scale, formats, used), *pretrains.values(), *ordered]
    return Plan(scale, tuple(seeds), tasks, rows, cells, tables)


def wall_estimate(plan: Plan, processes: int = 2) -> float:
    """Seconds until the last cell ends when `processes` processes share the folder (the runner's rule)."""
    return _wall(plan.cells, processes)


def describe(plan: Plan, processes: int = 2) -> str:
    """The plan as `--plan-only` prints it: counts by kind, each cell and its estimate."""
    kinds: dict[str, list[Cell]] = {}
    for c in plan.cells:
        kinds.setdefault(c.kind, []).append(c)
    wall = wall_estimate(plan, processes) / 60
    lines = [f"scale {plan.scale.name}: {len(plan.cells)} cells, about {plan.estimate_s / 60:.0f} minutes of cell "
             f"time ({', '.join(f'{len(v)} {k}' for k, v in kinds.items())}); seeds "
             f"{','.join(map(str, plan.seeds)) or '-'}; about {int(wall // 60)} h {int(wall % 60):02d} min of wall "
             f"time if {processes} processes share the folder (the same command run {processes} times at once; on "
             f"the CPU one thread each, on {processes} otherwise quiet cores)"]
    lines += describe_curve(plan)
    for kind, cells in kinds.items():
        lines.append(f"  {kind}: {sum(c.estimate_s for c in cells) / 60:.1f} min")
    lines += [f"    {c.id}  ~{c.estimate_s:.0f}s" for c in plan.cells]
    return "\n".join(lines)


def describe_curve(plan: Plan) -> list[str]:
    """The compute curve's budgets and each line's steps at them, where the plan has curve rows."""
    table = next((t for t in plan.tables if t.key == CURVE_KEY), None)
    chosen = {r.key for r in plan.rows}
    if table is None or not chosen & {r.key for r in table.rows}:
        return []
    meta = table.meta
    lines = [f"  compute curve: budgets {', '.join(map(budget_name, meta['budgets']))} of the MLM + NSP reference's "
             f"{meta['reference_steps']:,} steps x {meta['reference_flops_per_step']:.3g} useful FLOPs; steps at each:"]
    by_line: dict[str, list[str]] = {}
    for key, info in meta["rows"].items():
        if key in chosen:
            by_line.setdefault(info["line"], []).append(f"{info['steps']:,}")
    lines += [f"    {line}: {' / '.join(steps)}" for line, steps in by_line.items()]
    if meta["largest_budget_seeds"] is not None:
        lines.append(f"    the {budget_name(max(meta['budgets']))} budget fine-tunes with the first "
                     f"{meta['largest_budget_seeds']} seeds only")
    return lines
