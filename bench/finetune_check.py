"""Fine-tuning settings for Table 5's compute curve, checked on its own 1x models.

The cpu-curve scale took cpu-small's fine-tuning sizes (lr 3e-4, chosen for 4 layers x 128). This
fine-tunes the finished 1x MLM and LTR pretrainings of `bertkit experiment table5` (its work folder)
on each task with seed 1 at other learning rates, and SQuAD on more training articles, and writes
docs/results/table5/finetune-check.json.

    python bench/finetune_check.py [--variants no-nsp,ltr-x1] [--lrs 1e-3,3e-3] [--squad-articles 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from bertkit.ablate.cells import Context, _finetune
from bertkit.ablate.taskdata import write_task_subset
from bertkit.experiments import table5
from bertkit.experiments.core import shared_data
from bertkit.experiments.machine import machine
from bertkit.io import write_json

WORK = Path("runs/experiments/table5/cpu")
OUT = Path("docs/results/table5/finetune-check.json")


def _cell(plan, variant: str, task: str, **change):
    base = next(c for c in plan.cells if c.kind == "finetune" and c.param("variant") == variant
                and c.param("task") == task and c.param("seed") == 1)
    params = {**dict(base.params), **change}
    tag = ",".join(f"{k}={v}" for k, v in change.items())
    return dataclasses.replace(base, id=f"finetune-check/{variant}/{task}/{tag}", params=tuple(params.items()))


def main(argv=None) -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--variants", default="no-nsp,ltr-x1")
    a.add_argument("--lrs", default="1e-3,3e-3")
    a.add_argument("--squad-articles", type=int, default=16)
    args = a.parse_args(argv)
    plan = table5.plan_of("cpu")
    scratch = WORK.parent / "finetune-check"
    rows = []

    def run(ctx, cell, **what):
        began = time.time()
        dev = _finetune(cell, plan, ctx)["dev"]
        rows.append({**what, "dev": dev, "seconds": round(time.time() - began, 1)})
        print(json.dumps(rows[-1]), flush=True)

    ctx = Context(work=WORK, records=scratch, data_dir=Path(shared_data()))
    for variant in args.variants.split(","):
        for task in ("sst2", "conll", "stsb", "squad"):
            for lr in (float(x) for x in args.lrs.split(",")):
                run(ctx, _cell(plan, variant, task, lr=lr), variant=variant, task=task, lr=lr)
    # SQuAD on more articles: its own task folder, the same pretrained models
    squad = scratch / "tasks" / "squad"
    squad.mkdir(parents=True, exist_ok=True)
    size = dataclasses.replace(plan.scale.tasks["squad"], train=args.squad_articles)
    write_task_subset("squad", Path(shared_data()), squad, size)
    for variant in args.variants.split(","):
        link = scratch / "pretrain" / variant
        link.parent.mkdir(exist_ok=True)
        if not link.exists():
            link.symlink_to((WORK / "pretrain" / variant).resolve())
    wide = Context(work=scratch, records=scratch, data_dir=Path(shared_data()))
    for variant in args.variants.split(","):
        run(wide, _cell(plan, variant, "squad", squad_articles=args.squad_articles), variant=variant,
            task="squad", lr=size.lr, articles=args.squad_articles)
    write_json(OUT, {"machine": machine(), "runs": rows})
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
