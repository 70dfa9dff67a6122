"""`objectives`: masked LM against replaced-token detection (ELECTRA) at equal wall-clock time, scored
on what users of the models care about rather than on each objective's own loss (what
`bench/pretrain_objectives.py` measured with a loop of its own).

On the demo's data and shape (BBC News, the demo's split, an 8,000-entry WordPiece, packed
128-token instances, the tiny preset), each run pretrains for the same minutes on one thread:
- `mlm`: `--recipe budget` (masked LM on packed sequences); `mlm30`: the same with 30% masked;
- `electra`: `--recipe budget --objective electra` (a quarter-width generator fills the masked
  positions, the discriminator learns from every token), at the lr its tuning cells chose: a short
  run at each of `electra_lrs`, the best by the mean of the two smallest probes' accuracies;
- `transformers`: transformers' `Trainer` on `BertForMaskedLM` with the budget recipe's settings and
  starting weights (`trainer_mlm.run_transformers`, as bench/pretrain_recipes.py runs it).
Every model (ELECTRA: its discriminator), and a random model of the same shape (the floor), is
scored alike: the demo's topic probe from 4 / 16 / 64 / all labelled articles per topic and its
senses of "court" and "bank" (`descendants_cells.probe_scores`), and SST-2 fine-tuned on a fixed
8,000-sentence subset, one cell per seed (`descendants_cells`' fine-tuning), scored on the dev set.
Goals (issue 32): ELECTRA at least 5 points above MLM on the 4- and 16-label probes and 2 on SST-2
(median); every bertkit model above the transformers run on every measure. The bench ran its
pretrainings side by side, all at once; here two processes share the folder, two runs at a time,
one thread each. The report is `objectives_report.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from bertkit.ablate.scales import TaskSize
from bertkit.experiments.calibrate import line as _line
from bertkit.experiments.calibrate import timed as _timed
from bertkit.experiments.core import Cell, Context, Experiment, shared_data
from bertkit.experiments.descendants import finetune_units
from bertkit.experiments.descendants_cells import EXECUTORS as SHARED

RUNS = ("mlm", "mlm30", "electra", "transformers")
RUN_OPTIONS = {"mlm": {}, "mlm30": {"mask_rate": 0.3}, "electra": {"objective": "electra"}}
SETUP = ("corpus", "vocab", "data", "tasks")


@dataclass(frozen=True)
class Scale:
    articles_per_topic: int | None  # the BBC corpus's first N articles per topic (None: all 2,225)
    vocab_size: int
    max_seq_len: int
    minutes: float  # each pretraining's wall-clock budget
    electra_lrs: tuple[float, ...]  # ELECTRA's peak lrs tried on short runs (one: no tuning)
    tune_steps: int  # steps of each tuning run
    sst2: TaskSize  # SST-2's subset and fine-tuning recipe (every model alike)
    seeds: tuple[int, ...]  # SST-2 fine-tuning seeds
    probe_budgets: tuple[int, ...]
    probe_draws: int
    probe_tokens: int
    cal_steps: tuple[int, int]  # the two pretraining lengths calibration times
    cal_examples: tuple[int, int]  # the two SST-2 subset sizes calibration times
    shape: tuple = ()  # overrides of the tiny preset's shape, as (name, value) pairs
    val_fraction: float = 0.02


SCALES = {
    "cpu": Scale(None, 8000, 128, 9.0, (1e-4, 3e-4, 1e-3, 3e-3), 400, TaskSize(8000, 872, 3, 1e-4, 64, 32), (1, 2, 3),
                 (4, 16, 64), 5, 128, (10, 40), (48, 144)),
    # CI: four articles per topic, a 32-wide model, seconds; the numbers mean nothing
    "tiny": Scale(4, 300, 32, 0.05, (1e-4, 1e-3), 3, TaskSize(16, 8, 1, 1e-3, 32, 8), (1,), (1, 2), 2, 32, (1, 3),
                  (4, 8), (("hidden_size", 32), ("num_attention_heads", 2), ("intermediate_size", 37)), 0.1),
}


def train_options(s: Scale, run: str) -> dict:
    """What a bertkit pretraining cell hands to TrainConfig (its lr and length apart)."""
    return {"preset": "tiny", "recipe": "budget", "config_overrides": dict(s.shape), "seed": 0,
            **RUN_OPTIONS.get(run, {})}


def _probe_params(s: Scale) -> tuple:
    return (("articles_per_topic", s.articles_per_topic), ("test_fraction", 0.2), ("split_seed", 0),
            ("budgets", s.probe_budgets), ("draws", s.probe_draws), ("probe_seed", 0), ("max_len", s.probe_tokens))


def _setup_cells(s: Scale) -> list[Cell]:
    size = s.sst2
    return [Cell("corpus", "corpus", (("articles_per_topic", s.articles_per_topic), ("test_fraction", 0.2),
                                      ("split_seed", 0)), keeps=True),
            Cell("vocab", "vocab", (("vocab_size", s.vocab_size),), ("corpus",), keeps=True),
            Cell("data/packed", "data", (("format", "packed"), ("max_seq_len", s.max_seq_len),
                                         ("val_fraction", s.val_fraction), ("seed", 0)), ("corpus", "vocab"),
                 keeps=True),
            Cell("tasks/sst2", "tasks", (("task", "sst2"), ("train", size.train), ("dev", size.dev)), keeps=True)]


def _pretrain_cells(s: Scale, run: str) -> list[Cell]:
    """A run's pretraining (ELECTRA's after its tuning cells), its probes and its SST-2 seeds."""
    cells, lr = [], ()
    if run == "electra" and len(s.electra_lrs) > 1:
        for value in s.electra_lrs:
            params = (("options", train_options(s, run)), ("lr", value), ("steps", s.tune_steps), *_probe_params(s))
            cells.append(Cell(f"tune/electra/lr{value:g}", "tune", params, ("data/packed",), rate="pretrain-steps",
                              units=float(s.tune_steps)))
        lr = (("lr_from", tuple(c.id for c in cells)),)
    elif run == "electra":
        lr = (("lr", s.electra_lrs[0]),)
    tunes = tuple(c.id for c in cells)
    needs = ("data/packed", "vocab") if run == "transformers" else ("data/packed", *tunes)
    cells.append(Cell(f"pretrain/{run}", "trainer" if run == "transformers" else "pretrain",
                      (("options", train_options(s, run)), *lr, ("minutes", s.minutes)), needs,
                      rate="pretrain-minutes", units=60.0 * s.minutes, keeps=True, records_only=tunes))
    return [*cells, *_scoring_cells(s, run)]


def _scoring_cells(s: Scale, run: str) -> list[Cell]:
    model = ("data/packed", "vocab") if run == "random" else (f"pretrain/{run}",)
    cells = [Cell(f"score/{run}", "score", (*_probe_params(s), ("shape", dict(s.shape))), model, rate="score")]
    if run == "random":
        return cells
    size = s.sst2
    for seed in s.seeds:
        ft = (("task", "sst2"), ("train", size.train), ("dev", size.dev), ("epochs", size.epochs), ("lr", size.lr),
              ("batch_size", size.batch_size), ("max_seq_len", size.max_seq_len), ("seed", seed),
              ("precision", "auto"))
        cells.append(Cell(f"finetune/{run}/seed{seed}", "finetune", ft, (f"pretrain/{run}", "tasks/sst2"),
                          rate="finetune/sst2", units=finetune_units(size.train, size.dev, size.epochs)))
    return cells


@functools.lru_cache(maxsize=4)
def plan_of(scale: str) -> tuple[Cell, ...]:
    """Setup, the random floor's probes, then run by run: its pretraining, probes and SST-2 seeds."""
    s = SCALES[scale]
    return (*_setup_cells(s), *_scoring_cells(s, "random"), *(c for r in RUNS for c in _pretrain_cells(s, r)))


