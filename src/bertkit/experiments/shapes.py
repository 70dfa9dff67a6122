"""`t5-shapes`: the short sweep that chooses Table 5's reference shape on the ablation's own data.

Three ablation runs ended with the masked-LM reference (4 x 128, lr 1e-3, 1,600 steps of sentence
pairs) on the plateau, at 12.8% validation MLM accuracy, and that plateau, not the objectives,
decided Table 5 (docs/ablations/cpu-small-run3/NOTE.md). The demo's lever study found narrower
models leave the plateau several times sooner per CPU-second. This sweep asks the same on
Wikipedia (shards 0-7, the ablation's 8,000-entry vocabulary, 128 tokens): each arm is one
shape, learning rate and data format (BERT's sentence pairs with NSP, or packed full sentences
with MLM alone), pretrained with the budget recipe for the same useful FLOPs (the old reference's
1,200 steps' worth, counted as the status line counts them), validated at four points along the
way. The report ranks the arms by their last validation MLM accuracy and draws each arm's curve
against FLOPs and against its measured seconds.
"""

from __future__ import annotations

import functools

from bertkit.ablate.curve import flops_per_step
from bertkit.ablate.plan import Plan, setup_cells
from bertkit.ablate.scales import Scale
from bertkit.experiments import pretraining
from bertkit.experiments.core import Cell, Context, Experiment, Report, shared_data

# (name, layers, hidden, heads, intermediate)
SHAPES = {"4x128": (4, 128, 2, 512), "2x128": (2, 128, 2, 512), "1x128": (1, 128, 2, 512),
          "2x64": (2, 64, 2, 256), "1x64": (1, 64, 2, 256), "4x256": (4, 256, 4, 1024)}
# arm -> (shape, objective, format, lr)
ARMS = {"4x128-nsp-1e-3": ("4x128", "mlm+nsp", "nsp", 1e-3),  # the three runs' reference
        "2x128-nsp-1e-3": ("2x128", "mlm+nsp", "nsp", 1e-3),
        "2x128-nsp-3e-3": ("2x128", "mlm+nsp", "nsp", 3e-3),
        "1x128-nsp-3e-3": ("1x128", "mlm+nsp", "nsp", 3e-3),
        "2x64-nsp-3e-3": ("2x64", "mlm+nsp", "nsp", 3e-3),
        "1x64-nsp-3e-3": ("1x64", "mlm+nsp", "nsp", 3e-3),
        "2x128-packed-3e-3": ("2x128", "mlm", "packed", 3e-3),
        "1x64-packed-3e-3": ("1x64", "mlm", "packed", 3e-3)}
TINY_ARMS = {"a": ("2x64", "mlm+nsp", "nsp", 2e-3), "b": ("1x64", "mlm", "packed", 2e-3)}
REFERENCE_SHAPE = "4x128"
# Left out, its answer known: 4 x 128 at 3e-3 ended at 4.6% after 1,600 steps
# (docs/ablations/cpu-small-run3/task-check-lr3e-3.json).


