"""The descendants experiment's cells at work (`descendants.py` plans them, `descendants_report.py`
reads their records): the demo corpus, its vocabulary and prepared data, the task subsets, one
pretraining, one scoring (probes, senses, the strict load in transformers), one fine-tuning.

Each executor reads only its cell's params and the folders of the cells it needs (`cell.needs`: a
scoring's first need is the pretraining it scores; a fine-tuning's second its task subset), so
calibration runs the same functions on short runs in its own folder.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

from bertkit.experiments.core import Cell, Context
from bertkit.pretrain.options import ARCHS, PAIR_FORMATS
from bertkit.pretrain.setup import TrainConfig

ARCH_NAMES = tuple(ARCHS)  # bert first: the reference every other arch is compared with
REFERENCE = "bert"
BUDGETS = ("flops", "time")  # equal FLOPs, equal wall time
TASKS = ("sst2", "conll")
# What a pretraining cell's params hold and hand to TrainConfig: the arch, shape and recipe and every option
# the arch and the recipe resolve (`OPTIONS`: so a changed default reruns the cells it changes), the
# cadences and the seed; its length is `steps` or `minutes_of` (the pretraining whose minutes it takes).
OPTIONS = ("arch", "preset", "config_overrides", "recipe", "objective", "batch_size", "lr", "warmup",
           "weight_decay", "dropout", "precision", "adam_beta2", "init", "mask_rate", "mask_rule",
           "whole_word_mask", "generator_width", "generator_layers", "embedding_sharing", "rtd_weight",
           "eval_samples")
RUN_FIELDS = (*OPTIONS, "save_every", "log_every", "seed")


def data_format(objective: str) -> str:
    """The prepared data an objective reads: sentence pairs for a pair task, else packed sequences."""
    return PAIR_FORMATS.get(objective, "packed")


def pretrain_id(arch: str, budget: str, seed: int) -> str:
    """A pretraining's cell id; BERT's equal-time run is its equal-FLOPs run."""
    return f"pretrain/{arch}/{'flops' if arch == REFERENCE else budget}/seed{seed}"


def flops_per_step(options: dict, vocab_size: int, seq_len: int) -> float:
    """Useful FLOPs of one training step of a run with these TrainConfig options, as the run's
    status line counts them (`bertkit.pretrain.report.useful_flops`)."""
    return _count(json.dumps(options, sort_keys=True), vocab_size, seq_len)


@functools.lru_cache(maxsize=32)
def _count(options: str, vocab_size: int, seq_len: int) -> float:
    """The count on the model the run would build, built on the meta device (shapes without
    weights; the global RNG, which building seeds, left as it was)."""
    import torch

    from bertkit.pretrain.build import build_model
    from bertkit.pretrain.report import useful_flops

    cfg = TrainConfig(data="", out="", steps=1, **json.loads(options))
    manifest = {"vocab_size": vocab_size, "pad_id": 0, "max_seq_len": seq_len}
    with torch.random.fork_rng(), torch.device("meta"):
        model, _ = build_model(cfg, manifest, None, torch.device("meta"))
    return float(useful_flops(model, cfg, seq_len))


def _articles(cell: Cell) -> tuple[list, list]:
    """The demo's stratified split of the BBC articles (the corpus cell's, and the probes')."""
    from bertkit.demo.corpus import bbc_articles, first_per_topic, split_articles

    articles = first_per_topic(bbc_articles(), cell.param("articles_per_topic"))
    return split_articles(articles, cell.param("test_fraction"), cell.param("split_seed"))


def _corpus(cell: Cell, ctx: Context) -> dict:
    from bertkit.demo.corpus import write_corpus
    from bertkit.io import atomic_dir

    train, test = _articles(cell)
    with atomic_dir(ctx.path(cell.id)) as tmp:
        write_corpus(tmp, train, test)
    return {"train_articles": len(train), "test_articles": len(test)}


def _vocab(cell: Cell, ctx: Context) -> dict:
    from bertkit.demo.pretraining import learn_vocabulary
    from bertkit.io import atomic_dir
    from bertkit.tokenizer import Tokenizer

    with atomic_dir(ctx.path(cell.id)) as tmp:
        learn_vocabulary(ctx.path("corpus") / "corpus", tmp, cell.param("vocab_size"))
    return {"vocab_size": len(Tokenizer.from_pretrained(ctx.path(cell.id)))}