def plan(scale: str, env: dict) -> list[Cell]:
    return list(plan_of(scale))


# ---- the cells at work (setup and fine-tuning: the descendants experiment's own executors) ----
def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]


def _bertkit_run(cell: Cell, ctx: Context, lr: float | None, **length) -> tuple[Path, object]:
    """A bertkit pretraining of the cell's options into its folder (started again if it was stopped)."""
    from bertkit.experiments.runner import Stopped
    from bertkit.pretrain import TrainConfig, pretrain

    out = ctx.path(cell.id)
    options = {**cell.param("options"), **({"lr": lr} if lr is not None else {})}
    cfg = TrainConfig(data=str(ctx.path("data/packed")), out=str(out), log_every=100, overwrite=True,
                      device=ctx.device, **options, **length)
    status = pretrain(cfg)
    if status != 0:
        raise Stopped(status)
    return out, cfg


def tuned_lr(records: list[dict], budgets: tuple) -> float:
    """The tuning run whose two smallest probes are best (their mean accuracies summed)."""
    return max(records, key=lambda r: sum(r["probe"][str(b)]["mean"] for b in budgets[:2]))["lr"]


def _tune(cell: Cell, ctx: Context) -> dict:
    from bertkit.embed import load_encoder
    from bertkit.experiments.descendants_cells import probe_scores

    steps = cell.param("steps")
    out, _ = _bertkit_run(cell, ctx, cell.param("lr"), steps=steps, eval_every=steps)
    val = [r for r in _metrics(out) if r["kind"] == "val"][-1]
    probe = probe_scores(*load_encoder(out / "model"), cell)["probe"]
    shutil.rmtree(out, ignore_errors=True)  # a tuning run's model is not used again
    return {"lr": cell.param("lr"), "steps": steps, "rtd_loss": round(val["rtd_loss"], 4),
            "replaced_accuracy": round(val["replaced_accuracy"], 4), "probe": probe}


