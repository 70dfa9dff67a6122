"""The per-unit rates `bertkit ablate` estimates a scale's time from, measured from a finished run.

    python bench/ablate_rates.py OUT [--json docs/ablations/cpu-small-timings.json]

Reads OUT/work/done/*.json (every cell's record: its parameters and `time_s`) and prints, for the
scale OUT was run at, the rates `bertkit.ablate.plan.Scale.rates` holds: seconds per pretraining
step per model size (MLM variants; `ltr_factor`: an LTR step over an MLM step of the same size),
and seconds per training example and epoch per task, fine-tuned (`ft_`) and feature-based (`fb_`),
each the median over its cells. The time of a cell includes its evaluation and loading, so the
rates fold them in. Paste them into the scale's rates after a run on the machine they are for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def rates(out: Path) -> dict:
    from bertkit.ablate.plan import SCALES

    scale = SCALES[json.loads((out / "ablation.json").read_text())["scale"]]
    records = [json.loads(p.read_text()) for p in sorted((out / "work" / "done").glob("*.json"))]
    per: dict[str, list[float]] = {}
    for r in records:
        params = r["params"]
        if r["kind"] == "pretrain":
            steps = r["result"]["steps"] or scale.steps
            key = "ltr_step" if params["objective"] == "ltr" else f"step_{params['size']}"
            per.setdefault(key, []).append(r["time_s"] / steps)
        elif r["kind"] == "finetune":
            size = scale.tasks[params["task"]]
            kind = "fb" if params["how"].startswith("fb-") else "ft"
            per.setdefault(f"{kind}_{params['task']}", []).append(r["time_s"] / (size.train * size.epochs))
        elif r["kind"] in ("vocab", "data"):
            per.setdefault(r["kind"], []).append(r["time_s"])
    found = {k: statistics.median(v) for k, v in sorted(per.items())}
    if "ltr_step" in found and "step_reference" in found:
        found["ltr_factor"] = found.pop("ltr_step") / found["step_reference"]
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