def _data(cell: Cell, ctx: Context) -> dict:
    from bertkit.data.prepare import PrepareOptions, prepare_corpus

    options = PrepareOptions(max_seq_len=cell.param("max_seq_len"), format=cell.param("format"),
                             val_fraction=cell.param("val_fraction"), seed=cell.param("seed"), workers=1)
    manifest = prepare_corpus([ctx.path("corpus") / "corpus"], ctx.path("vocab"), ctx.path(cell.id), options)
    return {"splits": manifest.get("splits", {})}


def _tasks(cell: Cell, ctx: Context) -> dict:
    from bertkit.ablate.scales import TaskSize
    from bertkit.ablate.taskdata import majority_baseline, write_task_subset
    from bertkit.io import atomic_dir

    task = cell.param("task")
    size = TaskSize(cell.param("train"), cell.param("dev"), 1, 0.0, 0)  # only the subset's sizes are read
    with atomic_dir(ctx.path(cell.id)) as tmp:
        counts = write_task_subset(task, Path(ctx.env["data_dir"]), tmp, size)
        counts["majority"] = majority_baseline(task, tmp)
    return counts


def minutes_of(cell_id: str, ctx: Context) -> float:
    """The minutes a finished pretraining cell trained for (its loop's clock, as `--minutes` counts)."""
    from bertkit.io import read_json

    return read_json(ctx.record_file(cell_id), "a finished cell's record")["result"]["elapsed_s"] / 60


def val_accuracy(objective: str, val: dict) -> float | None:
    """The last validation's accuracy (percent) of the run's own task: masked-LM accuracy, or for
    replaced-token detection the mean of its accuracy on replaced and on original tokens."""
    if objective == "electra":
        if "replaced_accuracy" not in val:
            return None
        return 100 * (val["replaced_accuracy"] + val["original_accuracy"]) / 2
    return 100 * val["mlm_accuracy"] if "mlm_accuracy" in val else None


def _pretrain(cell: Cell, ctx: Context) -> dict:
    from bertkit.devices import resolve_device, resolve_precision
    from bertkit.experiments.runner import Stopped
    from bertkit.hf import load_config, parameter_count
    from bertkit.pretrain import pretrain
    from bertkit.weights import weight_shapes

    p = dict(cell.params)
    out = ctx.path(cell.id)
    length = {"steps": p["steps"]} if "steps" in p else {"minutes": minutes_of(p["minutes_of"], ctx)}
    cfg = TrainConfig(data=str(ctx.path(cell.needs[0])), out=str(out), **{k: p[k] for k in RUN_FIELDS}, **length,
                      eval_every=10**9, keep=1, resume=True, device=ctx.device)  # validated at step 0 and the end
    status = pretrain(cfg)
    if status != 0:
        raise Stopped(status)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    val = next((r for r in reversed(rows) if r.get("kind") == "val"), {})
    train = next((r for r in reversed(rows) if r.get("kind") == "train"), {})
    manifest = json.loads((Path(cfg.data) / "manifest.json").read_text(encoding="utf-8"))
    seq = int(manifest["max_seq_len"])
    flops = flops_per_step({k: p[k] for k in OPTIONS}, int(manifest["vocab_size"]), seq)
    model = out / "model"
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the model is in out/model; resuming is over
    return {"steps": train.get("step"), "elapsed_s": train.get("elapsed"), "train_loss": train.get("loss"),
            "val": {k: v for k, v in val.items() if isinstance(v, (int, float)) and k != "step"},
            "val_accuracy": val_accuracy(p["objective"], val),
            "precision": resolve_precision(p["precision"], resolve_device(ctx.device)),
            "flops_per_step": flops, "flops_per_token": flops / (p["batch_size"] * seq),
            "parameters": parameter_count(weight_shapes(model), load_config(model).model_type),
            **({"minutes": length["minutes"]} if "minutes" in length else {})}


