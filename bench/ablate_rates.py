"""The per-unit rates `bertkit ablate` estimates a scale's time from, measured from a finished run.

    python bench/ablate_rates.py OUT [--json docs/ablations/cpu-small-timings.json]

Reads every cell's record (its parameters and `time_s`) from OUT/work/done/*.json, or from
OUT/records/*.json (a committed report's copy), and prints, for the scale OUT was run at, the
rates `bertkit.ablate.scales.Scale.rates` holds: seconds per pretraining step per model size (the
masked-LM variants), each other objective's step over the MLM step of the same size
(`ltr_factor`, `electra_factor`; equal-time cells count too: their steps are in their record),
and seconds per training example (SQuAD: article) and epoch per task, fine-tuned (`ft_`) and
feature-based (`fb_`), each the median over the reference size's cells (the estimate scales a
size's fine-tuning by its step rate), with `head_ltr-bilstm`, the LTR head with a BiLSTM over
the plain head (median over tasks); the lr-tuning cells (`tune/`) are left out.
The time of a cell includes its evaluation and loading, so the rates fold them in. Paste them
into the scale's rates after a run on the machine they are for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
MLM = ("mlm+nsp", "mlm")  # the objectives whose step is the size's `step_` rate


def _records(out: Path) -> list[dict]:
    folder = out / "work" / "done" if (out / "work" / "done").is_dir() else out / "records"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def _unit(r: dict, scale, sizes: dict) -> tuple[str, float] | None:
    """(rate name, seconds per unit) of one cell's record; None for what no rate counts.
    `sizes`: each variant's model size."""
    params, kind = r["params"], r["kind"]
    if kind == "pretrain" and not r["id"].startswith("tune/"):
        steps = r["result"]["steps"] or scale.steps
        objective = params["objective"]
        key = f"step_{params['size']}" if objective in MLM else f"{objective}_step"
        return key, r["time_s"] / steps
    if kind == "finetune" and sizes.get(params["variant"], "reference") == "reference":
        size, task = scale.tasks[params["task"]], params["task"]
        # a record from before cells held their sizes: the examples it read
        train = params.get("train", size.train if task == "squad" else r["result"]["n_train"])
        units = train * params.get("epochs", size.epochs)
        how = params["how"]
        kind = "fb" if how.startswith("fb-") else how if how == "ltr-bilstm" else "ft"
        return f"{kind}_{task}", r["time_s"] / units
    if kind in ("vocab", "data"):
        return kind, r["time_s"]
    return None


def rates(out: Path) -> dict:
    from bertkit.ablate.scales import SCALES

    scale = SCALES[json.loads((out / "ablation.json").read_text())["scale"]]
    per: dict[str, list[float]] = {}
    found_records = _records(out)
    sizes = {r["id"].removeprefix("pretrain/"): r["params"]["size"] for r in found_records if r["kind"] == "pretrain"}
    for r in found_records:
        unit = _unit(r, scale, sizes)
        if unit is not None:
            per.setdefault(unit[0], []).append(unit[1])
    found = {k: statistics.median(v) for k, v in sorted(per.items())}
    for objective in ("ltr", "electra"):
        if f"{objective}_step" in found and "step_reference" in found:
            found[f"{objective}_factor"] = found.pop(f"{objective}_step") / found["step_reference"]
    bilstm = [found.pop(k) / found[f"ft_{k.split('_', 1)[1]}"] for k in list(found)
              if k.startswith("ltr-bilstm_") and f"ft_{k.split('_', 1)[1]}" in found]
    if bilstm:
        found["head_ltr-bilstm"] = statistics.median(bilstm)
    return {"scale": scale.name, "cells": {k: len(v) for k, v in sorted(per.items())},
            "rates": {k: round(v, 6) for k, v in found.items()}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="ablate_rates.py", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="a `bertkit ablate` folder")
    p.add_argument("--json", type=Path, help="also write the result here")
    args = p.parse_args(argv)
    result = rates(args.out)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
