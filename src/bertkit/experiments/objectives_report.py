"""The `objectives` experiment's report, drawn from whatever records exist: one row per model (its
steps, the topic probe at each labelled budget, the senses' separation and same-sense neighbours,
SST-2's median and half-spread over the seeds), `…` where a cell has not run; ELECTRA's lr tuning;
the issue's goals once their cells exist; the probe curves and SST-2 seeds in one PNG."""

from __future__ import annotations

import statistics
from pathlib import Path

from bertkit.experiments.core import Cell, Report

MISSING = "…"
LABELS = {"mlm": "bertkit MLM (budget recipe)", "mlm30": "bertkit MLM, 30% masked",
          "electra": "bertkit ELECTRA (budget recipe, RTD)", "transformers": "transformers Trainer, BertForMaskedLM",
          "random": "random init (floor)"}
SHORT = {"mlm": "MLM", "mlm30": "MLM, 30%", "electra": "ELECTRA", "transformers": "Trainer MLM",
         "random": "random init"}
EARLIER = ("The bench's own loop measured this before the experiment existed: on a loaded machine "
           "([2026-12-04](../pretrain-objectives/2026-12-04-contended.json)) and on quiet cores "
           "([2026-12-05](../pretrain-objectives/2026-12-05.json), [plot](../pretrain-objectives/2026-12-05.png)); "
           "docs/pretraining.md has their tables.")


def models(cells: list[Cell]) -> list[str]:
    return [c.id.split("/")[1] for c in cells if c.kind == "score"]


def tables(cells: list[Cell], records: dict) -> dict[str, dict]:
    """model -> steps, probe, senses and SST-2 (each present once its cells are)."""
    out = {}
    for name in models(cells):
        row = {}
        pre = records.get(f"pretrain/{name}")
        if pre:
            row.update(steps=pre["result"]["steps"], lr=pre["result"]["hyper"]["lr"])
        score = records.get(f"score/{name}")
        if score:
            row.update(probe=score["result"]["probe"], senses=score["result"]["senses"])
        seeds = [c.id for c in cells if c.kind == "finetune" and c.id.startswith(f"finetune/{name}/")]
        accs = [records[i]["result"]["dev"]["accuracy"] for i in seeds if i in records]
        if seeds and len(accs) == len(seeds):
            row["sst2"] = {"seeds": [round(a, 2) for a in accs], "median": round(statistics.median(accs), 2),
                           "spread": round(max(accs) - min(accs), 2)}
        out[name] = row
    return out


def goals(data: dict[str, dict]) -> dict[str, bool]:
    """The issue's goals whose numbers exist."""
    out = {}
    mlm, electra, hf = data.get("mlm", {}), data.get("electra", {}), data.get("transformers", {})
    for budget, margin in (("4", 5), ("16", 5)):
        if "probe" in mlm and "probe" in electra and budget in mlm["probe"]:
            out[f"ELECTRA >= MLM + {margin} on the {budget}-label probe"] = \
                electra["probe"][budget]["mean"] - mlm["probe"][budget]["mean"] >= margin
    if "sst2" in mlm and "sst2" in electra:
        out["ELECTRA >= MLM + 2 on SST-2 (median)"] = electra["sst2"]["median"] - mlm["sst2"]["median"] >= 2
    for name in ("mlm", "mlm30", "electra"):
        r = data.get(name, {})
        if all(k in r and k in hf for k in ("probe", "senses", "sst2")):
            above = [r["probe"][k]["mean"] > hf["probe"][k]["mean"] for k in r["probe"]]
            above += [r["senses"][w][m] > hf["senses"][w][m] for w in r["senses"]
                      for m in ("separation", "neighbours_same_sense")]
            above.append(r["sst2"]["median"] > hf["sst2"]["median"])
            out[f"{name} above transformers on every measure"] = all(above)
    return out