def transformers_check(run_dir: Path) -> dict:
    """Whether the run's model (and ELECTRA-style runs' generator) load strictly, offline, in the
    transformers class of their family that config.json names: no missing, unexpected or
    mismatched weights."""
    import transformers

    verdicts = {}
    for folder in ("model", "generator"):
        path = Path(run_dir) / folder
        if not path.is_dir():
            continue
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        name = config["architectures"][0]
        cls = getattr(transformers, name)
        _, info = cls.from_pretrained(path, output_loading_info=True, local_files_only=True)
        problems = {k: sorted(map(str, v)) for k, v in info.items() if v}
        family = cls.config_class.model_type == config["model_type"]
        verdicts[folder] = {"class": name, "model_type": config["model_type"], "strict": not problems and family,
                            **({"problems": problems} if problems else {})}
    return {"loads_in_transformers": bool(verdicts) and all(v["strict"] for v in verdicts.values()),
            "transformers": verdicts}


def _score(cell: Cell, ctx: Context) -> dict:
    from bertkit.embed import load_encoder

    run = ctx.path(cell.needs[0])
    check = transformers_check(run)
    return {**probe_scores(*load_encoder(run / "model"), cell), **check}


def probe_scores(model, tokenizer, cell: Cell) -> dict:
    """The demo's topic probe (frozen mean-pooled features at each labelled budget) and sense probe
    of one encoder, on the BBC split a scoring cell's params name (`articles_per_topic`,
    `test_fraction`, `split_seed`, `budgets`, `draws`, `probe_seed`, `max_len`)."""
    import numpy as np

    from bertkit.demo.corpus import TOPICS
    from bertkit.demo.labels import article_features, label_budget_table
    from bertkit.demo.senses import compare_senses, word_vectors

    train, test = _articles(cell)
    train_y, test_y = (np.array([TOPICS.index(t) for t, _, _ in rows]) for rows in (train, test))
    features = tuple(article_features(model, tokenizer, [t for _, _, t in rows], cell.param("max_len"))
                     for rows in (train, test))
    rows = label_budget_table({"model": features}, train_y, test_y, tuple(cell.param("budgets")),
                              cell.param("draws"), cell.param("probe_seed"))
    senses = compare_senses({"model": word_vectors(model, tokenizer)})
    keep = ("within", "across", "separation", "neighbours_same_sense")
    return {"probe": {str(r["per_topic"]): r["accuracy"]["model"] for r in rows},
            "senses": {w: {k: round(float(v), 4) for k, v in block["models"]["model"].items() if k in keep}
                       for w, block in senses.items()}}


def _finetune(cell: Cell, ctx: Context) -> dict:
    from bertkit.ablate.taskdata import TASK_FILES
    from bertkit.devices import resolve_device, resolve_precision
    from bertkit.finetune.hyper import Hyper
    from bertkit.finetune.run import FinetuneJob, run_job

    p = dict(cell.params)
    files = ctx.path(cell.needs[1])
    train, dev = (str(files / name) for name in TASK_FILES[p["task"]])
    out = ctx.path(cell.id)
    shutil.rmtree(out, ignore_errors=True)  # what an attempt without a record left
    hyper = Hyper(epochs=p["epochs"], lr=p["lr"], batch_size=p["batch_size"], seeds=(p["seed"],),
                  group_by_length=True, save_every=0)
    precision = resolve_precision(p["precision"], resolve_device(ctx.device))
    job = FinetuneJob(model=str(ctx.path(cell.needs[0]) / "model"), task="ner" if p["task"] == "conll" else p["task"],
                      train=train, dev=dev, out=str(out), hyper=hyper, max_seq_len=p["max_seq_len"],
                      device=ctx.device, precision=precision, progress=False)
    results = run_job(job, log=lambda line: print(line, flush=True))
    shutil.rmtree(out / "model", ignore_errors=True)  # results.json stays; the weights are large
    seed = results["seeds"][0]
    return {"dev": {k: v for k, v in seed["dev"].items() if isinstance(v, (int, float))}, "steps": seed["steps"],
            "n_train": results["n_train"], "n_dev": results["n_dev"], "precision": precision}


EXECUTORS = {"corpus": _corpus, "vocab": _vocab, "data": _data, "tasks": _tasks, "pretrain": _pretrain,
             "score": _score, "finetune": _finetune}


def execute(cell: Cell, ctx: Context) -> dict:
    return EXECUTORS[cell.kind](cell, ctx)
