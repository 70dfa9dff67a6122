"""The descendants table, drawn from whatever records exist: one table per budget (equal FLOPs,
equal wall time), a row per arch, each measure's median over the pretraining seeds with half their
spread (max - min), its gap to BERT's budget recipe, starred where it is beyond the larger of the two
spreads (with at least two seeds each); the goal's sentence (a descendant ahead of BERT beyond the
spread, or the measured reason none is); a PNG of every seed's value.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bertkit.experiments.core import Cell, Report
from bertkit.experiments.descendants_cells import ARCH_NAMES, BUDGETS, REFERENCE, pretrain_id

BUDGET_TITLES = {"flops": "Equal FLOPs", "time": "Equal wall time"}
AT = {"flops": "at equal FLOPs", "time": "at equal wall time"}
PLOTTED = ("val_accuracy", "probe", "sst2", "conll")


@dataclass(frozen=True)
class Measure:
    key: str
    label: str
    get: Callable[[dict], float | None]  # the arm's records ("pretrain", "score", "sst2", "conll") -> value
    downstream: bool = False  # compared with BERT (the goal's measures); else shown without a gap
    digits: int = 1


def _result(arm: dict, name: str) -> dict | None:
    record = arm.get(name)
    return None if record is None else record["result"]


def _get(name: str, fn: Callable[[dict], float | None]) -> Callable[[dict], float | None]:
    return lambda arm: None if _result(arm, name) is None else fn(_result(arm, name))


def _first_probe(result: dict) -> float:
    return next(iter(result["probe"].values()))["mean"]  # the smallest label budget


MEASURES = (
    Measure("steps", "steps", _get("pretrain", lambda r: r["steps"]), digits=0),
    Measure("minutes", "minutes", _get("pretrain", lambda r: r["elapsed_s"] / 60)),
    Measure("mflops_per_token", "MFLOPs/token", _get("pretrain", lambda r: r["flops_per_token"] / 1e6), digits=2),
    Measure("val_accuracy", "val acc", _get("pretrain", lambda r: r["val_accuracy"])),
    Measure("probe", "probe", _get("score", _first_probe), downstream=True),
    Measure("court_nn", "court nn", _get("score", lambda r: 100 * r["senses"]["court"]["neighbours_same_sense"]),
            downstream=True),
    Measure("bank_nn", "bank nn", _get("score", lambda r: 100 * r["senses"]["bank"]["neighbours_same_sense"]),
            downstream=True),
    Measure("sst2", "SST-2 acc", _get("sst2", lambda r: r["dev"]["accuracy"]), downstream=True),
    Measure("conll", "CoNLL F1", _get("conll", lambda r: r["dev"]["f1"]), downstream=True),
)


def arm_ids(arch: str, budget: str, seed: int) -> dict[str, str]:
    """The cells of one pretrained model (BERT's at either budget: its equal-FLOPs run's)."""
    b = "flops" if arch == REFERENCE else budget
    arm = f"{arch}/{b}/seed{seed}"
    return {"pretrain": pretrain_id(arch, budget, seed), "score": f"score/{arm}", "sst2": f"finetune/{arm}/sst2",
            "conll": f"finetune/{arm}/conll"}


def stat(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "spread": round(max(values) - min(values), 3),
            "values": [round(v, 3) for v in values], "n": len(values)}


def compare(cell: dict | None, bert: dict | None) -> dict | None:
    """`cell` with its gap to BERT's median; beyond_spread when both have two seeds or more and the
    gap exceeds the larger spread."""
    if cell is None or bert is None:
        return cell
    gap, larger = round(cell["median"] - bert["median"], 3), max(cell["spread"], bert["spread"])
    beyond = min(cell["n"], bert["n"]) >= 2 and abs(gap) > larger
    return {**cell, "gap_to_bert": gap, "larger_spread": larger, "beyond_spread": beyond}


def tables(records: dict, seeds: list[int]) -> dict:
    """budget -> arch -> measure -> its stat over the seeds (downstream ones compared with BERT)."""
    out = {}
    for budget in BUDGETS:
        rows = {}
        for arch in ARCH_NAMES:
            arms = [{k: records.get(i) for k, i in arm_ids(arch, budget, s).items()} for s in seeds]
            rows[arch] = {m.key: stat([v for v in map(m.get, arms) if v is not None]) for m in MEASURES}
        for arch in ARCH_NAMES:
            if arch != REFERENCE:
                for m in MEASURES:
                    if m.downstream:
                        rows[arch][m.key] = compare(rows[arch][m.key], rows[REFERENCE][m.key])
        out[budget] = rows
    return out


def _text(m: Measure, cell: dict | None, seeds: int) -> str:
    if cell is None:
        return "…"
    median = f"{cell['median']:,.{m.digits}f}"
    text = median if cell["spread"] == 0 and cell["n"] == 1 else f"{median} ± {cell['spread'] / 2:.{m.digits}f}"
    if "gap_to_bert" in cell:
        text += f" ({cell['gap_to_bert']:+.{m.digits}f}{'*' if cell['beyond_spread'] else ''})"
    return text + (f" [{cell['n']}/{seeds}]" if cell["n"] < seeds else "")


def loads(records: dict) -> dict:
    """Every scored model's strict load in transformers: {"checked", "strict", "failed": [cell ids]}."""
    scored = {i: r["result"] for i, r in records.items() if i.startswith("score/")}
    failed = sorted(i for i, r in scored.items() if not r.get("loads_in_transformers"))
    return {"checked": len(scored), "strict": len(scored) - len(failed), "failed": failed}


