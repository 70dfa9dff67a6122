"""`bertkit ablate --tune-lr`: each objective's peak learning rate, chosen on short pretrainings.

The budget recipe's 3e-3 was measured for masked LM; what suits next-token prediction (LTR) and
replaced-token detection (ELECTRA) may differ (on the demo's data ELECTRA's discriminator
collapses to "all original" at 1e-3). For every objective in the scale's `lr_grid`, one
pretraining of the reference shape per candidate lr, `tune_steps` long (the full run's settings
otherwise, its schedule compressed into the shorter run), each a resumable cell of the ablation's
folder (`tune/<objective>/lr<lr>`, sharing its vocabulary and data). Each is scored by its own
objective's validation metric (TUNE_METRIC); for ELECTRA the discriminator's balanced accuracy,
the mean of its accuracy at replaced and at original tokens, which an all-original collapse holds
at 50%. The best lr per objective goes to OUT/lr-tuning.json; copy it into the scale's
`lr_by_objective` with a comment naming that file. A short run favours a higher lr a little.
"""

from __future__ import annotations

from bertkit.ablate.plan import Cell, Plan, get_scale, setup_cells, step_seconds
from bertkit.errors import UserError

TUNE_METRIC = {"mlm+nsp": "mlm_accuracy", "mlm": "mlm_accuracy", "ltr": "next_token_accuracy",
               "electra": "balanced_rtd_accuracy"}


def objective_format(objective: str) -> str:
    """MLM + NSP reads sentence pairs; the others packed sequences, as in Table 5."""
    return "nsp" if objective == "mlm+nsp" else "packed"


def tune_plan(scale_name: str) -> Plan:
    """One short pretraining per objective and candidate lr, after the vocabulary and data."""
    scale = get_scale(scale_name)
    if not scale.lr_grid or scale.tune_steps < 1:
        raise UserError(f"--tune-lr: scale {scale_name} has no learning rates to try (lr_grid, tune_steps)")
    cells = []
    for objective, lrs in scale.lr_grid.items():
        fmt = objective_format(objective)
        for lr in lrs:
            params = scale.pretrain_params(objective, fmt, lr=lr, steps=scale.tune_steps)
            estimate = scale.rates.get("fixed", 0.0) + step_seconds(scale, "reference", objective) * scale.tune_steps
            cells.append(Cell(f"tune/{objective}/lr{lr:g}", "pretrain", params, ("vocab", f"data/{fmt}"), estimate))
    formats = {c.param("format") for c in cells}
    return Plan(scale, (), (), [], [*setup_cells(scale, formats, ()), *cells])


def tune_score(objective: str, val: dict) -> float | None:
    """An objective's own validation metric, higher is better (x100)."""
    if objective == "electra":
        if "replaced_accuracy" not in val or "original_accuracy" not in val:
            return None
        return 50 * (val["replaced_accuracy"] + val["original_accuracy"])
    value = val.get(TUNE_METRIC[objective])
    return None if value is None else 100 * value


def tune_result(plan: Plan, records: dict) -> dict:
    """lr-tuning.json's content: every run's score, and the best lr of each objective."""
    scale = plan.scale
    out = {"scale": scale.name, "steps": scale.tune_steps, "metrics": TUNE_METRIC, "objectives": {}}
    for objective, lrs in scale.lr_grid.items():
        runs = []
        for lr in lrs:
            result = records.get(f"tune/{objective}/lr{lr:g}", {}).get("result")
            if result is not None:
                val = result.get("val", {})
                runs.append({"lr": lr, "score": tune_score(objective, val), "val": val,
                             "elapsed_s": result.get("elapsed_s")})
        scored = [r for r in runs if r["score"] is not None]
        best = max(scored, key=lambda r: r["score"])["lr"] if len(scored) == len(lrs) else None
        out["objectives"][objective] = {"metric": TUNE_METRIC[objective], "runs": runs, "best_lr": best,
                                        "scale_lr": scale.lr_for(objective)}
    return out


def render_tune(result: dict) -> list[str]:
    """The tuning as console lines: each objective's runs, its best lr and the scale's."""
    lines = [f"lr tuning at scale {result['scale']}: {result['steps']} steps per run, scored by each objective's "
             f"own validation metric (x100)"]
    for objective, o in result["objectives"].items():
        runs = ", ".join(f"{r['lr']:g}: {r['score']:.2f}" if r["score"] is not None else f"{r['lr']:g}: -"
                         for r in o["runs"])
        best = f"{o['best_lr']:g}" if o["best_lr"] is not None else "pending"
        lines.append(f"  {objective:8s} {o['metric']}: {runs or 'pending'}; best {best} (scale now {o['scale_lr']:g})")
    return lines
