"""Learning per CPU-minute: each pretraining lever against the budget recipe, one at a time, at
equal time on an AVX2 fp32 core.

    python bench/pretrain_levers.py --shape demo [--arms reference,mask40,...] [--budget-steps 1300]
    python bench/pretrain_levers.py --shape ablation ...

A lever is one change to the reference run (`ARMS`): the mask rate, the schedule, clipping,
dropout, NSP, sentence pairs against packed sequences, causal-then-masked, the position table's
start, precision, sequence length, batch, vocabulary, heads. Every arm gets the same time on the
same core, and that time is counted on the machine the issue is about, not on this one:
1. timing: each arm's seconds per step with PyTorch, oneDNN and MKL restricted to AVX2 kernels
   and fp32 (bf16 arms: the CPU's own kernels), one thread, one arm at a time;
2. training: each arm runs `budget-steps x (reference s/step) / (its s/step)` steps, so all arms
   cost the same seconds on that core whatever else this machine runs meanwhile (two arms at a
   time, one thread each, with the AVX2 restriction), checkpointed along the way;
3. scoring: every checkpoint's validation MLM accuracy at 15% (80/10/10, one fixed masking of the
   reference's validation split, whatever the arm trained with), and the final model's demo
   probe (topic accuracy from 4 / 16 / 64 / all labelled BBC articles per topic, frozen mean-pooled
   features) and senses ("court", "bank": same-sense neighbours).
Steps and seconds to 20% validation MLM accuracy come from the checkpoints (first one at or above).
The default budget, 1,300 reference steps, is about ten minutes of the demo's pretraining on a Zen 1
core with nothing beside it (8,900 tokens/s, measured there). Results: --json (and a PNG beside it).

Shapes: `demo` is `bertkit demo`'s (BBC News, 8,000-entry WordPiece, packed 128-token sequences,
tiny preset 2 x 128, masked LM); `ablation` is `bertkit ablate --scale cpu-small`'s reference
(Wikipedia shards 0-7, 8,000 entries, sentence pairs with NSP, 4 x 128, lr 1e-3).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
TODAY = dt.date.today().isoformat()
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
GOAL = 0.20  # validation MLM accuracy whose time is reported

# Each shape: its data, model and the reference's options (the budget recipe fills the rest).
SHAPES = {
    "demo": {"corpus": "bbc", "vocab": 8000, "data": "packed128", "preset": "tiny", "overrides": {},
             "train": {"objective": "mlm"}},
    "ablation": {"corpus": "wikipedia", "vocab": 8000, "data": "nsp128", "preset": "tiny",
                 "overrides": {"num_hidden_layers": 4, "hidden_size": 128, "num_attention_heads": 2,
                               "intermediate_size": 512},
                 "train": {"objective": "mlm+nsp", "lr": 1e-3}},
}
# arm -> what it changes: TrainConfig options ("train"), another prepared data ("data"), model
# config overrides ("overrides"), the share of the time spent left-to-right first ("ltr_share"),
# a learned position table started at random instead of the sinusoids ("random_positions"),
# the CPU's own kernels (bf16 arms: "native"), the shapes it applies to, and whether a step costs
# what the reference's does ("same_cost": only the schedule or the starting values change, so the
# arm takes the reference's steps rather than a count from its own, noisier, timing).
SAME = {"same_cost": True}
LATER = {"round": 2}  # run when named in --arms, not by default
ARMS = {
    "reference": {},
    "mask25": {"train": {"mask_rate": 0.25}},
    "mask40": {"train": {"mask_rate": 0.40}},
    "no-warmup": {"train": {"warmup": 0.0}, **SAME},
    "one-cycle": {"train": {"warmup": 0.5}, **SAME},
    "no-clip": {"train": {"max_grad_norm": 0.0}},
    "dropout": {"train": {"dropout": 0.1}},
    "lr-half": {"train": {"lr": "half"}, **SAME},
    "lr-double": {"train": {"lr": "double"}, **SAME},
    "batch16": {"train": {"batch_size": 16}},
    "batch64": {"train": {"batch_size": 64}},
    "heads4": {"overrides": {"num_attention_heads": 4}},
    "random-positions": {"random_positions": True, **SAME},
    "bf16": {"train": {"precision": "bf16"}, "native": True},
    "seq64": {"data": "packed64", "train": {"batch_size": 64}},
    "pairs": {"data": "nsp128", "train": {"objective": "mlm"}, "shapes": ("demo",)},
    "nsp": {"data": "nsp128", "train": {"objective": "mlm+nsp"}, "shapes": ("demo",)},
    "packed": {"data": "packed128", "train": {"objective": "mlm"}, "shapes": ("ablation",)},
    "no-nsp": {"train": {"objective": "mlm"}, "shapes": ("ablation",)},
    "causal-then-masked": {"ltr_share": 0.3},
    "vocab4k": {"vocab": 4000},
    # second round: the first round's winners together (the issue's levers one at a time come first)
    "warmup25": {"train": {"warmup": 0.25}, **SAME, **LATER},
    "one-cycle-lr1.5": {"train": {"warmup": 0.5, "lr": "x1.5"}, **SAME, **LATER},
    "one-cycle-lr-half": {"train": {"warmup": 0.5, "lr": "half"}, **SAME, **LATER},
    "one-cycle-mask25": {"train": {"warmup": 0.5, "mask_rate": 0.25}, **LATER},
    "one-cycle-vocab4k": {"train": {"warmup": 0.5}, "vocab": 4000, **LATER},
    "one-cycle-seq64": {"train": {"warmup": 0.5, "batch_size": 64}, "data": "packed64", **LATER},
    # smaller models: more steps in the same time
    "width64": {"overrides": {"hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 256}, **LATER},
    "width96": {"overrides": {"hidden_size": 96, "num_attention_heads": 2, "intermediate_size": 384}, **LATER},
    "one-layer": {"overrides": {"num_hidden_layers": 1}, **LATER},
    "width64-one-cycle": {"overrides": {"hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 256},
                          "train": {"warmup": 0.5}, **LATER},
    "one-layer-one-cycle": {"overrides": {"num_hidden_layers": 1}, "train": {"warmup": 0.5}, **LATER},
    "one-layer-width64": {"overrides": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2,
                                        "intermediate_size": 256}, **LATER},
    "one-layer-width192": {"overrides": {"num_hidden_layers": 1, "hidden_size": 192, "num_attention_heads": 3,
                                         "intermediate_size": 768}, **LATER},
    "width48": {"overrides": {"hidden_size": 48, "num_attention_heads": 2, "intermediate_size": 192}, **LATER},
    "width64-3layers": {"overrides": {"hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 256,
                                      "num_hidden_layers": 3}, **LATER},
    # each layer's two output maps drawn 1/sqrt(2 x layers) smaller: a post-LN layer starts near LN(x)
    "small-residual": {"residual_scale": "depth", **SAME, **LATER},
    "zero-residual": {"residual_scale": 0.0, **SAME, **LATER},
    "one-cycle-small-residual": {"train": {"warmup": 0.5}, "residual_scale": "depth", **SAME, **LATER},
}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="pretrain_levers.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=tuple(SHAPES), default="demo")
    p.add_argument("--arms", default=None, help="comma-separated arms (default: every arm of the shape)")
    p.add_argument("--budget-steps", type=int, default=1300, help="the budget in reference steps (default 1300)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parallel", type=int, default=2, help="arms trained at once, one thread each")
    p.add_argument("--work", default=None, help="data and runs (default scratch/levers-SHAPE)")
    p.add_argument("--json", default=None, help="results (default docs/results/pretrain-levers/DATE-SHAPE.json)")
    p.add_argument("--only", default=None, help="internal: train (or --time) one arm in this process")
    p.add_argument("--time", action="store_true", help="internal: time --only's arm")
    p.add_argument("--steps", default="0", help="internal: --only's step count (per phase, comma-separated)")
    return p.parse_args(argv)


def arms_of(shape: str, names: str | None) -> list[str]:
    chosen = names.split(",") if names else [a for a, s in ARMS.items()
                                             if shape in s.get("shapes", (shape,)) and "round" not in s]
    unknown = [a for a in chosen if a not in ARMS]
    if unknown:
        raise SystemExit(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    return chosen


# ---- data ----
def corpus_files(shape: dict, work: Path) -> list[Path]:
    if shape["corpus"] == "wikipedia":
        return sorted((ROOT.parent / "shared/data/corpus/wikipedia").glob("enwiki_000[0-7].txt.xz"))
    from bertkit.demo.corpus import bbc_articles, split_articles, write_corpus

    train, test = split_articles(bbc_articles(), 0.2, 0)
    return [write_corpus(work, train, test)]


def data_dir(work: Path, shape: dict, arm: dict) -> Path:
    """The arm's prepared folder (made once): WORK/v{vocab}/{data}."""
    from bertkit.data.prepare import PrepareOptions, prepare_corpus
    from bertkit.io import expand_inputs
    from bertkit.tokenizer import Tokenizer

    vocab = arm.get("vocab", shape["vocab"])
    name = arm.get("data", shape["data"])
    out = work / f"v{vocab}" / name
    if (out / "manifest.json").exists():
        return out
    files = corpus_files(shape, work)
    if not (work / f"v{vocab}" / "vocab").exists():
        Tokenizer.train(expand_inputs(files), vocab_size=vocab).save_pretrained(work / f"v{vocab}" / "vocab")
    fmt, seq = name.rstrip("0123456789"), int(name.lstrip("acdekpns"))
    prepare_corpus(files, work / f"v{vocab}" / "vocab", out,
                   PrepareOptions(max_seq_len=seq, format=fmt, val_fraction=0.02, seed=0, workers=1))
    return out