def _loads_text(records: dict, arch: str, budget: str, seeds: list[int]) -> str:
    results = [records[i]["result"] for s in seeds if (i := arm_ids(arch, budget, s)["score"]) in records]
    if not results:
        return "…"
    ok = sum(bool(r.get("loads_in_transformers")) for r in results)
    return f"{'yes' if ok == len(results) else 'NO'} {ok}/{len(results)}"


def markdown_table(rows: dict, records: dict, budget: str, seeds: list[int], probe_label: str) -> list[str]:
    labels = [probe_label if m.key == "probe" else m.label for m in MEASURES]
    lines = ["| arch | " + " | ".join(labels) + " | loads in transformers |",
             "|---|" + "---:|" * len(MEASURES) + "---|"]
    for arch in ARCH_NAMES:
        cells = [_text(m, rows[arch][m.key], len(seeds)) for m in MEASURES]
        lines.append(f"| {arch} | " + " | ".join(cells) + f" | {_loads_text(records, arch, budget, seeds)} |")
    return lines


def goal(data: dict, done: int, total: int) -> tuple[str, dict]:
    """Whether a descendant idea is ahead of BERT's budget recipe beyond the spread, and if none
    is (all cells done), the measured reason: the closest gap, what is behind, the steps each ran."""
    found = [(budget, arch, m, cell) for budget, rows in data.items() for arch, row in rows.items()
             if arch != REFERENCE for m in MEASURES if m.downstream and (cell := row[m.key]) and "gap_to_bert" in cell]
    ahead = [(b, a, m, c) for b, a, m, c in found if c["beyond_spread"] and c["gap_to_bert"] > 0]
    behind = [(b, a, m, c) for b, a, m, c in found if c["beyond_spread"] and c["gap_to_bert"] < 0]
    words = lambda items: "; ".join(f"{a} on {m.label} {AT[b]} ({c['gap_to_bert']:+.1f})"  # noqa: E731
                                    for b, a, m, c in items)
    info = {"met": bool(ahead), "ahead": words(ahead), "behind": words(behind), "cells_done": done, "cells": total}
    if ahead:
        return f"**Goal met**: ahead of BERT's budget recipe beyond the seeds' spread: {words(ahead)}.", info
    if done < total or not found:
        return f"Goal not decided yet: {done} of {total} cells done.", info
    if max(c["n"] for _, _, _, c in found) < 2:
        return "Goal not decided: one pretraining seed per arm, no spread to compare a gap with.", info
    b, a, m, c = max(found, key=lambda f: f[3]["gap_to_bert"] - f[3]["larger_spread"])
    steps = {budget: [rows[arch]["steps"]["median"] / rows[REFERENCE]["steps"]["median"]
                      for arch in ARCH_NAMES if arch != REFERENCE and rows[arch]["steps"]]
             for budget, rows in data.items() if data[budget][REFERENCE]["steps"]}
    ran = "; ".join(f"{AT[k]} the descendants ran {100 * min(v):.0f}-{100 * max(v):.0f}% "
                    f"of BERT's steps" for k, v in steps.items() if v)
    reason = (f"No descendant is ahead of BERT's budget recipe beyond the seeds' spread. The closest: {a} on "
              f"{m.label} {AT[b]}, {c['gap_to_bert']:+.1f} against a spread of "
              f"{c['larger_spread']:.1f}; behind beyond the spread: "
              f"{words(behind) or 'none'}; {ran}.")
    info["reason"] = reason
    return reason, info


