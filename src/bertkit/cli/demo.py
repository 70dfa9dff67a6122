"""`bertkit demo`: the main job, end to end on BBC News with no flags (see bertkit.demo)."""

from __future__ import annotations

import time
from pathlib import Path

from bertkit.cli.args import nonnegative_int, positive_float, positive_int
from bertkit.cli.pretrain import preset_name
from bertkit.errors import UserError


def add_arguments(parser) -> None:
    parser.add_argument("--out", default=None, help="run folder (default: runs/demo-YYYYmmdd-HHMMSS)")
    parser.add_argument("--minutes", type=positive_float, default=12.0,
                        help="the whole demo's time budget; pretraining gets what the other stages leave")
    parser.add_argument("--preset", type=preset_name, default="tiny",
                        help="model size preset; tiny is 2 layers, hidden 128")
    parser.add_argument("--articles-per-topic", type=positive_int, default=None,
                        help="use only this many articles of each topic (a quicker, smaller demo; default: all)")
    parser.add_argument("--seed", type=nonnegative_int, default=0,
                        help="seed of the split, weights and order (default: 0)")


def check(args) -> None:
    if args.out and Path(args.out).exists():
        raise UserError("run folder exists already; choose another --out", args.out)


def run(args) -> int:
    from bertkit.demo import DemoPlan, run_demo
    from bertkit.demo.summary import story

    out = Path(args.out) if args.out else Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    plan = DemoPlan(minutes=args.minutes, preset=args.preset, seed=args.seed,
                    articles_per_topic=args.articles_per_topic, threads=args.threads)
    summary = run_demo(out, plan)
    print("\n" + story(summary))
    print(f"Run folder: {out} (summary.md embeds the figures; summary.json holds every number)")
    return 0