def _pretrain(cell: Cell, ctx: Context) -> dict:
    import time

    from bertkit.io import read_json

    lr = cell.param("lr")
    if cell.param("lr_from"):
        tunes = [read_json(ctx.record_file(t), "a tuning cell's record")["result"] for t in cell.param("lr_from")]
        lr = tuned_lr(tunes, SCALES[ctx.scale].probe_budgets)
    wall, cpu = time.perf_counter(), time.process_time()
    out, cfg = _bertkit_run(cell, ctx, lr, minutes=cell.param("minutes"), eval_every=10**9,
                            eval_samples=0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    last = [r for r in _metrics(out) if r["kind"] == "train"][-1]
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the model is in out/model
    return {"steps": last["step"], "elapsed_s": last["elapsed"], "last_train": last, "wall_s": round(wall, 1),
            "cpu_share": round(cpu / max(wall, 1e-9), 3),
            "hyper": {k: getattr(cfg, k) for k in ("objective", "batch_size", "lr", "warmup", "adam_beta2", "init",
                                                   "precision", "mask_rate")}}


def _trainer(cell: Cell, ctx: Context) -> dict:
    """transformers' Trainer at the budget recipe's values as a bertkit run of these options resolves them."""
    import time

    import torch

    from bertkit.devices import resolve_precision
    from bertkit.experiments.trainer_mlm import run_transformers
    from bertkit.pretrain import TrainConfig

    options, out = cell.param("options"), ctx.path(cell.id)
    shutil.rmtree(out, ignore_errors=True)
    cfg = TrainConfig(data=str(ctx.path("data/packed")), out=str(out), minutes=cell.param("minutes"), **options)
    hyper = {k: getattr(cfg, k) for k in ("batch_size", "lr", "warmup", "weight_decay", "dropout", "max_grad_norm",
                                          "adam_beta2", "init")}
    hyper["precision"] = resolve_precision(cfg.precision, torch.device("cpu"))
    wall, cpu = time.perf_counter(), time.process_time()
    r = run_transformers(ctx.path("data/packed"), ctx.path("vocab"), out / "start", out, cell.param("minutes"), hyper,
                         1, options["preset"], options["seed"], options["config_overrides"])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    shutil.copy(ctx.path("vocab") / "vocab.txt", out / "model" / "vocab.txt")  # a model directory scores alone
    return {"steps": r["steps"], "elapsed_s": r["elapsed_s"], "hyper": r["hyper"], "transformers": r["transformers"],
            "wall_s": round(wall, 1), "cpu_share": round(cpu / max(wall, 1e-9), 3)}


def _score(cell: Cell, ctx: Context) -> dict:
    """The probes of a pretrained model, or of a random model of the same shape (seed 0)."""
    import torch

    from bertkit.embed import load_encoder
    from bertkit.experiments.descendants_cells import probe_scores

    if cell.needs[0] != "data/packed":
        return probe_scores(*load_encoder(ctx.path(cell.needs[0]) / "model"), cell)
    from bertkit.model import BertModel
    from bertkit.pretrain.setup import TrainConfig, model_config
    from bertkit.tokenizer import Tokenizer

    data = ctx.path("data/packed")
    cfg = TrainConfig(data=str(data), out="", preset="tiny", recipe="budget", config_overrides=cell.param("shape"))
    torch.manual_seed(0)
    model = BertModel(model_config(cfg, json.loads((data / "manifest.json").read_text(encoding="utf-8")))).eval()
    return probe_scores(model, Tokenizer.from_pretrained(ctx.path("vocab")), cell)


EXECUTORS = {**SHARED, "tune": _tune, "pretrain": _pretrain, "trainer": _trainer, "score": _score}


def execute(cell: Cell, ctx: Context) -> dict:
    return EXECUTORS[cell.kind](cell, ctx)


# ---- calibration: short runs in work/calibration/ ----
def calibrate(scale: str, cells: list[Cell], ctx: Context) -> dict[str, tuple[float, float]]:
    """{rate: (fixed s, s per unit)} on this machine, in a folder of its own: the setup cells for
    real (their times), ELECTRA (the costlier step) at two short lengths (the difference gives
    seconds per step; a pretraining for minutes costs its seconds and that fixed cost), the probes
    of the longer one's model, and an SST-2 fine-tuning of it on two small subsets."""
    from bertkit.experiments.runner import run_cells

    s, full = SCALES[scale], {c.id: c for c in plan_of(scale)}
    cal = Context(ctx.work / "calibration", ctx.work / "calibration" / "cells", scale, ctx.env, ctx.device)
    setup = [c for c in full.values() if c.kind in SETUP]
    done = run_cells(setup, execute, cal, log=lambda line: None)
    out = {c.rate_key: (done[c.id]["time_s"], 0.0) for c in setup}
    model = dataclasses.replace(full["pretrain/electra"], id="calibration/pretrain")
    times = [_timed(lambda n=n: _bertkit_run(model, cal, s.electra_lrs[0], steps=n, eval_every=n))
             for n in s.cal_steps]
    fixed, per_step = _line(*times, *s.cal_steps)
    probe = _timed(lambda: execute(dataclasses.replace(full["score/mlm"], needs=(model.id,)), cal))
    out.update({"score": (probe, 0.0), "pretrain-steps": (fixed + probe, per_step), "pretrain-minutes": (fixed, 1.0)})
    finetune, times = full[f"finetune/mlm/seed{s.seeds[0]}"], []
    for n in s.cal_examples:
        subset = Cell(f"calibration/tasks/{n}", "tasks", (("task", "sst2"), ("train", n), ("dev", n)))
        execute(subset, cal)
        params = {**dict(finetune.params), "train": n, "dev": n, "epochs": 1}
        probe_ft = dataclasses.replace(finetune, id="calibration/finetune", params=tuple(params.items()),
                                       needs=(model.id, subset.id))
        times.append(_timed(lambda probe_ft=probe_ft: execute(probe_ft, cal)))
    out["finetune/sst2"] = _line(*times, *(finetune_units(n, n, 1) for n in s.cal_examples))
    return out


def report(cells: list[Cell], records: dict, ctx: Context):
    from bertkit.experiments.objectives_report import build_report

    return build_report(cells, records, SCALES[ctx.scale], ctx.scale)


EXPERIMENT = Experiment(
    name="objectives", title="Masked LM against replaced-token detection at equal wall-clock time",
    scales=tuple(SCALES), plan=plan, execute=execute, report=report, calibrate=calibrate,
    cost="4 pretrainings of 9 minutes (ELECTRA after 4 tuning runs of 400 steps), each probed and fine-tuned on "
         "SST-2 with 3 seeds: see docs/experiments.md",
    env_defaults={"data_dir": shared_data()})
