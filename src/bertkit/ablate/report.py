"""An ablation's report: report.json from the finished cells, report.md and PNGs from report.json.

Each table keeps the paper's layout (its rows, its columns); each entry shows our median and
standard deviation over the fine-tuning seeds beside the paper's figure. Each row but a
table's first is compared with one other row (`tables.Row.against`), and `sign_verdict` says
whether the paper's sign of that gap holds here: a sign counts only when our gap is larger
than the seeds' spread (the larger of the two rows' standard deviations); a smaller gap, or a
single run (no spread to measure), is "not resolved at this scale" (`signs.py`). The compute
curve (`t5-curve`) adds a section of its own (`curve_report.py`). `render_markdown` reads nothing
but report.json's content, so a report can be re-rendered (or checked) from that file.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from bertkit.ablate.curve_report import curve_section, plot_curve, render_curve
from bertkit.ablate.plan import Plan
from bertkit.ablate.signs import HOLDS, NO_SIGN, PENDING, REVERSED, UNRESOLVED, sign_verdict
from bertkit.ablate.tables import CURVE_KEY, NOT_RUN, Row, Table, cell_how

__all__ = ["HOLDS", "NO_SIGN", "PENDING", "REVERSED", "UNRESOLVED", "build_report", "render_markdown", "sign_verdict",
           "write_report"]

def _values(plan: Plan, records: dict, row: Row, column) -> tuple[list[float], list[int]]:
    """Our numbers for one entry: one per seed (fine-tuning) or one (a pretraining's metric)."""
    if column.task == "pretrain":
        record = records.get(f"pretrain/{row.variant.name}")
        value = record["result"].get(column.metric) if record else None
        return ([value], [0]) if value is not None else ([], [])
    values, seeds = [], []
    for seed in plan.seeds:
        cell = f"finetune/{row.variant.name}/{column.task}/{cell_how(row, column)}/seed{seed}"
        value = records.get(cell, {}).get("result", {}).get("dev", {}).get(column.metric)
        if value is not None:
            values.append(float(value))
            seeds.append(seed)
    return values, seeds


def _entry(values: list[float], seeds: list[int], paper, not_run: bool = False) -> dict:
    entry = {"paper": paper, "values": values, "seeds": seeds, "n": len(values)}
    if not_run:
        entry["not_run"] = True
    if values:
        entry["median"] = statistics.median(values)
        entry["std"] = statistics.stdev(values) if len(values) > 1 else 0.0
    return entry


def _table(plan: Plan, records: dict, table: Table) -> dict | None:
    chosen = {r.key for r in plan.rows}
    columns = [c for c in table.columns if c.task == "pretrain" or c.task in plan.tasks]
    rows = [r for r in table.rows if r.key in chosen]
    if not rows or not columns:
        return None
    by_key = {r.key: r for r in table.rows}
    out_rows = []
    for row in rows:
        entries = {}
        for column in columns:
            if cell_how(row, column) == NOT_RUN:
                entries[column.name] = _entry([], [], None, not_run=True)
                continue
            values, seeds = _values(plan, records, row, column)
            entry = _entry(values, seeds, row.paper.get(column.name))
            other = by_key.get(row.against or table.rows[0].key)
            if other is not None and other.key != row.key:
                ref_values, _ = _values(plan, records, other, column)
                paper_gap = None
                if entry["paper"] is not None and other.paper.get(column.name) is not None:
                    paper_gap = entry["paper"] - other.paper[column.name]
                entry["sign"] = {"against": other.key, **sign_verdict(paper_gap, values, ref_values)}
            entries[column.name] = entry
        out_rows.append({"key": row.key, "label": row.label, "variant": row.variant.name, "entries": entries})
    return {"key": table.key, "title": table.title, "note": table.note, "columns": [c.name for c in columns],
            "rows": out_rows}


def build_report(plan: Plan, records: dict, meta: dict) -> dict:
    """report.json's content: `meta` (command, scale, times), the cells, every chosen table, and the
    compute curve's section where its rows were chosen."""
    chosen = {table.key: (table, _table(plan, records, table)) for table in plan.tables}
    tables = [t for _, t in chosen.values() if t is not None]
    signs = [e["sign"] for t in tables for r in t["rows"] for e in r["entries"].values() if "sign" in e]
    verdicts = [s["verdict"] for s in signs]
    counts = {v: verdicts.count(v) for v in (HOLDS, REVERSED, UNRESOLVED, PENDING, NO_SIGN) if v in verdicts}
    directions = [s["direction"] for s in signs if "direction" in s]  # where the paper has no figure
    unpaired = {d: directions.count(d) for d in ("higher", "lower", UNRESOLVED) if d in directions}
    pretrain = {r["id"]: {**r["result"], "settings": r["params"]} for r in records.values() if r["kind"] == "pretrain"}
    baselines = {r["params"]["task"]: r["result"].get("majority", {}) for r in records.values() if r["kind"] == "tasks"}
    report = {**meta, "scale": plan.scale.name, "seeds": list(plan.seeds), "tasks": list(plan.tasks),
            "cells": {"done": sum(c.id in records for c in plan.cells), "total": len(plan.cells)},
            "cell_time_s": round(sum(r.get("time_s", 0.0) for r in records.values()), 1),
            "verdicts": counts, "without_paper_figure": unpaired, "pretraining": pretrain, "baselines": baselines,
            "tables": tables}
    curve, curve_json = chosen.get(CURVE_KEY, (None, None))
    if curve_json is not None:
        report["curve"] = curve_section(curve, curve_json, records, plan.seeds)
    return report


def _number(entry: dict) -> str:
    if entry.get("not_run"):
        return "n/a"
    if not entry.get("n"):
        return "pending"
    if entry["n"] == 1:
        return f"{entry['median']:.2f}"
    return f"{entry['median']:.2f} ± {entry['std']:.2f}"


def _sign_text(column: str, entry: dict) -> str:
    sign = entry.get("sign")
    short = column.split(" (")[0]
    if sign and "direction" in sign:  # no paper figure: our gap alone
        direction = "not resolved" if sign["direction"] == UNRESOLVED else sign["direction"]
        return f"{short} {direction} ({sign['our_gap']:+.2f}; no paper figure)"
    if sign and sign["verdict"] == NO_SIGN and "our_gap" not in sign:  # no paper figure, a row still running
        return f"{short}: pending"
    if not sign or sign["verdict"] == NO_SIGN:
        return ""
    if sign["verdict"] == PENDING:
        return f"{short}: pending"
    verdict = "not resolved" if sign["verdict"] == UNRESOLVED else sign["verdict"]
    return f"{short} {verdict} ({sign['our_gap']:+.2f} vs paper {sign['paper_gap']:+.1f})"


def render_table(table: dict) -> list[str]:
    head = ["row"] + [f"{c}: ours / paper" for c in table["columns"]] + ["paper's sign vs the compared row"]
    lines = [f"### {table['title']}", "", table["note"], "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for row in table["rows"]:
        cells = [row["label"]]
        for column in table["columns"]:
            entry = row["entries"][column]
            paper = "-" if entry["paper"] is None else f"{entry['paper']:g}"
            cells.append(f"{_number(entry)} / {paper}")
        signs = [_sign_text(c, row["entries"][c]) for c in table["columns"]]
        against = next((row["entries"][c]["sign"]["against"] for c in table["columns"]
                        if "sign" in row["entries"][c]), None)
        text = "; ".join(s for s in signs if s)
        cells.append(f"vs {against}: {text}" if against and text else "(reference)")
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def render_markdown(report: dict) -> str:
    """report.md from report.json's content alone."""
    cells = report["cells"]
    lines = [f"# Ablations at scale `{report['scale']}`", "",
             f"Command: `{report.get('command', '')}`", "",
             f"Seeds {', '.join(map(str, report['seeds']))}; cells done {cells['done']} / {cells['total']}; "
             f"time in cells {report['cell_time_s'] / 60:.1f} min.", "",
             "Each entry: our median ± standard deviation over the fine-tuning seeds / the paper's dev figure "
             "(Devlin et al. 2018, Tables 5-8). A sign holds only when our gap exceeds the larger of the two "
             "rows' seed standard deviations; otherwise it is not resolved at this scale.", ""]
    if report.get("verdicts"):
        lines += ["Signs: " + ", ".join(f"{n} {v}" for v, n in report["verdicts"].items()) + ".", ""]
    if report.get("without_paper_figure"):
        lines += ["Where the paper has no figure (ELECTRA's rows, Table 5's NER column), our gap to the compared row: "
                  + ", ".join(f"{n} {d}" for d, n in report["without_paper_figure"].items()) + ".", ""]
    lines += render_baselines(report.get("baselines", {})) + render_pretraining(report.get("pretraining", {}))
    for table in report["tables"]:
        lines += render_table(table)
        lines += [f"![{table['title']}]({table['key']}.png)", ""]
    if "curve" in report:
        lines += render_curve(report["curve"])
    return "\n".join(lines)


_TASK_NAMES = {"mrpc": "MRPC", "sst2": "SST-2", "squad": "SQuAD", "conll": "CoNLL-2003", "stsb": "STS-B"}


def render_baselines(baselines: dict) -> list[str]:
    """One line: what the dev subsets' most frequent label scores, which a task must clearly beat
    before its numbers can separate pretrainings."""
    parts = []
    for task, base in baselines.items():
        if task == "conll" and base:
            parts.append(f"CoNLL-2003 F1 0 (every word O; token accuracy {base['accuracy']:.1f})")
        elif task == "squad" and base:
            parts.append("SQuAD F1 0 (an empty answer)")
        elif task == "stsb" and base:
            parts.append(f"STS-B Spearman 0 (the mean score, {base['mean']:.2f}, for every pair)")
        elif base:
            parts.append(f"{_TASK_NAMES[task]} accuracy {base['accuracy']:.1f} (label {base['label']})")
    return [f"Majority class on our dev subsets: {'; '.join(parts)}.", ""] if parts else []


def _validation(val: dict) -> str:
    """A pretraining's own validation accuracies, "mlm 23.1%, nsp 61.0%"."""
    return ", ".join(f"{k.removesuffix('_accuracy').replace('_', ' ')} {100 * v:.1f}%"
                     for k, v in val.items() if k.endswith("_accuracy")) or "-"


def render_pretraining(pretraining: dict) -> list[str]:
    """Every pretraining: its objective, learning rate, steps, minutes and validation accuracies."""
    if not pretraining:
        return []
    lines = ["### Pretraining", "",
             "Each variant's objective, peak learning rate, length (equal steps, or the equal-time budget) and "
             "its own validation accuracies on held-out documents.", "",
             "| pretraining | objective | lr | steps | minutes | validation accuracy |", "|---|---|---|---|---|---|"]
    for cell_id, p in pretraining.items():
        settings = p.get("settings", {})
        minutes = f"{p['elapsed_s'] / 60:.1f}" if p.get("elapsed_s") is not None else "-"
        budget = " (time budget)" if settings and "steps" not in settings else ""
        lr = f"{settings['lr']:g}" if settings.get("lr") is not None else "-"
        lines.append(f"| {cell_id.removeprefix('pretrain/')} | {settings.get('objective', '-')} | {lr} | "
                     f"{p.get('steps')}{budget} | {minutes} | "
                     f"{_validation(p.get('val', {}))} |")
    return lines + [""]


def write_report(out: Path, report: dict) -> None:
    """report.json, report.md and one PNG per table into `out`."""
    from bertkit.io import write_json, write_text
    from bertkit.plots import plot_ablation_table

    out = Path(out)
    write_json(out / "report.json", report)
    write_text(out / "report.md", render_markdown(report))
    for table in report["tables"]:
        plot_ablation_table(table, out / f"{table['key']}.png")
    if "curve" in report:
        plot_curve(report["curve"], out)
