"""`table5`: the paper's Table 5 on a compute curve, through the experiment runner.

MLM + NSP, MLM alone, left-to-right and replaced-token detection, each pretrained at the scale's
budgets of equal useful FLOPs (`bertkit.ablate.curve`), each fine-tuned on SST-2, SQuAD,
CoNLL-2003 and STS-B with every seed, compared with MLM + NSP at the same budget
(`bertkit.ablate.curve_report`: the paper's sign where it has a figure, the budget where
bidirectional passes left-to-right, RTD against MLM). The cells are the ablation's; here they run in
an order that suits a run spanning sessions: each pretraining, smallest budget first, followed by
its own fine-tunings, so a session that ends leaves whole pretrainings' rows rather than models a
later session must make again. Scales: `cpu` (ablate's `cpu-curve`) and `tiny` (CI).
"""

from __future__ import annotations

import functools

from bertkit.ablate.plan import Plan, build_plan
from bertkit.ablate.tables import CURVE_KEY
from bertkit.experiments import pretraining
from bertkit.experiments.core import Cell, Context, Experiment, Report, shared_data

SCALES = {"cpu": "cpu-curve", "tiny": "tiny"}
SEEDS = (1, 2, 3)


@functools.lru_cache(maxsize=4)
def plan_of(scale: str) -> Plan:
    plan = build_plan(SCALES[scale], SEEDS, None, [CURVE_KEY])
    setup = [c for c in plan.cells if c.kind in pretraining.SETUP]
    # smallest budget first; within a budget ELECTRA last, its settings being the least settled
    pretrains = sorted((c for c in plan.cells if c.kind == "pretrain"),
                       key=lambda c: (c.param("steps") * _flops(plan, c), c.param("objective") == "electra"))
    ordered = list(setup)
    for p in pretrains:
        variant = p.id.removeprefix("pretrain/")
        ordered.append(p)
        ordered += sorted((c for c in plan.cells if c.kind == "finetune" and c.param("variant") == variant),
                          key=lambda c: (c.param("seed"), c.id))
    plan.cells = ordered
    return plan


def _flops(plan: Plan, cell: Cell) -> float:
    from bertkit.ablate.curve import flops_per_step

    return flops_per_step(plan.scale, cell.param("objective"), cell.param("format"), cell.param("size"))


plan, execute, calibrate = pretraining.parts(plan_of)


def report(cells: list[Cell], records: dict, ctx: Context) -> Report:
    from bertkit.ablate.curve_report import plot_curve
    from bertkit.ablate.report import build_report, render_markdown
    from bertkit.plots import plot_ablation_table

    plan = plan_of(ctx.scale)
    command = "bertkit experiment table5" + ("" if ctx.scale == "cpu" else f" --scale {ctx.scale}")
    data = build_report(plan, records, {"command": command})

    def draw(out) -> None:
        for table in data["tables"]:
            plot_ablation_table(table, out / f"{table['key']}.png")
        if "curve" in data:
            plot_curve(data["curve"], out)

    return Report(render_markdown(data), [draw], data)


EXPERIMENT = Experiment(
    name="table5", title="Table 5 on a compute curve: pretraining tasks at equal FLOPs", scales=tuple(SCALES),
    plan=plan, execute=execute, report=report, calibrate=calibrate,
    cost="four objectives at three budgets (1x, 3x, 9x), four tasks x 3 seeds: several hours on 2 cores; it "
         "spans sessions, each pretraining followed by its fine-tunings",
    env_defaults={"corpus": [f"{shared_data()}/corpus/wikipedia/enwiki_000{i}.txt.xz" for i in range(8)],
                  "data_dir": shared_data(), "workers": 1})
