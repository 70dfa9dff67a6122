"""The compute curve's part of an ablation's report (`t5-curve`): what each budget pretrained, each
task's score against pretraining FLOPs, and the budget where bidirectional passes left-to-right.

`curve_section` builds report.json's "curve" from the curve table's entries (report.py's table
JSON) and the pretraining records: per budget, each line's steps, FLOPs (its steps times the useful
FLOPs per step the plan counted, `curve.py`), minutes and validation metrics; per task, each line's
points (median, standard deviation and every seed's value at each budget), the smallest budget
where the better bidirectional line (MLM + NSP or MLM, the higher median there) is above LTR by
more than the larger of the two rows' seed standard deviations (the sign rule, `signs.py`), and
ELECTRA against MLM at equal FLOPs at the largest budget both reached. `render_curve` and
`plot_curve` (one PNG per task: the score against FLOPs on a log axis, a line per objective with
its seed spread as error bars and every seed as a dot) read nothing but that section.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.ablate.signs import UNRESOLVED, sign_verdict
from bertkit.ablate.tables import CURVE_LINES, Table

LABELS = {line.variant.objective: line.label for line in CURVE_LINES}
COLORS = {line.variant.objective: f"C{n}" for n, line in enumerate(CURVE_LINES)}  # the same in every task's PNG
BIDIRECTIONAL, LEFT_TO_RIGHT, RTD, MLM = ("mlm+nsp", "mlm"), "ltr", "electra", "mlm"


def _budget(multiplier: float) -> str:
    return f"{multiplier:g}x"


def _pretraining(info: dict, records: dict) -> dict:
    """One row's pretraining: its steps (as run, else as planned), FLOPs, minutes, validation."""
    result = records.get(f"pretrain/{info['variant']}", {}).get("result", {})
    steps = result.get("steps") or info["steps"]
    return {"objective": info["objective"], "variant": info["variant"], "steps": steps, "planned_steps": info["steps"],
            "flops_per_step": info["flops_per_step"], "flops": steps * info["flops_per_step"], "done": bool(result),
            "elapsed_s": result.get("elapsed_s"), "val": result.get("val", {})}


def curve_section(table: Table, table_json: dict, records: dict, seeds: tuple[int, ...]) -> dict:
    """report.json's "curve": the chosen rows' budgets, pretrainings and each task's points."""
    meta = table.meta
    info = {r["key"]: meta["rows"][r["key"]] for r in table_json["rows"]}
    entries = {r["key"]: r["entries"] for r in table_json["rows"]}
    multipliers = sorted({i["multiplier"] for i in info.values()})
    largest = max(meta["budgets"])
    limit = meta["largest_budget_seeds"]
    runs = {key: _pretraining(i, records) for key, i in info.items()}
    budgets = [{"multiplier": m, "flops": m * meta["reference_steps"] * meta["reference_flops_per_step"],
                "seeds": list(seeds[:limit] if m == largest else seeds),
                "pretraining": {runs[k]["objective"]: runs[k] for k, i in info.items() if i["multiplier"] == m}}
               for m in multipliers]
    tasks = {}
    for column in table_json["columns"]:
        points: dict[str, list[dict]] = {}
        for key, i in info.items():
            e = entries[key][column]
            if not e.get("not_run"):
                points.setdefault(i["objective"], []).append(
                    {"multiplier": i["multiplier"], "flops": runs[key]["flops"], "values": e["values"], "n": e["n"],
                     "median": e.get("median"), "std": e.get("std")})
        task = next(c.task for c in table.columns if c.name == column)
        tasks[column] = {"task": task, "points": points, "passes": _passes(points, multipliers),
                         "rtd_vs_mlm": _rtd_vs_mlm(points)}
    return {"table": table.key, "reference_steps": meta["reference_steps"],
            "reference_flops_per_step": meta["reference_flops_per_step"], "lines": LABELS,
            "largest_budget_seeds": limit, "budgets": budgets, "tasks": tasks}


def _at(points: dict, objective: str, multiplier: float) -> dict | None:
    """A line's point at a budget, where it has a number."""
    return next((p for p in points.get(objective, []) if p["multiplier"] == multiplier and p["n"]), None)


