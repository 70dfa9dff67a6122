"""The `levers` experiment's report, drawn from whatever records exist: one row per arm (its AVX2
seconds per step, steps, steps and seconds to the goal accuracy, final validation MLM accuracy, the
smallest-budget topic probe, the sense neighbours), `…` where a cell has not run; the curves of
validation MLM accuracy against seconds on the AVX2 core, and where each arm ends."""

from __future__ import annotations

from pathlib import Path

from bertkit.experiments.core import Cell, Report

MISSING = "…"
EARLIER = ("The bench's own loop measured the demo shape before this experiment existed (2026-12-05, AMD EPYC "
           "Zen 4 held to AVX2 fp32): [JSON](../pretrain-levers/2026-12-05-demo.json), "
           "[plot](../pretrain-levers/2026-12-05-demo.png); docs/pretraining.md has its table.")


def _arms(cells: list[Cell]) -> list[str]:
    return [c.param("arm") for c in cells if c.kind == "train"]


def rows(cells: list[Cell], records: dict) -> dict[str, dict]:
    """arm -> what its records say (absent keys: not run yet)."""
    out = {}
    for arm in _arms(cells):
        row = {}
        train = records.get(f"train/{arm}")
        if train:
            row.update(s_per_step=train["result"]["s_per_step"], steps=train["result"]["steps"],
                       budget_s=train["result"]["budget_s"])
        score = records.get(f"score/{arm}")
        if score:
            row.update({k: score["result"][k] for k in ("curve", "final_mlm", "steps_to_goal", "seconds_to_goal",
                                                        "probe", "senses")})
        out[arm] = row
    return out


def _cell(row: dict, key: str, fmt) -> str:
    return fmt(row[key]) if key in row else MISSING


def markdown_table(data: dict[str, dict], budget: str, goal: float) -> list[str]:
    g = f"{100 * goal:.0f}%"
    lines = [f"| arm | s/step (AVX2) | steps | steps to {g} | s to {g} | final MLM | probe {budget} | court nn "
             "| bank nn |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, r in data.items():
        senses = r.get("senses", {})
        nn = [f"{100 * senses[w]['neighbours_same_sense']:.0f}%" if w in senses else MISSING for w in ("court", "bank")]
        lines.append(" | ".join([
            f"| {arm}", _cell(r, "s_per_step", lambda v: "/".join(str(x) for x in v.values())),
            _cell(r, "steps", lambda v: ", ".join(f"{x:,}" for x in v)),
            _cell(r, "steps_to_goal", lambda v: f"{v:,}" if v else "-"),
            _cell(r, "seconds_to_goal", lambda v: f"{v:.1f}" if v else "-"),
            _cell(r, "final_mlm", lambda v: f"{100 * v:.1f}%" if v is not None else "-"),
            _cell(r, "probe", lambda v: f"{v[budget]['mean']:.1f}"), *nn]) + " |")
    return lines


def build_report(cells: list[Cell], records: dict, scale, scale_name: str, goal: float) -> Report:
    data = rows(cells, records)
    budget = str(scale.probe_budgets[0])
    ref = records.get("train/reference")
    head = [f"Shape `{scale.shape}` ({scale.corpus}, {scale.data}, vocabulary {scale.vocab_size:,}); the budget: "
            f"{scale.budget_steps:,} reference steps"
            + (f" = {ref['result']['budget_s']:,.1f} s on the AVX2 core" if ref else "")
            + ". Every arm is timed and trained with PyTorch, oneDNN and MKL held to AVX2 kernels in fp32 on one "
              "thread (bf16 arms on the CPU's own kernels); a same-cost arm takes the reference's steps. Scores: "
              "validation MLM accuracy at 15% (one fixed masking of the reference's validation split) at every "
              "checkpoint, the time to the goal accuracy, the final model's topic probe and same-sense neighbours.", ""]
    text = "\n".join([*head, *markdown_table(data, budget, goal), "", EARLIER if scale_name == "demo" else ""])
    drawn = any("curve" in r for r in data.values())
    figures = [lambda out: plot(data, out / "levers.png", scale.shape, budget, goal)] if drawn else []
    return Report(text, figures, {"arms": data, "goal": goal})


def plot(data: dict[str, dict], dest: Path, shape: str, budget: str, goal: float) -> None:
    """Left: validation MLM accuracy against seconds on the AVX2 core, one line per arm (the
    reference and the arms that reach the goal drawn bold). Right: each arm's final MLM accuracy
    against its smallest-budget probe."""
    from bertkit.plots import pyplot, save_figure

    plt = pyplot()
    fig, (curves, final) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = iter(plt.get_cmap("tab10").colors * 4)
    for name, r in ((n, r) for n, r in data.items() if "curve" in r):
        bold = name == "reference" or r["steps_to_goal"]
        style = {"lw": 2, "color": next(colours), "label": name} if bold else {"lw": 0.7, "color": "grey", "alpha": 0.5}
        curves.plot([q["seconds"] for q in r["curve"]], [100 * q["mlm"] for q in r["curve"]], **style)
        if r["final_mlm"] is not None:
            final.scatter(100 * r["final_mlm"], r["probe"][budget]["mean"], s=14)
            final.annotate(name, (100 * r["final_mlm"], r["probe"][budget]["mean"]), fontsize=6, xytext=(2, 2),
                           textcoords="offset points")
    curves.axhline(100 * goal, color="grey", ls=":", lw=1)
    curves.set(xlabel="seconds on the AVX2 core (fp32, one thread)", ylabel="validation MLM accuracy (%)",
               title=f"{shape} shape: each lever at equal time")
    curves.plot([], [], lw=0.7, color="grey", label="every other arm")
    curves.legend(fontsize=7)
    final.set(xlabel="final validation MLM accuracy (%)", ylabel=f"{budget}-label topic probe (%)",
              title="where each arm ends")
    save_figure(fig, dest)
