"""`bertkit ablate --check-tasks`: is each task clearly above its majority class on the reference?

A task can separate pretrainings only where a fine-tuned model does clearly better than
predicting the dev subset's most frequent label (the second run's MRPC stayed within two points
of it in every row). Before the full run, the check runs the full run's own first cells (the
vocabulary, the task subsets, the MLM + NSP reference's pretraining and its fine-tunings with
every seed: the first row of the scale's first table, Table 5's or the compute curve's MLM + NSP at
its smallest budget), so none of its work is done twice, and scores each task against
its majority class (`taskdata.majority_baseline`; for CoNLL-2003 every word O, F1 0; for SQuAD
an empty answer, F1 0). A task is clearly above when the gap is at least CLEAR_MARGIN points and
larger than the seeds' spread, the report's sign rule. The result goes to OUT/task-check.json.
"""

from __future__ import annotations

import statistics

from bertkit.ablate.plan import Plan, build_plan, get_scale, tables_for
from bertkit.ablate.tables import CURVE_COLUMNS, TABLE5

CLEAR_MARGIN = 3.0  # points above the majority class a task's median must reach
# each task's main metric, as Table 5 (and its compute curve) reads it
TASK_METRIC = {c.task: c.metric for c in (*TABLE5.columns, *CURVE_COLUMNS)}


def check_plan(scale: str, seeds: tuple[int, ...], tasks: tuple[str, ...] | None) -> Plan:
    """The reference's cells: the full run's first ones."""
    tables = {t.key: t for t in tables_for(get_scale(scale))}
    return build_plan(scale, seeds, tasks, [tables[get_scale(scale).tables[0]].rows[0].key])


def _verdict(values: list[float], baseline: float | None) -> dict:
    if not values or baseline is None:
        return {"verdict": "pending" if not values else "no baseline"}
    median = statistics.median(values)
    spread = statistics.stdev(values) if len(values) > 1 else None
    gap = median - baseline
    clear = gap >= CLEAR_MARGIN and (spread is None or gap > spread)
    return {"median": round(median, 4), "std": None if spread is None else round(spread, 4), "gap": round(gap, 4),
            "verdict": "clearly above" if clear else "not clearly above"}


def task_check(plan: Plan, records: dict) -> dict:
    """Each task's reference scores over the seeds, its majority class and the verdict."""
    variant = plan.rows[0].variant.name
    pretrain = records.get(f"pretrain/{variant}", {}).get("result", {})
    out = {"scale": plan.scale.name, "seeds": list(plan.seeds), "margin": CLEAR_MARGIN,
           "reference": {"steps": pretrain.get("steps"), "val": pretrain.get("val", {})}, "tasks": {}}
    for task in plan.tasks:
        metric = TASK_METRIC[task]
        dev = [records.get(f"finetune/{variant}/{task}/ft/seed{s}", {}).get("result", {}).get("dev", {})
               for s in plan.seeds]
        values = [d[metric] for d in dev if metric in d]
        majority = records.get(f"tasks/{task}", {}).get("result", {}).get("majority", {})
        entry = {"metric": metric, "values": values, "majority": majority,
                 **_verdict(values, majority.get(metric))}
        if task == "conll":  # token accuracy beside the all-O tagger's
            entry["token_accuracy"] = [d["accuracy"] for d in dev if "accuracy" in d]
        out["tasks"][task] = entry
    return out


def render_check(check: dict) -> list[str]:
    """The check as lines for the console and NOTE.md."""
    val = check["reference"]["val"]
    accuracies = ", ".join(f"{k.removesuffix('_accuracy')} {100 * v:.1f}%" for k, v in val.items()
                           if k.endswith("_accuracy"))
    lines = [f"task check at scale {check['scale']}: the MLM + NSP reference ({check['reference']['steps']} steps; "
             f"validation {accuracies or 'pending'}), seeds {','.join(map(str, check['seeds']))}; clearly above = at "
             f"least {check['margin']:g} points over the majority class and more than the seeds' spread"]
    for task, e in check["tasks"].items():
        if "median" not in e:
            lines.append(f"  {task:6s} {e['metric']:9s} {e['verdict']}")
            continue
        spread = f" ± {e['std']:.2f}" if e["std"] is not None else " (one seed)"
        base = e["majority"][e["metric"]]
        line = (f"  {task:6s} {e['metric']:9s} {e['median']:6.2f}{spread}  majority class {base:6.2f}  "
                f"gap {e['gap']:+6.2f}  {e['verdict']}")
        if e.get("token_accuracy"):
            line += (f" (token accuracy {statistics.median(e['token_accuracy']):.2f}, all O "
                     f"{e['majority']['accuracy']:.2f})")
        lines.append(line)
    return lines
