"""Table 5 along a compute axis (`t5-curve`): every objective pretrained at each of a scale's
budgets, at equal FLOPs.

A budget is a multiple of the scale's reference compute: the MLM + NSP reference's `steps` times
its useful FLOPs per step. Each objective gets the steps that spend that many FLOPs, counted as the
pretraining status line counts them (`bertkit.pretrain.report`'s useful-FLOP count on the model the
run builds: the encoder's matrices and attention, the MLM head at the masked positions, the
next-token head at every position for LTR, the generator beside the discriminator for ELECTRA), so
LTR and ELECTRA get fewer steps than MLM at the same budget. FLOPs are counted at the scale's
nominal vocabulary size (the learned one can be a few entries smaller). Where an objective's steps
at a budget are the scale's `steps` (MLM + NSP at 1x, and MLM, whose step costs the same), its row
pretrains Table 5's own variant, so the two tables share those cells. Every row is compared with
MLM + NSP at the same budget; the largest budget fine-tunes with the first `largest_budget_seeds`
seeds only where the scale says so. The report's side of the curve is `curve_report.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import json

from bertkit.ablate.scales import Scale
from bertkit.ablate.tables import CURVE_COLUMNS, CURVE_KEY, CURVE_LINES, CurveLine, Row, Table


def flops_per_step(scale: Scale, objective: str, fmt: str, size: str = "reference",
                   options: dict | None = None) -> float:
    """Useful FLOPs of one pretraining step of `objective` at this scale (a cell's own options, and
    `options` such as ELECTRA's generator size)."""
    options = scale.train_options(dict(scale.pretrain_params(objective, fmt, size, options=options)))
    return _count(json.dumps(options, sort_keys=True), scale.vocab_size, scale.max_seq_len)


@functools.lru_cache(maxsize=64)
def _count(options: str, vocab_size: int, seq_len: int) -> float:
    """The run's own count on the model it would build (built on the meta device: shapes without
    weights; the global RNG, which building seeds, left as it was)."""
    import torch

    from bertkit.pretrain.build import build_model
    from bertkit.pretrain.report import useful_flops
    from bertkit.pretrain.setup import TrainConfig

    cfg = TrainConfig(data="", out="", **json.loads(options))
    manifest = {"vocab_size": vocab_size, "pad_id": 0, "max_seq_len": seq_len}
    with torch.random.fork_rng(), torch.device("meta"):
        model, _ = build_model(cfg, manifest, None, torch.device("meta"))
    return float(useful_flops(model, cfg, seq_len))


def budget_name(multiplier: float) -> str:
    return f"{multiplier:g}x"


def _key(line: CurveLine, multiplier: float) -> str:
    return f"{CURVE_KEY}-{line.variant.name}-x{multiplier:g}"


def curve_table(scale: Scale) -> Table:
    """The curve's rows at this scale (each line at each budget, budgets in order) and, in `meta`,
    the reference's FLOPs and each row's budget, steps and FLOPs per step."""
    reference = CURVE_LINES[0].variant
    reference_flops = flops_per_step(scale, reference.objective, reference.format)
    largest = max(scale.curve)
    rows, info = [], {}
    for multiplier in sorted(scale.curve):
        seeds = scale.largest_budget_seeds if multiplier == largest else None
        for line in CURVE_LINES:
            v = line.variant
            per_step = flops_per_step(scale, v.objective, v.format, v.size)
            steps = max(1, round(multiplier * scale.steps * reference_flops / per_step))
            if steps != scale.steps:
                v = dataclasses.replace(v, name=f"{v.name}-x{multiplier:g}", steps=steps)
            key = _key(line, multiplier)
            rows.append(Row(key, f"{line.label}, {budget_name(multiplier)}", v, line.paper, line.how,
                            against=_key(CURVE_LINES[0], multiplier), column_how=line.column_how, seeds=seeds))
            info[key] = {"line": line.label, "objective": v.objective, "variant": v.name, "multiplier": multiplier,
                         "steps": steps, "flops_per_step": per_step}
    note = (f"Each objective is pretrained at {', '.join(budget_name(m) for m in sorted(scale.curve))} the MLM + NSP "
            f"reference's compute ({scale.steps:,} steps of {reference_flops:.3g} useful FLOPs), each with the steps "
            "that spend it (LTR predicts every position and ELECTRA trains a generator beside its model, so they get "
            "fewer), and compared with MLM + NSP at the same budget: the paper's sign where it has a figure (SST-2, "
            "SQuAD), our gap elsewhere.")
    meta = {"reference_flops_per_step": reference_flops, "reference_steps": scale.steps,
            "budgets": sorted(scale.curve), "largest_budget_seeds": scale.largest_budget_seeds, "rows": info}
    return Table(CURVE_KEY, "Table 5 along a compute axis: pretraining tasks at equal FLOPs", CURVE_COLUMNS,
                 tuple(rows), note, meta)