def markdown_table(data: dict[str, dict], budgets: list[str]) -> list[str]:
    lines = ["| model | steps | " + " | ".join(f"probe {b}" for b in budgets)
             + " | court sep. / nn | bank sep. / nn | SST-2 (median ± half-spread) |",
             "|---|---:|" + "---:|" * len(budgets) + "---:|---:|---:|"]
    for name, r in data.items():
        steps = f"{r['steps']:,}" if "steps" in r else ("-" if name == "random" else MISSING)
        probe = [f"{r['probe'][b]['mean']:.1f}" if "probe" in r else MISSING for b in budgets]
        senses = [f"{r['senses'][w]['separation']:+.3f} / {100 * r['senses'][w]['neighbours_same_sense']:.0f}%"
                  if "senses" in r else MISSING for w in ("court", "bank")]
        sst2 = (f"{r['sst2']['median']:.2f} ± {r['sst2']['spread'] / 2:.2f}" if "sst2" in r
                else "-" if name == "random" else MISSING)
        lines.append(" | ".join([f"| {LABELS[name]}", steps, *probe, *senses, sst2]) + " |")
    return lines


def build_report(cells: list[Cell], records: dict, scale, scale_name: str) -> Report:
    data = tables(cells, records)
    budgets = [*(str(b) for b in scale.probe_budgets), "all"]
    tunes = [records[c.id]["result"] for c in cells if c.kind == "tune" and c.id in records]
    n_tunes = sum(c.kind == "tune" for c in cells)
    lines = [f"Each pretraining {scale.minutes:g} minutes of wall-clock time on one thread (two at a time); "
             "frozen mean-pooled features on BBC News's held-out articles; SST-2 fine-tuned on "
             f"{scale.sst2.train:,} sentences, {len(scale.seeds)} seed(s).", "", *markdown_table(data, budgets), ""]
    if n_tunes:
        lines += [f"ELECTRA's lr, from {n_tunes} runs of {scale.tune_steps} steps ({len(tunes)} done): "
                  + (", ".join(f"{t['lr']:g}: RTD loss {t['rtd_loss']}, replaced {100 * t['replaced_accuracy']:.1f}%"
                               for t in tunes) or MISSING)
                  + (f"; chosen {data['electra']['lr']:g}" if "lr" in data.get("electra", {}) else ""), ""]
    met = goals(data)
    lines += [f"- goal {k}: {'met' if v else 'NOT met'}" for k, v in met.items()] or ["Goals: not decided yet."]
    lines += ["", EARLIER if scale_name == "cpu" else ""]
    drawn = any("probe" in r for r in data.values())
    figures = [lambda out: plot(data, budgets, out / "objectives.png")] if drawn else []
    return Report("\n".join(lines), figures, {"models": data, "goals": met, "electra_lr_tuning": tunes})


def plot(data: dict[str, dict], budgets: list[str], path: Path) -> None:
    from bertkit.plots import pyplot, save_figure

    fig, (a, b) = pyplot().subplots(1, 2, figsize=(11, 4.2))
    colors = {n: f"C{i}" for i, n in enumerate(data)}  # one colour per model in both panels
    for n, r in ((n, r) for n, r in data.items() if "probe" in r):
        a.plot(range(len(budgets)), [r["probe"][k]["mean"] for k in budgets], marker="o", label=LABELS[n],
               color=colors[n], linestyle=":" if n == "random" else "-")
    a.set_xticks(range(len(budgets)), budgets)
    a.set(xlabel="labelled articles per topic", ylabel="held-out topic accuracy (%)",
          title="frozen mean-pooled features, BBC News")
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
    names = [n for n, r in data.items() if "sst2" in r]
    for i, n in enumerate(names):
        b.scatter([i] * len(data[n]["sst2"]["seeds"]), data[n]["sst2"]["seeds"], alpha=0.7, color=colors[n])
        b.hlines(data[n]["sst2"]["median"], i - 0.25, i + 0.25, color=colors[n])
    b.set_xticks(range(len(names)), [SHORT[n] for n in names], fontsize=9)
    b.set(ylabel="SST-2 dev accuracy (%)", title="fine-tuned on SST-2 (line: median of the seeds)")
    b.grid(alpha=0.3)
    save_figure(fig, path, dpi=110)
