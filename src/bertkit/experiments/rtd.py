"""`rtd`: replaced-token detection against masked LM at equal FLOPs, and what RTD needs to get there.

Table 5's compute curve pretrains ELECTRA with settings carried over untuned (lr 3e-4 from the 4 x
128 shape, the loss weight 50, a tied token table, bertkit's default generator, 15% masked); at 1x
and 3x its discriminator calls almost every token original (replaced accuracy 1-3%, RTD AUC about
0.6). This sweep, on Table 5's own reference shape, data and 1x budget (the MLM + NSP reference's
useful FLOPs, counted with the generator), asks which of ELECTRA's levers matter there: the
learning rate first, then, at 1e-3, one change at a time: the loss weight, DeBERTaV3's
gradient-disentangled embedding sharing, wider generators (a generator as wide as the one-layer
model would be the model itself), a higher mask rate. Every arm and the
packed-MLM reference at the same FLOPs are fine-tuned on SST-2 and CoNLL-2003 with Table 5's
settings and seeds, and compared with the MLM reference by the ablation's sign rule.
"""

from __future__ import annotations

import functools
import statistics

from bertkit.ablate.curve import flops_per_step
from bertkit.ablate.plan import Plan, finetune_settings, setup_cells
from bertkit.ablate.scales import SCALES as ABLATE_SCALES
from bertkit.ablate.scales import Scale
from bertkit.ablate.signs import UNRESOLVED, sign_verdict
from bertkit.experiments import pretraining
from bertkit.experiments.core import Cell, Context, Experiment, Report, shared_data

SCALES = {"cpu": "cpu-curve", "tiny": "tiny"}
SEEDS = (1, 2, 3)
TASKS = {"sst2": "accuracy", "conll": "f1"}
REFERENCE = "mlm"  # the packed-MLM arm every ELECTRA arm is compared with
# arm -> (objective, lr, ELECTRA options): the lr first, then one change at a time at 1e-3
ARMS = {"mlm": ("mlm", 3e-3, {}),
        "electra-lr3e-4": ("electra", 3e-4, {}),  # Table 5's curve
        "electra-lr1e-3": ("electra", 1e-3, {}),
        "electra-lr3e-3": ("electra", 3e-3, {}),
        "electra-weight10": ("electra", 1e-3, {"rtd_weight": 10.0}),
        "electra-gdes": ("electra", 1e-3, {"embedding_sharing": "gdes"}),
        "electra-gen0.5": ("electra", 1e-3, {"generator_width": 0.5}),
        "electra-gen0.75": ("electra", 1e-3, {"generator_width": 0.75}),
        "electra-mask25": ("electra", 1e-3, {"mask_rate": 0.25})}
TINY_ARMS = {"mlm": ("mlm", 2e-3, {}), "electra-gdes": ("electra", 2e-3, {"embedding_sharing": "gdes"})}


def scale_of(scale: str) -> Scale:
    return ABLATE_SCALES[SCALES[scale]]


@functools.lru_cache(maxsize=4)
def plan_of(scale: str) -> Plan:
    s = scale_of(scale)
    arms = TINY_ARMS if scale == "tiny" else ARMS
    seeds = SEEDS[:1] if scale == "tiny" else SEEDS
    budget = s.steps * flops_per_step(s, "mlm+nsp", "nsp")  # Table 5's 1x
    cells = setup_cells(s, {"packed"}, list(TASKS))
    for arm, (objective, lr, options) in arms.items():
        steps = max(1, round(budget / flops_per_step(s, objective, "packed", options=options)))
        params = s.pretrain_params(objective, "packed", lr=lr, options=options, steps=steps)
        cells.append(Cell(f"pretrain/{arm}", "pretrain", params, ("vocab", "data/packed")))
        for seed in seeds:
            for task in TASKS:
                params = (("variant", arm), ("task", task), ("how", "ft"), ("seed", seed),
                          *finetune_settings(s, task, "ft"))
                cells.append(Cell(f"finetune/{arm}/{task}/ft/seed{seed}", "finetune", params,
                                  (f"pretrain/{arm}", f"tasks/{task}")))
    return Plan(s, seeds, tuple(TASKS), [], cells)


plan, execute, calibrate = pretraining.parts(plan_of)


def _scores(records: dict, arm: str, task: str) -> list[float]:
    out = []
    for r in records.values():
        p = r["params"]
        if r["kind"] == "finetune" and p.get("variant") == arm and p.get("task") == task:
            out.append(float(r["result"]["dev"][TASKS[task]]))
    return out


