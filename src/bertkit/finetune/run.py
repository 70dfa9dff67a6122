"""`bertkit finetune` as one library call: files in, a fine-tuned model and its results out.

`FinetuneJob` is everything the command is asked; `run_job` reads and encodes the data, builds
the task (`prepare_job`, once: `bertkit tune` trains many times on what it returns) and runs the
fine-tuning loop, and returns results.json's content. The demo, the ablation runner and the
benchmarks call it directly; `bench/hf_finetune.py` passes transformers' model as `new_model` to
train it with the same recipe.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bertkit.errors import UserError
from bertkit.finetune.hyper import Hyper
from bertkit.finetune.registry import make_task
from bertkit.finetune.task import Prepared, Runtime, Task


@dataclass
class FinetuneJob:
    model: str  # pretrained model directory
    task: str  # a name in bertkit.finetune.registry.TASKS
    train: str
    out: str
    dev: str | None = None  # None: squad with split_articles evaluates on the held-out articles
    hyper: Hyper = field(default_factory=Hyper)
    max_seq_len: int | None = None  # default 128, squad 384
    text_columns: list[str] | None = None  # classify / regress
    label_column: str | None = None
    feature_based: bool = False  # ner: BiLSTM on frozen features
    layers: tuple[int, ...] | None = None  # feature_based: hidden states to combine
    combine: str = "concat"  # feature_based: "concat" or "sum" (or "mean") the chosen layers
    split_articles: int | None = None  # squad: train on K articles of `train`
    max_train_examples: int | None = None  # a random subset of the training examples (seed 0)
    options: dict = field(default_factory=dict)  # the task's own settings (TaskKind.options): pooling, loss, ...
    device: str = "auto"
    precision: str = "fp32"
    eval_batch_size: int = 64
    progress: bool = True
    report_to: str = "none"  # live curves: bertkit.tracking.REPORT_TO (OUT/tensorboard/seedN)


def _examples(task: Task, job: FinetuneJob) -> tuple[list, list]:
    train = task.read(job.train)
    if job.split_articles is not None:
        from bertkit.data.squad import split_articles

        train, held_out = split_articles(train, job.split_articles, seed=0)
        dev = task.read_dev(job.dev) if job.dev else held_out
    else:
        dev = task.read_dev(job.dev)
    if job.max_train_examples is not None and job.max_train_examples < len(train):
        train = random.Random(0).sample(train, job.max_train_examples)
    return train, dev


@dataclass
class JobData:
    """What a job's data became, ready for any number of trainings (`bertkit tune` runs many)."""

    task: Task
    model_dir: Path
    tokenizer: object  # bertkit.tokenizer.Tokenizer
    rt: Runtime
    train: Prepared
    dev: Prepared
    run_info: dict  # model, train, dev, args (and long_inputs_report): what results.json records
    encode_s: float  # seconds spent reading and encoding
    summary: str  # the command's first line: what was read, the model, the device


def prepare_job(job: FinetuneJob, args: dict | None = None, command: str = "finetune") -> JobData:
    """Read, check and encode the job's data once; `summary` is the first line (`bertkit COMMAND: ...`),
    for the caller to print once its own checks have passed (a mistake is the only line)."""
    from bertkit.devices import resolve_device
    from bertkit.hf import load_config
    from bertkit.tokenizer import Tokenizer

    model_dir = Path(job.model)
    config = load_config(model_dir)
    tokenizer = Tokenizer.from_pretrained(model_dir)
    rt = Runtime(resolve_device(job.device), job.precision, job.eval_batch_size, job.progress)
    task = make_task(job_settings(job), tokenizer, model_dir, rt)
    check_length(task, config, model_dir)
    t0 = time.time()
    train_examples, dev_examples = _examples(task, job)
    task.fit_labels(train_examples)
    summary = (f"bertkit {command}: {job.task} on {len(train_examples)} training / {len(dev_examples)} dev examples; "
               f"model {model_dir} ({config.num_hidden_layers} layers, hidden {config.hidden_size}); "
               f"device {rt.device}, {job.precision}")
    train = task.prepare(train_examples, train=True)
    dev = task.prepare(dev_examples)
    run_info = {"model": str(model_dir), "train": job.train, "dev": job.dev,
                "args": args if args is not None else _job_dict(job)}
    if train.long_inputs is not None and dev.long_inputs is not None:
        run_info["long_inputs_report"] = {**task.policy.settings(), "train": train.long_inputs.as_dict(),
                                          "dev": dev.long_inputs.as_dict()}
    return JobData(task, model_dir, tokenizer, rt, train, dev, run_info, time.time() - t0, summary)