# ---- one arm, in its own process ----
def train_config(shape: dict, arm: dict, data: Path, out: Path, steps: int, seed: int, **extra):
    from bertkit.pretrain import TrainConfig

    options = {**shape["train"], **arm.get("train", {}), **extra}
    base_lr = shape["train"].get("lr", 3e-3)
    options["lr"] = {"half": base_lr / 2, "double": base_lr * 2, "x1.5": base_lr * 1.5}.get(options.get("lr"),
                                                                                          options.get("lr"))
    options.setdefault("precision", "fp32")
    overrides = {**shape["overrides"], **arm.get("overrides", {})}
    if not options.get("init_from"):
        options["config_overrides"] = overrides
        options["preset"] = shape["preset"]
    return TrainConfig(data=str(data), out=str(out), recipe="budget", steps=steps, seed=seed, eval_every=10**9,
                       eval_samples=0, log_every=10, overwrite=True, **options)


def run_one(args, shape: dict, name: str, work: Path) -> None:
    """Train (or time) one arm in this process, one thread; writes WORK/runs/NAME(-time)/done.json.
    Timing runs each phase twice, 20 and 80 steps, and keeps the difference of the process's CPU
    seconds per step: start-up cancels out, and CPU time does not grow when the machine is shared."""
    import torch

    torch.set_num_threads(1)
    from bertkit.pretrain import pretrain

    arm = ARMS[name]
    if arm.get("random_positions"):  # the scaled init's position table: N(0, std) like the rest
        import bertkit.pretrain.init as init

        init.sinusoids = lambda P, C: torch.randn(P, C) / math.sqrt(2)
    if "residual_scale" in arm:
        _scale_residuals(arm["residual_scale"])
    data = data_dir(work, shape, arm)
    phases = ["ltr", "mlm"] if "ltr_share" in arm else ["run"]
    root = work / "runs" / (name + ("-time" if args.time else ""))
    started, previous, record = time.perf_counter(), None, {"phases": [], "s_per_step": {}}
    counts = [int(x) for x in args.steps.split(",")]
    for phase, steps in zip(phases, counts * len(phases) if len(counts) == 1 else counts):
        out = root / phase
        extra = {"objective": phase} if phase != "run" else {}
        if previous is not None:
            extra["init_from"] = str(previous / "model")
        if args.time:
            cpu = []
            for n in (20, 80):
                began = time.process_time()
                if pretrain(train_config(shape, arm, data, out, n, args.seed, **extra)) != 0:
                    raise SystemExit(f"{name} stopped")
                cpu.append(time.process_time() - began)
            record["s_per_step"][phase] = round((cpu[1] - cpu[0]) / 60, 5)
        else:
            cfg = train_config(shape, arm, data, out, steps, args.seed, **extra, save_every=max(25, steps // 20),
                               keep=0)
            if pretrain(cfg) != 0:
                raise SystemExit(f"{name} stopped")
        record["phases"].append({"objective": phase, "steps": steps, "dir": str(out)})
        previous = out
    record["wall_s"] = round(time.perf_counter() - started, 1)
    (root / "done.json").write_text(json.dumps(record))


def _scale_residuals(scale) -> None:
    """After the scaled init, each layer's attention and feed-forward output maps times `scale`
    ("depth": 1/sqrt(2 x layers), GPT-2's; 0: zero, each layer starts as LayerNorm(x))."""
    import torch

    import bertkit.pretrain.init as init
    from bertkit.model import Layer

    original = init.initialise

    def initialise(model, how):
        model = original(model, how)
        with torch.no_grad():
            layers = [m for m in model.modules() if isinstance(m, Layer)]
            factor = (2 * len(layers)) ** -0.5 if scale == "depth" else float(scale)
            for layer in layers:
                layer.attn_out.weight.mul_(factor)
                layer.ffn_out.weight.mul_(factor)
        return model

    init.initialise = initialise
    import bertkit.pretrain.build as build

    build.initialise = initialise


def spawn(args, name: str, steps: list[int], time_it: bool) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if not ARMS[name].get("native"):
        env.update(AVX2)
    cmd = [sys.executable, __file__, "--shape", args.shape, "--only", name, "--steps", ",".join(map(str, steps)),
           "--work", str(args.work), "--seed", str(args.seed)] + (["--time"] if time_it else [])
    log = Path(args.work) / "logs" / f"{name}{'-time' if time_it else ''}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def timings(args, names: list[str], cache: Path) -> dict:
    """CPU seconds per step of each arm (and of LTR for causal-then-masked), one at a time."""
    found = json.loads(cache.read_text()) if cache.exists() else {}
    for name in names:
        if name in found:
            continue
        if ARMS[name].get("same_cost"):
            found[name] = found["reference"]
            continue
        if spawn(args, name, [60], True).wait() != 0:
            raise SystemExit(f"timing {name} failed: see {args.work}/logs/{name}-time.log")
        found[name] = json.loads((Path(args.work) / "runs" / f"{name}-time" / "done.json").read_text())["s_per_step"]
        print(f"  {name}: {found[name]} s/step", flush=True)
        cache.write_text(json.dumps(found, indent=1))
    return found


def arm_steps(budget_s: float, per_step: dict, arm: dict) -> list[int]:
    """The steps of each phase that together cost `budget_s` on the AVX2 core: causal-then-masked
    spends `ltr_share` of the time left-to-right, the rest masked."""
    if "ltr_share" in arm:
        share = arm["ltr_share"]
        return [round(share * budget_s / per_step["ltr"]), round((1 - share) * budget_s / per_step["mlm"])]
    return [round(budget_s / per_step["run"])]


# ---- scoring ----
def curve(scorer, root: Path, per_step: dict) -> list[dict]:
    """(seconds on the AVX2 core, the arm's step, validation MLM accuracy at 15%) per checkpoint,
    phases one after the other (a left-to-right phase has no MLM accuracy: its own checkpoints are
    skipped, its time counted)."""
    points, offset = [], 0.0
    for phase in sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.name != "ltr"):
        t = per_step[phase.name]
        ckpts = sorted((phase / "checkpoints").glob("step-*"))
        for ckpt in ckpts if phase.name != "ltr" else []:
            step = int(ckpt.name.split("-")[1])
            points.append({"seconds": round(offset + step * t, 1), "step": step, "mlm": round(scorer(ckpt), 4)})
        offset += int(ckpts[-1].name.split("-")[1]) * t if ckpts else 0.0
    return points