def _arm_data(arm: str, cell: Cell, records: dict) -> dict:
    options = dict(cell.param("options") or ())
    r = records.get(cell.id)
    val = r["result"]["val"] if r else {}
    data = {"objective": cell.param("objective"), "lr": cell.param("lr"), "options": options,
            "steps": cell.param("steps"), "minutes": r["result"].get("elapsed_s", r["time_s"]) / 60 if r else None,
            "val": {k: v for k, v in val.items() if k.endswith(("accuracy", "auc"))}, "tasks": {}}
    reference = {t: _scores(records, REFERENCE, t) for t in TASKS}
    for task in TASKS:
        ours = _scores(records, arm, task)
        entry = {"scores": ours}
        if ours:
            entry["median"] = statistics.median(ours)
            entry["std"] = statistics.stdev(ours) if len(ours) > 1 else None
        if arm != REFERENCE and ours and reference[task]:
            entry["vs_mlm"] = sign_verdict(None, ours, reference[task])
        data["tasks"][task] = entry
    return data


def _row(arm: str, d: dict) -> str:
    change = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in d["options"].items())
    val = d["val"]
    if d["objective"] == "electra":
        model = (f"replaced {100 * val['replaced_accuracy']:.1f}%, original {100 * val['original_accuracy']:.1f}%, "
                 f"AUC {val['rtd_auc']:.3f}; generator MLM {100 * val['mlm_accuracy']:.1f}%") if val else "…"
    else:
        model = f"MLM {100 * val['mlm_accuracy']:.1f}%" if val else "…"
    minutes = "…" if d["minutes"] is None else f"{d['minutes']:.1f}"
    cells = [arm, change or "-", f"{d['lr']:g}", f"{d['steps']:,}", minutes, model]
    for task in TASKS:
        e = d["tasks"][task]
        if "median" not in e:
            cells.append("…")
            continue
        text = f"{e['median']:.2f}" + ("" if e["std"] is None else f" ± {e['std']:.2f}")
        sign = e.get("vs_mlm")
        if sign and "direction" in sign:
            direction = "not resolved" if sign["direction"] == UNRESOLVED else sign["direction"]
            text += f" ({sign['our_gap']:+.2f}, {direction})"
        cells.append(text)
    return "| " + " | ".join(cells) + " |"


def report(cells: list[Cell], records: dict, ctx: Context) -> Report:
    pretrains = {c.id.removeprefix("pretrain/"): c for c in cells if c.kind == "pretrain"}
    data = {arm: _arm_data(arm, c, records) for arm, c in pretrains.items()}
    lines = [f"Each arm pretrains Table 5's reference shape on its packed data for the same useful FLOPs "
             f"(the MLM + NSP reference's {scale_of(ctx.scale).steps:,} steps' worth, the generator counted), "
             f"then fine-tunes on SST-2 (accuracy) and CoNLL-2003 (F1) with seeds "
             f"{', '.join(map(str, plan_of(ctx.scale).seeds))}: median ± standard deviation, and the gap to the "
             "MLM arm where it exceeds the larger spread (the ablation's sign rule).", "",
             "| arm | change | lr | steps | minutes | validation | SST-2 | CoNLL-2003 |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [_row(arm, d) for arm, d in data.items()]
    lines += ["", "![each arm's fine-tuned scores against the MLM arm's](rtd.png)"]
    return Report("\n".join(lines), [lambda out: _plot(data, out / "rtd.png")], {"arms": data})


def _plot(data: dict, path) -> None:
    from bertkit.plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, len(TASKS), figsize=(5 * len(TASKS), 4))
    arms = list(data)
    for ax, task in zip(axes, TASKS):
        medians = [data[a]["tasks"][task].get("median", 0.0) for a in arms]
        spreads = [data[a]["tasks"][task].get("std") or 0.0 for a in arms]
        ax.barh(arms, medians, xerr=spreads, color=["#555" if a == REFERENCE else "#4a7ab5" for a in arms])
        ax.set_xlabel(f"{task} dev {TASKS[task]}")
        ax.invert_yaxis()
        done = [m for m in medians if m]
        if done:
            ax.set_xlim(min(done) - 5, max(done) + 3)
    fig.suptitle("Replaced-token detection against masked LM at equal FLOPs")
    fig.tight_layout()
    save_figure(fig, path)


EXPERIMENT = Experiment(
    name="rtd", title="Replaced-token detection against masked LM at equal FLOPs: ELECTRA's levers",
    scales=tuple(SCALES), plan=plan, execute=execute, report=report, calibrate=calibrate,
    cost="9 pretrainings of about 5-6 minutes each on one thread and 54 short fine-tunings: about 35 minutes "
         "with two processes",
    env_defaults={"corpus": [f"{shared_data()}/corpus/wikipedia/enwiki_000{i}.txt.xz" for i in range(8)],
                  "data_dir": shared_data(), "workers": 1})