def check_start(data: JobData, metric: str | None = None, new_model=None) -> tuple[object, float | None]:
    """The checks that need the model, before any output: the starting model is built once (its
    weights must be readable, the task's options must fit it) and, for `metric`, scored on dev: a
    UserError unless an evaluation reports that metric (else found only after the first epoch).
    (The model, its value of `metric`.)"""
    from bertkit.finetune.loop import seed_model

    model = seed_model(data.task, data.model_dir, 0, new_model)
    if metric is None:
        return model, None
    metrics = data.task.score(data.dev, data.task.predict(model.to(data.rt.device), data.dev, data.rt))
    value = metrics.get(metric)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        names = ", ".join(k for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        raise UserError(f"--metric-for-best {metric}: this task's evaluations report {names}")
    return model, value


def input_notes(data: JobData, log=print) -> None:
    """A note for inputs longer than the model reads: windowed or cut, training and dev."""
    train, dev = data.train, data.dev
    if "long_inputs_report" in data.run_info:
        how = {"training": "each window trained with its document's label", "dev": "predicted from all its windows"}
        for name, prepared in (("training", train), ("dev", dev)):
            if line := prepared.long_inputs.note(how[name]):
                log(f"  note: {name}: {line}")
    elif train.cut or dev.cut:
        log(f"  note: {train.cut} training and {dev.cut} dev inputs were longer than {data.task.max_seq_len} tokens "
            f"and were cut to them")


# What a resumed job may change: where and how it runs, not what it computes (its hyper-parameters
# carry their own rules: `finetune.hyper`).
CHANGEABLE = ("out", "device", "eval_batch_size", "progress", "report_to")


def resume_job_settings(job: FinetuneJob) -> dict:
    """The job's settings that `--resume` compares, besides the hyper-parameters."""
    return {k: v for k, v in _job_dict(job).items() if k not in (*CHANGEABLE, "hyper")}


def check_resume(job: FinetuneJob) -> None:
    """With --resume, before any data is read: a UserError naming each setting that differs from
    the unfinished run it would continue."""
    from bertkit.finetune.hyper import resume_settings
    from bertkit.finetune.resume import RunFolder

    if job.hyper.resume:
        RunFolder(job.out, resume_settings(job.hyper, resume_job_settings(job)), job.hyper.seeds).compare()


def run_job(job: FinetuneJob, log=print, new_model=None, args: dict | None = None) -> dict:
    """Fine-tune as `job` says; results.json's content. `args` (the command line) is recorded."""
    from bertkit.finetune.loop import finetune

    check_resume(job)
    data = prepare_job(job, args)
    hp = job.hyper
    named = hp.metric_for_best if hp.metric_for_best not in (None, data.task.main_metric) else None
    check_start(data, named, new_model)
    log(data.summary)
    steps = -(-len(data.train.features) // hp.batch_size) * hp.epochs
    log(f"  encoded in {data.encode_s:.1f}s: {len(data.train.features)} training features, "
        f"{steps} steps per seed x {len(hp.seeds)} seed(s), lr {hp.lr:g}, batch {hp.batch_size}")
    input_notes(data, log)
    return finetune(data.task, data.model_dir, data.train, data.dev, hp, data.rt, Path(job.out), data.tokenizer,
                    data.run_info, log=lambda line: log("  " + line), new_model=new_model, report_to=job.report_to,
                    settings=resume_job_settings(job))


def job_settings(job: FinetuneJob) -> dict:
    """The settings the job's task class builds itself from (`Task.from_settings`)."""
    return {"task": job.task, "max_seq_len": job.max_seq_len, "text_columns": job.text_columns,
            "label_column": job.label_column, "feature_based": job.feature_based, "layers": job.layers,
            "combine": job.combine, "classifier_dropout": job.hyper.classifier_dropout, **job.options}


def check_length(task: Task, config, model_dir: Path) -> None:
    """A task's inputs must fit the model's positions: a UserError naming --max-seq-len otherwise."""
    length = task.max_seq_len
    if length is not None and length > config.max_tokens:
        raise UserError(f"--max-seq-len {length} exceeds the model's {config.max_tokens} positions",
                        model_dir)


def _job_dict(job: FinetuneJob) -> dict:
    d = asdict(job)
    d["hyper"]["seeds"] = list(job.hyper.seeds)
    return d


def evaluate_saved(task: Task, model_dir: str | Path, data_path, rt: Runtime, int8: bool = False,
                   backend: str = "torch"):
    """(metrics, prepared data, predictions) of a fine-tuned model on a file; `int8` quantizes it (CPU);
    `backend` "onnx" runs the folder's exported graph (`bertkit export`) in ONNX Runtime instead."""
    from bertkit.hf import load_config

    check_length(task, load_config(model_dir), Path(model_dir))
    if backend == "onnx" and task.head is None:
        raise UserError("--backend onnx runs the BERT-head tasks; this model is feature-based or a bi-encoder",
                        model_dir)
    examples = task.read(data_path)
    data = task.prepare(examples)
    if backend == "onnx":
        from bertkit.export.backend import load_onnx_head

        model = load_onnx_head(model_dir, task.head, task.labels, int8)
    else:
        from bertkit.quantize import maybe_int8

        model = maybe_int8(task.load_model(Path(model_dir)).to(rt.device), int8)
    predictions = task.predict(model, data, rt)
    return task.score(data, predictions), data, predictions