def _shape(name: str, tiny: bool) -> tuple[str, dict]:
    layers, hidden, heads, inter = SHAPES[name]
    shape = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
             "intermediate_size": inter}
    if tiny:
        shape = {**shape, "hidden_size": hidden // 4, "intermediate_size": inter // 8, "max_position_embeddings": 64}
    return "tiny", shape


@functools.lru_cache(maxsize=4)
def scale_of(scale: str) -> Scale:
    tiny = scale == "tiny"
    arms = TINY_ARMS if tiny else ARMS
    sizes = {name: _shape(name, tiny) for name in SHAPES}
    return Scale(f"t5-shapes-{scale}", vocab_size=120 if tiny else 8000, max_seq_len=32 if tiny else 128,
                 preset="tiny", sizes={"reference": sizes[REFERENCE_SHAPE], **sizes},
                 steps=4 if tiny else 1200, batch_size=8 if tiny else 32,
                 lr_by_objective={o: lr for _, o, _, lr in arms.values()}, tasks={},
                 precision="fp32" if tiny else None, eval_samples=8 if tiny else 512, eval_points=4)


@functools.lru_cache(maxsize=4)
def plan_of(scale: str, env=None) -> Plan:
    s = scale_of(scale)
    arms = TINY_ARMS if scale == "tiny" else ARMS
    budget = s.steps * flops_per_step(s, "mlm+nsp", "nsp", REFERENCE_SHAPE)
    cells = setup_cells(s, {fmt for _, _, fmt, _ in arms.values()}, [])
    for arm, (shape, objective, fmt, lr) in arms.items():
        steps = max(1, round(budget / flops_per_step(s, objective, fmt, shape)))
        params = s.pretrain_params(objective, fmt, shape, lr=lr, steps=steps)
        cells.append(Cell(f"pretrain/{arm}", "pretrain", params, ("vocab", f"data/{fmt}")))
    return Plan(s, (), (), [], cells)


plan, execute, calibrate = pretraining.parts(plan_of)


def report(cells: list[Cell], records: dict, ctx: Context) -> Report:
    s = scale_of(ctx.scale)
    rows, data = [], {}
    for c in cells:
        if c.kind != "pretrain":
            continue
        arm = c.id.removeprefix("pretrain/")
        size, objective, fmt = c.param("size"), c.param("objective"), c.param("format")
        flops = flops_per_step(s, objective, fmt, size)
        r = records.get(c.id)
        if r is None:
            rows.append((-1.0, f"| {arm} | {objective} | {c.param('lr'):g} | {c.param('steps'):,} | … | … | … |"))
            continue
        res = r["result"]
        acc = res["val"].get("mlm_accuracy", 0.0)
        curve = res.get("val_curve", [])
        data[arm] = {"shape": size, "objective": objective, "format": fmt, "lr": c.param("lr"),
                     "steps": c.param("steps"), "flops_per_step": flops, "seconds": r["time_s"],
                     "mlm_accuracy": acc, "curve": curve, "precision": res.get("precision")}
        nsp = res["val"].get("nsp_accuracy")
        minutes = r['time_s'] / 60
        rows.append((acc, f"| {arm} | {objective} | {c.param('lr'):g} | {c.param('steps'):,} | {minutes:.1f} | "
                          f"{100 * acc:.1f}% | {'-' if nsp is None else f'{100 * nsp:.1f}%'} |"))
    lines = ["Each arm: the budget recipe at the same useful FLOPs (the old 4 x 128 reference's "
             f"{s.steps:,} steps' worth), validated at four points; ranked by the last validation MLM accuracy "
             "(15% masked, 80/10/10, on held-out documents).", "",
             "| arm | objective | lr | steps | minutes | val MLM | val NSP |", "|---|---|---|---|---|---|---|"]
    lines += [row for _, row in sorted(rows, key=lambda r: -r[0])]
    lines += ["", "![validation MLM accuracy against FLOPs and seconds](shapes.png)"]
    return Report("\n".join(lines), [lambda out: _plot(data, out / "shapes.png")], {"arms": data})


def _plot(data: dict, path) -> None:
    from bertkit.plots import line_panels

    series = {arm: [(p["step"] * d["flops_per_step"], 100 * p.get("mlm_accuracy", 0.0)) for p in d["curve"]]
              for arm, d in data.items()}
    timed = {arm: [(p["step"] / d["steps"] * d["seconds"] / 60, 100 * p.get("mlm_accuracy", 0.0)) for p in d["curve"]]
             for arm, d in data.items()}
    line_panels([("useful FLOPs", series), ("minutes (one thread)", timed)], "validation MLM accuracy (%)", path,
                title="Table 5's reference shape: validation MLM accuracy at equal FLOPs")


EXPERIMENT = Experiment(
    name="t5-shapes", title="Table 5's reference shape: a sweep on the ablation's data", scales=("cpu", "tiny"),
    plan=plan, execute=execute, report=report, calibrate=calibrate,
    cost="8 pretrainings of about 6-10 minutes each on one thread: about 45 minutes with two processes",
    env_defaults={"corpus": [f"{shared_data()}/corpus/wikipedia/enwiki_000{i}.txt.xz" for i in range(8)],
                  "data_dir": shared_data(), "workers": 1})