def _passes(points: dict, multipliers: list[float]) -> dict:
    """The smallest budget where the better bidirectional line is above LTR beyond the larger seed
    spread (`budget` None: at no budget compared), and the comparison at every budget."""
    if LEFT_TO_RIGHT not in points:
        return {"budget": None, "compared": [], "no_ltr": True}
    compared = []
    for m in multipliers:
        ltr = _at(points, LEFT_TO_RIGHT, m)
        bidirectional = [(o, p) for o in BIDIRECTIONAL if (p := _at(points, o, m)) is not None]
        if ltr is None or not bidirectional:
            continue
        objective, best = max(bidirectional, key=lambda op: op[1]["median"])
        verdict = sign_verdict(None, best["values"], ltr["values"])
        compared.append({"multiplier": m, "flops": best["flops"], "better": objective, "median": best["median"],
                         "std": best["std"], "ltr_median": ltr["median"], "ltr_std": ltr["std"],
                         "gap": verdict["our_gap"], "spread": verdict["spread"],
                         "passes": verdict["direction"] == "higher"})
    first = next((c for c in compared if c["passes"]), None)
    return {"budget": None if first is None else first["multiplier"], "compared": compared}


def _rtd_vs_mlm(points: dict) -> dict | None:
    """ELECTRA against MLM at equal FLOPs at the largest budget where both have a number."""
    both = sorted({p["multiplier"] for p in points.get(RTD, []) if p["n"]}
                  & {p["multiplier"] for p in points.get(MLM, []) if p["n"]})
    if not both:
        return None
    rtd, mlm = _at(points, RTD, both[-1]), _at(points, MLM, both[-1])
    verdict = sign_verdict(None, rtd["values"], mlm["values"])
    return {"multiplier": both[-1], "median": rtd["median"], "std": rtd["std"], "mlm_median": mlm["median"],
            "mlm_std": mlm["std"], "gap": verdict["our_gap"], "spread": verdict["spread"],
            "direction": verdict["direction"]}


def _validation(val: dict) -> str:
    """A pretraining's own validation metrics: its accuracies, and the discriminator's AUC."""
    parts = [f"{k.removesuffix('_accuracy').replace('_', ' ')} {100 * v:.1f}%" for k, v in val.items()
             if k.endswith("_accuracy")]
    if "rtd_auc" in val:
        parts.append(f"RTD AUC {val['rtd_auc']:.3f}")
    return ", ".join(parts) or "-"


def _score(median: float, std: float | None) -> str:
    return f"{median:.2f} ± {std or 0.0:.2f}"


def passes_sentence(column: str, passes: dict) -> str:
    """The report's sentence on where bidirectional passes left-to-right for one task."""
    if passes.get("no_ltr"):
        return f"{column}: no left-to-right entry (the LTR heads have no regression output)."
    if not passes["compared"]:
        return f"{column}: pending (no budget has both a bidirectional and a left-to-right number yet)."
    if passes["budget"] is None:
        last = passes["compared"][-1]
        return (f"{column}: at no budget is the better bidirectional row above LTR beyond the larger seed spread "
                f"(at {_budget(last['multiplier'])}: {LABELS[last['better']]} {_score(last['median'], last['std'])} "
                f"against LTR {_score(last['ltr_median'], last['ltr_std'])}, gap {last['gap']:+.2f}, spread "
                f"{_spread(last['spread'])}).")
    c = next(c for c in passes["compared"] if c["multiplier"] == passes["budget"])
    return (f"{column}: bidirectional passes left-to-right at {_budget(c['multiplier'])} ({c['flops']:.2e} FLOPs): "
            f"{LABELS[c['better']]} {_score(c['median'], c['std'])} against LTR "
            f"{_score(c['ltr_median'], c['ltr_std'])}, gap {c['gap']:+.2f} beyond the spread {_spread(c['spread'])}.")


def _spread(spread: float | None) -> str:
    return "- (one seed)" if spread is None else f"{spread:.2f}"


