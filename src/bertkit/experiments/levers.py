"""`levers`: learning per CPU-minute, each pretraining lever against the budget recipe, one at a time,
at equal time on an AVX2 fp32 core (what `bench/pretrain_levers.py` measured with a loop of its own).

A lever is one change to the reference run (`ARMS`): the mask rate, the schedule, clipping, dropout,
NSP, sentence pairs against packed sequences, causal-then-masked, the position table's start,
precision, sequence length, batch, vocabulary, heads, width and depth. Every arm gets the same time on
the same core, counted on the machine the lever question is about (an AVX2 core), not on this one:
- `time/ARM`: the arm's CPU seconds per step with PyTorch, oneDNN and MKL held to AVX2 kernels in
  fp32 on one thread (bf16 arms: the CPU's own kernels), in a process of its own
  (`levers_arm.py`; unlike the bench, after a warm-up run, so first-call costs do not count).
  Arms whose step costs the reference's (only the schedule or the starting values change) have no
  timing cell: they take the reference's steps;
- `train/ARM`: `budget_steps x (reference s/step) / (the arm's s/step)` steps (causal-then-masked
  spends `ltr_share` of the time left-to-right first), checkpointed along the way, under the same
  kernels, so every arm costs the same seconds on that core whatever else this machine runs;
- `score/ARM`: every checkpoint's validation MLM accuracy at 15% (80/10/10, one fixed masking of the
  reference's validation split of the arm's vocabulary, whatever the arm trained with), the steps
  and seconds to `GOAL`, and the final model's demo probes (`descendants_cells.probe_scores`: the
  topic probe from 4 / 16 / 64 / all labelled BBC articles per topic, the senses of "court" and
  "bank").

Scales: `demo` (the default: `bertkit demo`'s data and shape, BBC News, an 8,000-entry WordPiece,
packed 128-token sequences, the tiny preset 2 x 128, masked LM; 1,300 reference steps, about ten
minutes of the demo's pretraining on a Zen 1 core), `ablation` (`bertkit ablate --scale cpu-small`'s
reference: Wikipedia shards 0-7, sentence pairs with NSP, 4 x 128, lr 1e-3) and `tiny` (CI). The
setting `arms` (comma-separated) names the arms to run instead of the scale's first round; the
second round's arms (`LATER`) run only when named. The report is `levers_report.py`.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import UserError
from bertkit.experiments.calibrate import line as _line
from bertkit.experiments.calibrate import timed as _timed
from bertkit.experiments.core import Cell, Context, Experiment, shared_data
from bertkit.experiments.levers_arm import DONE

GOAL = 0.20  # validation MLM accuracy whose steps and seconds are reported
REFERENCE = "reference"
SAME = {"same_cost": True}  # a step costs the reference's: the arm takes the reference's steps, untimed
LATER = {"round": 2}  # run when named in `arms`, not by default
# arm -> what it changes: TrainConfig options ("train"), another prepared data ("data"), model config
# overrides ("overrides"), the share of the time spent left-to-right first ("ltr_share"), a learned
# position table started at random ("random_positions"), each layer's output maps drawn smaller
# ("residual_scale"), the CPU's own kernels ("native": bf16), the scales' shapes it applies to.
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
    # second round: the first round's winners together
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
LR_FACTORS = {"half": 0.5, "double": 2.0, "x1.5": 1.5}


@dataclass(frozen=True)
class Scale:
    shape: str  # "demo" or "ablation": which arms apply (`ARMS[...]["shapes"]`)
    corpus: str  # "bbc" (the demo's training articles) or "wikipedia" (shards 0-7 of the shared data)
    vocab_size: int
    data: str  # the reference's prepared data: FORMAT + tokens per instance ("packed128", "nsp128")
    overrides: dict  # the reference's shape over the tiny preset
    train: dict  # the reference's options over the budget recipe (objective, lr)
    budget_steps: int  # the budget, in reference steps
    time_steps: tuple[int, int]  # the two lengths an arm is timed at (their difference gives s/step)
    save_min: int  # steps between checkpoints at least (else 20 per phase)
    arms: tuple[str, ...] | None = None  # None: every first-round arm of the shape
    articles_per_topic: int | None = None  # the BBC corpus's first N articles per topic (None: all)
    val_fraction: float = 0.02
    probe_budgets: tuple[int, ...] = (4, 16, 64)
    probe_draws: int = 5
    probe_tokens: int = 128
    seed: int = 0


ABLATION_SHAPE = {"num_hidden_layers": 4, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512}
SCALES = {
    "demo": Scale("demo", "bbc", 8000, "packed128", {}, {"objective": "mlm"}, 1300, (20, 80), 25),
    "ablation": Scale("ablation", "wikipedia", 8000, "nsp128", ABLATION_SHAPE, {"objective": "mlm+nsp", "lr": 1e-3},
                      1300, (20, 80), 25),
    # CI: four articles per topic, a 32-wide model, a few steps; the numbers mean nothing
    "tiny": Scale("demo", "bbc", 300, "packed32", {"hidden_size": 32, "num_attention_heads": 2,
                                                    "intermediate_size": 37}, {"objective": "mlm"}, 6, (2, 12), 2,
                  arms=("reference", "one-cycle", "causal-then-masked"), articles_per_topic=4, val_fraction=0.1,
                  probe_budgets=(1,), probe_draws=2, probe_tokens=32),
}
CAL_STEPS = {"demo": (20, 60), "ablation": (20, 60), "tiny": (2, 6)}  # the calibration's two lengths


def arms_of(s: Scale, names: str = "") -> list[str]:
    """The arms to run, the reference first: `names` (comma-separated), else the scale's."""
    chosen = [n for n in names.split(",") if n] if names else list(s.arms or (
        a for a, spec in ARMS.items() if s.shape in spec.get("shapes", (s.shape,)) and "round" not in spec))
    unknown = [a for a in chosen if a not in ARMS]
    if unknown:
        raise UserError(f"--set arms: unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    return [REFERENCE, *(a for a in chosen if a != REFERENCE)]


def data_id(s: Scale, vocab: int, name: str) -> str:
    return f"data/v{vocab}/{name}"


def split_name(name: str) -> tuple[str, int]:
    """A prepared data's name as (format, tokens per instance): "packed128" -> ("packed", 128)."""
    fmt = name.rstrip("0123456789")
    return fmt, int(name[len(fmt):])


def _seq_of(s: Scale, name: str) -> str:
    """An arm's data name at this scale: the reference's length unless the arm halves it."""
    (fmt, seq), ref_seq = split_name(name), split_name(s.data)[1]
    return f"{fmt}{ref_seq // 2 if seq == 64 else ref_seq}"  # "packed64" is half the reference's length


def arm_job(s: Scale, name: str) -> dict:
    """Everything an arm trains with (its cells' params and its process's job)."""
    arm = ARMS[name]
    options = {**s.train, **arm.get("train", {})}
    base_lr = s.train.get("lr", 3e-3)
    options["lr"] = base_lr * LR_FACTORS[options["lr"]] if options.get("lr") in LR_FACTORS else options.get("lr")
    options.setdefault("precision", "fp32")
    vocab = arm.get("vocab", s.vocab_size)
    data = data_id(s, vocab, _seq_of(s, arm.get("data", s.data)))
    return {"arm": name, "preset": "tiny", "overrides": {**s.overrides, **arm.get("overrides", {})},
            "options": {k: v for k, v in options.items() if v is not None}, "data_cell": data,
            "phases": ["ltr", "mlm"] if "ltr_share" in arm else ["run"], "ltr_share": arm.get("ltr_share"),
            "random_positions": bool(arm.get("random_positions")), "residual_scale": arm.get("residual_scale"),
            "kernels": "native" if arm.get("native") else "avx2", "seed": s.seed, "save_min": s.save_min}


def timing_id(name: str) -> str:
    """The timing cell an arm's steps come from (same-cost arms: the reference's)."""
    return f"time/{REFERENCE if ARMS[name].get('same_cost') else name}"


def _setup_cells(s: Scale, jobs: list[dict]) -> list[Cell]:
    cells = [Cell("corpus", "corpus", (("source", s.corpus), ("articles_per_topic", s.articles_per_topic),
                                       ("test_fraction", 0.2), ("split_seed", 0)), keeps=True)]
    scored = {data_id(s, int(j["data_cell"].split("/")[1][1:]), s.data) for j in jobs}  # the scorers' splits
    for data in sorted({j["data_cell"] for j in jobs} | scored):
        vocab = data.split("/")[1]
        if not any(c.id == f"vocab/{vocab}" for c in cells):
            cells.append(Cell(f"vocab/{vocab}", "vocab", (("source", s.corpus), ("vocab_size", int(vocab[1:]))),
                              ("corpus",), keeps=True))
        name = data.split("/")[2]
        fmt, seq = split_name(name)
        params = (("source", s.corpus), ("format", fmt), ("max_seq_len", seq), ("val_fraction", s.val_fraction),
                  ("seed", 0))
        cells.append(Cell(data, "data", params, ("corpus", f"vocab/{vocab}"), keeps=True))
    return cells


def _arm_cells(s: Scale, job: dict) -> list[Cell]:
    name, phases = job["arm"], len(job["phases"])
    arm = tuple((k, v) for k, v in job.items())
    cells = []
    if not ARMS[name].get("same_cost"):
        cells.append(Cell(f"time/{name}", "time", (*arm, ("time_steps", s.time_steps)), (job["data_cell"],),
                          rate="time", units=float((2 * s.time_steps[0] + s.time_steps[1]) * phases)))
    timings = tuple(dict.fromkeys((f"time/{REFERENCE}", timing_id(name))))
    train = Cell(f"train/{name}", "train", (*arm, ("budget_steps", s.budget_steps)), (job["data_cell"], *timings),
                 rate="train", units=float(s.budget_steps), keeps=True, records_only=timings)
    scorer = data_id(s, int(job["data_cell"].split("/")[1][1:]), s.data)
    probe = (("articles_per_topic", s.articles_per_topic), ("test_fraction", 0.2), ("split_seed", 0),
             ("budgets", s.probe_budgets), ("draws", s.probe_draws), ("probe_seed", 0), ("max_len", s.probe_tokens))
    score = Cell(f"score/{name}", "score", (*probe, ("goal", GOAL), ("scorer", scorer)),
                 tuple(dict.fromkeys((train.id, scorer, timing_id(name)))), rate="score", units=20.0 * phases,
                 records_only=(timing_id(name),))
    return [*cells, train, score]


@functools.lru_cache(maxsize=8)
def plan_of(scale: str, arms: str = "") -> tuple[Cell, ...]:
    """Setup, the reference's timing, then arm by arm: its timing, training and scoring (a stopped
    session leaves whole arms)."""
    s = SCALES[scale]
    jobs = [arm_job(s, a) for a in arms_of(s, arms)]
    return tuple(_setup_cells(s, jobs) + [c for j in jobs for c in _arm_cells(s, j)])


def plan(scale: str, env: dict) -> list[Cell]:
    return list(plan_of(scale, env.get("arms", "")))


# ---- the cells at work ----
def _corpus(cell: Cell, ctx: Context) -> dict:
    from bertkit.experiments.descendants_cells import EXECUTORS

    if cell.param("source") == "bbc":  # the demo's split of the BBC articles, as descendants writes it
        return EXECUTORS["corpus"](cell, ctx)
    return {"files": [p.name for p in corpus_files(cell.param("source"), ctx)]}


def corpus_files(source: str, ctx: Context) -> list[Path]:
    if source == "bbc":
        return [ctx.path("corpus") / "corpus"]
    files = sorted((Path(ctx.env["data_dir"]) / "corpus" / "wikipedia").glob("enwiki_000[0-7].txt.xz"))
    if not files:
        raise UserError(f"no Wikipedia shards enwiki_000[0-7].txt.xz under {ctx.env['data_dir']}/corpus/wikipedia")
    return files


def _vocab(cell: Cell, ctx: Context) -> dict:
    from bertkit.io import atomic_dir, expand_inputs
    from bertkit.tokenizer import Tokenizer

    files = expand_inputs(corpus_files(cell.param("source"), ctx))
    with atomic_dir(ctx.path(cell.id)) as tmp:
        Tokenizer.train(files, vocab_size=cell.param("vocab_size")).save_pretrained(tmp)
    return {"vocab_size": len(Tokenizer.from_pretrained(ctx.path(cell.id)))}


def _data(cell: Cell, ctx: Context) -> dict:
    from bertkit.data.prepare import PrepareOptions, prepare_corpus

    options = PrepareOptions(max_seq_len=cell.param("max_seq_len"), format=cell.param("format"),
                             val_fraction=cell.param("val_fraction"), seed=cell.param("seed"), workers=1)
    files = corpus_files(cell.param("source"), ctx)
    manifest = prepare_corpus(files, ctx.path(cell.needs[1]), ctx.path(cell.id), options)
    return {"splits": manifest.get("splits", {})}


def _job(cell: Cell, ctx: Context, **extra) -> dict:
    job = {k: v for k, v in cell.params_json().items() if k not in ("budget_steps",)}
    return {**job, "data": str(ctx.path(job["data_cell"])), "out": str(ctx.path(cell.id)), "steps": None,
            "time_steps": None, **extra}


def _time(cell: Cell, ctx: Context) -> dict:
    from bertkit.experiments.levers_arm import spawn

    out = ctx.path(cell.id)
    done = spawn(_job(cell, ctx, time_steps=list(cell.param("time_steps"))), ctx.work / "jobs" / f"{cell.id}.json")
    shutil.rmtree(out, ignore_errors=True)  # the timing runs' models are not used
    return {"s_per_step": done["s_per_step"], "limits": done["limits"], "wall_s": done["wall_s"]}


def per_step_of(cell_id: str, ctx: Context) -> dict[str, float]:
    """A finished timing cell's CPU seconds per step, by phase."""
    from bertkit.io import read_json

    return read_json(ctx.record_file(cell_id), "a timing cell's record")["result"]["s_per_step"]


def arm_steps(budget_s: float, per_step: dict, ltr_share: float | None) -> list[int]:
    """The steps of each phase that together cost `budget_s` on the AVX2 core: causal-then-masked
    spends `ltr_share` of the time left-to-right, the rest masked (at least one step a phase)."""
    if min(per_step.values()) <= 0:
        raise UserError(f"a timing gave {per_step} s/step (too few steps timed on a busy machine): delete its "
                        "record and run again")
    if ltr_share is not None:
        return [max(1, round(ltr_share * budget_s / per_step["ltr"])),
                max(1, round((1 - ltr_share) * budget_s / per_step["mlm"]))]
    return [max(1, round(budget_s / per_step["run"]))]


def _train(cell: Cell, ctx: Context) -> dict:
    from bertkit.experiments.levers_arm import spawn

    budget_s = cell.param("budget_steps") * per_step_of(f"time/{REFERENCE}", ctx)["run"]
    per_step = per_step_of(timing_id(cell.param("arm")), ctx)
    steps = arm_steps(budget_s, per_step, cell.param("ltr_share"))
    done = spawn(_job(cell, ctx, steps=steps), ctx.work / "jobs" / f"{cell.id}.json")
    return {"steps": steps, "budget_s": budget_s, "s_per_step": per_step, "limits": done["limits"],
            "wall_s": done["wall_s"]}


def curve(scorer, root: Path, per_step: dict) -> list[dict]:
    """(seconds on the AVX2 core, the arm's step, validation MLM accuracy at 15%) per checkpoint,
    phases one after the other (a left-to-right phase has no MLM accuracy: its own checkpoints are
    skipped, its time, every step of it, counted; the bench counted up to its last checkpoint)."""
    import json

    points, offset = [], 0.0
    for phase in sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.name != "ltr"):
        t = per_step[phase.name]
        ckpts = sorted((phase / "checkpoints").glob("step-*"))
        for ckpt in ckpts if phase.name != "ltr" else []:
            step = int(ckpt.name.split("-")[1])
            points.append({"seconds": round(offset + step * t, 1), "step": step, "mlm": round(scorer(ckpt), 4)})
        offset += json.loads((phase / DONE).read_text())["steps"] * t
    return points