def score_arm(name: str, work: Path, shape: dict, per_step: dict) -> dict:
    from pretrain_objectives import score_probes
    from pretrain_recipes import Scorer

    arm = ARMS[name]
    root = work / "runs" / name
    scorer = Scorer(data_dir(work, shape, arm if "vocab" in arm else {}))  # the reference's validation split
    points = curve(scorer, root, per_step)
    final = max((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.name == "mlm" or p.name == "run")
    scored = score_probes({name: str(final / "model")}, with_random=False)[name]
    reached = next((p for p in points if p["mlm"] >= GOAL), None)
    return {"curve": points, "final_mlm": points[-1]["mlm"] if points else None,
            "steps_to_goal": reached["step"] if reached else None,
            "seconds_to_goal": reached["seconds"] if reached else None,
            "probe": scored["probe"], "senses": scored["senses"]}


def machine() -> dict:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    return {"cpu": fields.get("Model name", platform.processor()).strip(),
            "family": fields.get("CPU family", "").strip(), "model": fields.get("Model", "").strip(),
            "avx512_bf16": "avx512_bf16" in flags, "amx": "amx_bf16" in flags, "cores": os.cpu_count(),
            "timing": "AVX2 kernels (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, "
                      "MKL_ENABLE_INSTRUCTIONS=AVX2), fp32, one thread; bf16 arms on the CPU's own kernels"}


def train_all(args, names: list[str], per_step: dict, budget_s: float) -> None:
    """Every arm not yet trained, `args.parallel` at a time."""
    waiting = [n for n in names if not (Path(args.work) / "runs" / n / "done.json").exists()]
    running: list[tuple[str, subprocess.Popen]] = []
    while waiting or running:
        while waiting and len(running) < args.parallel:
            name = waiting.pop(0)
            steps = arm_steps(budget_s, per_step[name], ARMS[name])
            running.append((name, spawn(args, name, steps, False)))
            print(f"  training {name}: {steps} step(s)", flush=True)
        time.sleep(5)
        for name, proc in list(running):
            if proc.poll() is not None:
                running.remove((name, proc))
                if proc.returncode != 0:
                    raise SystemExit(f"{name} failed: see {args.work}/logs/{name}.log")
                print(f"  {name} done", flush=True)


def table(results: dict) -> str:
    ref = results["arms"].get("reference", {})
    lines = ["| arm | s/step (AVX2) | steps | steps to 20% | s to 20% | final MLM | probe 4 | court nn | bank nn |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results["arms"].items():
        senses = r["senses"]
        lines.append(f"| {name} | {'/'.join(str(v) for v in r['s_per_step'].values())} | {r['steps']} | "
                     f"{r['steps_to_goal'] or '-'} | {r['seconds_to_goal'] or '-'} | {100 * r['final_mlm']:.1f}% | "
                     f"{r['probe']['4']['mean']:.1f} | {100 * senses['court']['neighbours_same_sense']:.0f}% | "
                     f"{100 * senses['bank']['neighbours_same_sense']:.0f}% |")
    if ref:
        lines.append(f"\nreference final MLM {100 * ref['final_mlm']:.1f}%")
    return "\n".join(lines)


def plot(results: dict, dest: Path) -> None:
    """Left: validation MLM accuracy against seconds on the AVX2 core, one line per arm (the
    reference and the arms that pass 20% drawn bold). Right: each arm's final MLM accuracy
    against its 4-label probe."""
    from bertkit.plots import pyplot, save_figure

    plt = pyplot()
    fig, (curves, final) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = iter(plt.get_cmap("tab10").colors)
    for name, r in results["arms"].items():
        points = r["curve"] if isinstance(r["curve"], list) else [r["curve"]]
        bold = name == "reference" or r["steps_to_goal"]
        style = {"lw": 2, "color": next(colours), "label": name} if bold else {"lw": 0.7, "color": "grey", "alpha": 0.5}
        curves.plot([q["seconds"] for q in points], [100 * q["mlm"] for q in points], **style)
        final.scatter(100 * r["final_mlm"], r["probe"]["4"]["mean"], s=14)
        final.annotate(name, (100 * r["final_mlm"], r["probe"]["4"]["mean"]), fontsize=6, xytext=(2, 2),
                       textcoords="offset points")
    curves.axhline(100 * GOAL, color="grey", ls=":", lw=1)
    curves.set(xlabel="seconds on the AVX2 core (fp32, one thread)", ylabel="validation MLM accuracy (%)",
               title=f"{results['shape']} shape: each lever at equal time")
    curves.plot([], [], lw=0.7, color="grey", label="every other arm")
    curves.legend(fontsize=7)
    final.set(xlabel="final validation MLM accuracy (%)", ylabel="4-label topic probe (%)", title="where each arm ends")
    save_figure(fig, dest)


def main(argv=None) -> int:
    args = parse_args(argv)
    shape = SHAPES[args.shape]
    args.work = Path(args.work or ROOT / f"scratch/levers-{args.shape}")
    if args.only:
        run_one(args, shape, args.only, args.work)
        return 0
    names = arms_of(args.shape, args.arms)
    if "reference" not in names:
        names.insert(0, "reference")
    out = Path(args.json or ROOT / f"docs/results/pretrain-levers/{TODAY}-{args.shape}.json")
    args.work.mkdir(parents=True, exist_ok=True)
    for name in names:  # every prepared folder before any timing
        data_dir(args.work, shape, ARMS[name])
    print("timing each arm (AVX2 kernels, fp32, one thread, one arm at a time)", flush=True)
    per_step = timings(args, names, args.work / "timings.json")
    budget_s = args.budget_steps * per_step["reference"]["run"]
    print(f"budget: {args.budget_steps} reference steps = {budget_s:.0f} s on the AVX2 core", flush=True)
    train_all(args, names, per_step, budget_s)
    results = json.loads(out.read_text()) if out.exists() else {"arms": {}}
    results.update({"shape": args.shape, "shape_settings": shape, "budget_steps": args.budget_steps,
                    "budget_seconds": round(budget_s, 1), "machine": machine(), "seed": args.seed})
    for name in names:
        if name not in results["arms"]:
            r = score_arm(name, args.work, shape, per_step[name])
            r["s_per_step"] = per_step[name]
            r["steps"] = arm_steps(budget_s, per_step[name], ARMS[name])
            r["changes"] = {k: v for k, v in ARMS[name].items() if k not in ("shapes", "round")}
            results["arms"][name] = r
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=1))
            print(f"  scored {name}: final MLM {r['final_mlm']}, probe-4 {r['probe']['4']['mean']}", flush=True)
    plot(results, out.with_suffix(".png"))
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