def build_report(cells: list[Cell], records: dict, bert_steps: int) -> Report:
    seeds = sorted({c.param("seed") for c in cells if c.kind == "pretrain"})
    probe_budget = next((c.param("budgets")[0] for c in cells if c.kind == "score"), "")
    data = tables(records, seeds)
    sentence, info = goal(data, len(records), len(cells))
    majority = {t: records[f"tasks/{t}"]["result"]["majority"] for t in ("sst2", "conll") if f"tasks/{t}" in records}
    lines = [sentence, "",
             f"Every arch: `bertkit pretrain --arch ARCH --recipe budget`, the tiny preset's shape, its own objective, "
             f"on the demo's BBC News training articles; seeds {', '.join(map(str, seeds))}. **Equal FLOPs**: BERT "
             f"{bert_steps:,} steps, each other arch the steps that spend BERT's useful FLOPs. **Equal wall time**: "
             "each other arch for the minutes BERT's run of the same seed took (BERT's row is its equal-FLOPs run).",
             "", "Each cell: median ± half the seeds' spread (max - min), (gap to BERT), * beyond the larger of the "
             "two spreads; [n/N] where seeds are missing; `…` not run yet. val acc: masked-LM accuracy on held-out "
             "documents (ALBERT's on sentence-order pairs; DeBERTa's is its balanced replaced-token-detection "
             f"accuracy, another task). {probe_label(probe_budget)}: the demo's frozen topic probe from "
             f"{probe_budget} labelled articles per topic; court / bank nn: the share of same-sense nearest "
             "neighbours (the demo's senses); SST-2 and CoNLL-2003 fine-tuned on fixed subsets, one seed each."]
    if majority:
        lines += ["", "Floors (the majority class of each dev subset): " + "; ".join(
            f"{t} accuracy {v['accuracy']:.1f}%" + (f", F1 {v['f1']:.1f}" if "f1" in v else "")
            for t, v in majority.items()) + "."]
    for budget in BUDGETS:
        lines += ["", f"## {BUDGET_TITLES[budget]}", "",
                  *markdown_table(data[budget], records, budget, seeds, probe_label(probe_budget))]
    checked = loads(records)
    lines += ["", f"Strict loads in transformers (offline, the family's class config.json names): {checked['strict']} "
                  f"of {checked['checked']} scored models" + (f"; failed: {', '.join(checked['failed'])}"
                                                              if checked["failed"] else "") + ".",
              "", "![every seed's score per arch at both budgets](descendants.png)"]
    report_data = {"bert_steps": bert_steps, "seeds": seeds, "tables": data, "goal": info,
                   "loads_in_transformers": checked}
    return Report("\n".join(lines), [lambda out: plot(data, Path(out) / "descendants.png")], report_data)


def probe_label(budget) -> str:
    return f"probe-{budget}"


def plot(data: dict, path: Path) -> None:
    from bertkit.plots import pyplot, save_figure

    shown = [m for m in MEASURES if m.key in PLOTTED]
    fig, axes = pyplot().subplots(1, len(shown), figsize=(3.0 * len(shown), 3.3))
    labelled: set[str] = set()
    for ax, m in zip(axes, shown):
        for offset, (budget, colour) in zip((-0.15, 0.15), zip(BUDGETS, ("tab:blue", "tab:orange"))):
            for i, arch in enumerate(ARCH_NAMES):
                cell = data[budget][arch][m.key]
                if cell is None:
                    continue
                label = None if budget in labelled else BUDGET_TITLES[budget]
                labelled.add(budget)
                ax.scatter([i + offset] * cell["n"], cell["values"], color=colour, alpha=0.6, s=14, label=label)
                ax.hlines(cell["median"], i + offset - 0.12, i + offset + 0.12, color=colour)
        ax.set_xticks(range(len(ARCH_NAMES)), ARCH_NAMES, rotation=30, fontsize=8)
        ax.set_title(m.label, fontsize=9)
        ax.grid(alpha=0.3)
    pairs = [pair for ax in axes for pair in zip(*ax.get_legend_handles_labels())]
    if pairs:
        fig.legend(*zip(*pairs), loc="lower center", ncol=2, fontsize=8, bbox_to_anchor=(0.5, -0.08))
    fig.suptitle("BERT's descendants: every pretraining seed (dots) and the median (bar)", fontsize=10)
    save_figure(fig, path, dpi=110)