def _rtd_sentence(column: str, r: dict | None) -> str:
    if r is None:
        return f"{column}: pending."
    direction = "not resolved" if r["direction"] == UNRESOLVED else r["direction"]
    return (f"{column}: at {_budget(r['multiplier'])}, {_score(r['median'], r['std'])} against "
            f"{_score(r['mlm_median'], r['mlm_std'])}: {direction} (gap {r['gap']:+.2f}, "
            f"spread {_spread(r['spread'])}).")


def render_curve(curve: dict) -> list[str]:
    """The curve's section of report.md: each budget's pretrainings, the sentences, the PNGs."""
    lines = ["### Table 5 along a compute axis: each budget, and where bidirectional passes left-to-right", "",
             f"Budgets {', '.join(_budget(b['multiplier']) for b in curve['budgets'])} of the MLM + NSP reference's "
             f"{curve['reference_steps']:,} steps x {curve['reference_flops_per_step']:.3g} useful FLOPs per step; "
             "every objective spends the budget's FLOPs (the useful-FLOP count of `bertkit pretrain`'s status "
             "line).", ""]
    for b in curve["budgets"]:
        if len(b["seeds"]) < max(len(x["seeds"]) for x in curve["budgets"]):
            lines += [f"The {_budget(b['multiplier'])} budget is fine-tuned with {len(b['seeds'])} seeds "
                      f"({', '.join(map(str, b['seeds']))}), fewer than the others (the scale's largest_budget_seeds).",
                      ""]
    lines += ["| budget | objective | steps | pretraining FLOPs | minutes | validation |", "|---|---|---|---|---|---|"]
    for b in curve["budgets"]:
        for objective, p in b["pretraining"].items():
            minutes = f"{p['elapsed_s'] / 60:.1f}" if p.get("elapsed_s") is not None else "-"
            steps = f"{p['steps']:,}" if p["done"] else f"{p['planned_steps']:,} (pending)"
            lines.append(f"| {_budget(b['multiplier'])} | {curve['lines'][objective]} | {steps} | {p['flops']:.2e} | "
                         f"{minutes} | {_validation(p['val'])} |")
    lines += ["", "**Bidirectional against left-to-right**: the smallest budget where the better of MLM + NSP and "
                  "MLM is above LTR by more than the larger of the two rows' seed standard deviations.", ""]
    lines += [f"- {passes_sentence(column, t['passes'])}" for column, t in curve["tasks"].items()]
    lines += ["", "**ELECTRA (RTD) against MLM at equal FLOPs**, at the largest budget both reached "
                  "(the same rule: higher, lower, or not resolved).", ""]
    lines += [f"- {_rtd_sentence(column, t['rtd_vs_mlm'])}" for column, t in curve["tasks"].items()]
    lines.append("")
    for column, t in curve["tasks"].items():
        if _drawn(t):
            lines += [f"![{column} against pretraining FLOPs]({png_name(curve, t)})", ""]
    return lines


def png_name(curve: dict, task: dict) -> str:
    return f"{curve['table']}-{task['task']}.png"


def _drawn(task: dict) -> bool:
    """Whether a task's plot has a point to draw."""
    return any(p["n"] for points in task["points"].values() for p in points)


def plot_curve(curve: dict, out: Path) -> None:
    """One PNG per task with a number: its score against pretraining FLOPs (log axis), a line per
    objective (median, seed standard deviation as error bars, every seed as a dot)."""
    from bertkit.plots import pyplot, save_figure

    plt = pyplot()
    for column, task in curve["tasks"].items():
        if not _drawn(task):
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for objective, points in task["points"].items():
            done = sorted((p for p in points if p["n"]), key=lambda p: p["flops"])
            if not done:
                continue
            line = ax.errorbar([p["flops"] for p in done], [p["median"] for p in done],
                               yerr=[p["std"] for p in done], marker="o", capsize=3, label=curve["lines"][objective],
                               color=COLORS.get(objective))
            color = line.lines[0].get_color()
            for p in done:
                ax.plot([p["flops"]] * p["n"], p["values"], ".", color=color, alpha=0.4, markersize=4)
        ax.set_xscale("log")
        ax.set_xlabel("pretraining FLOPs (useful, log scale)")
        ax.set_ylabel(column)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(f"{column} against pretraining compute: median ± std over seeds, dots = seeds", fontsize=9)
        save_figure(fig, Path(out) / png_name(curve, task))