def _score(cell: Cell, ctx: Context) -> dict:
    from bertkit.embed import load_encoder
    from bertkit.experiments.descendants_cells import probe_scores
    from bertkit.experiments.trainer_mlm import Scorer

    root = ctx.path(cell.needs[0])
    points = curve(Scorer(ctx.path(cell.param("scorer"))), root, per_step_of(cell.needs[-1], ctx))
    final = next(root / p / "model" for p in ("run", "mlm") if (root / p / "model").is_dir())
    reached = next((p for p in points if p["mlm"] >= cell.param("goal")), None)
    return {"curve": points, "final_mlm": points[-1]["mlm"] if points else None,
            "steps_to_goal": reached["step"] if reached else None,
            "seconds_to_goal": reached["seconds"] if reached else None, **probe_scores(*load_encoder(final), cell)}


EXECUTORS = {"corpus": _corpus, "vocab": _vocab, "data": _data, "time": _time, "train": _train, "score": _score}


def execute(cell: Cell, ctx: Context) -> dict:
    return EXECUTORS[cell.kind](cell, ctx)


# ---- calibration: the reference arm, short, in work/calibration/ ----
def calibrate(scale: str, cells: list[Cell], ctx: Context) -> dict[str, tuple[float, float]]:
    """{rate: (fixed s, s per unit)} on this machine, in a folder of its own: the corpus, the
    reference's vocabulary and data for real (each kind's time), then the reference trained in its
    own process under the AVX2 limits at two short lengths (the difference gives seconds per step:
    a training's rate per reference step, and a timing's per step timed), and a scoring of that
    model (the probes fixed, one validation pass per checkpoint)."""
    from bertkit.embed import load_encoder
    from bertkit.experiments.descendants_cells import probe_scores
    from bertkit.experiments.levers_arm import spawn
    from bertkit.experiments.runner import run_cells
    from bertkit.experiments.trainer_mlm import Scorer

    full = plan_of(scale)
    reference = next(c for c in full if c.id == f"train/{REFERENCE}")
    cal = Context(ctx.work / "calibration", ctx.work / "calibration" / "cells", scale, ctx.env, ctx.device)
    setup = [c for c in full if c.id in ("corpus", f"vocab/v{SCALES[scale].vocab_size}", reference.needs[0])]
    done = run_cells(setup, execute, cal, log=lambda line: None)
    out = {c.kind: (done[c.id]["time_s"], 0.0) for c in setup}
    model = cal.path("calibration/reference")
    times = []
    for n in CAL_STEPS[scale]:
        shutil.rmtree(model, ignore_errors=True)
        job = {**_job(reference, cal, steps=[n]), "out": str(model), "save_min": 10**9}
        times.append(_timed(lambda job=job: spawn(job, cal.work / "jobs" / "calibration.json")))
    fixed, per_step = _line(*times, *CAL_STEPS[scale])
    out["train"], out["time"] = (fixed, per_step), (2 * fixed, per_step)  # a timing: two runs a phase
    score = next(c for c in full if c.id == f"score/{REFERENCE}")
    scorer = Scorer(cal.path(reference.needs[0]))
    out["score"] = (_timed(lambda: probe_scores(*load_encoder(model / "run" / "model"), score)),
                    _timed(lambda: scorer(model / "run" / "model")))
    return out


def report(cells: list[Cell], records: dict, ctx: Context):
    from bertkit.experiments.levers_report import build_report

    return build_report(cells, records, SCALES[ctx.scale], ctx.scale, GOAL)


EXPERIMENT = Experiment(
    name="levers", title="Learning per CPU-minute: each pretraining lever at equal time on an AVX2 fp32 core",
    scales=tuple(SCALES), plan=plan, execute=execute, report=report, calibrate=calibrate,
    cost="21 first-round arms on the demo's shape, each timed (AVX2, fp32, one thread), trained for 1,300 "
         "reference steps' worth of that time and scored at every checkpoint: see docs/experiments.md",
    env_defaults={"arms": "", "data_dir": shared_data()})
