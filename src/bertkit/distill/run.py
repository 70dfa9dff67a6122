"""`bertkit distill` as one library call: a teacher directory in, a smaller student directory out.

`DistillJob` is everything the command is asked; `run_distill` builds the distillation task
(`distill.tasks`) around the teacher, makes the student (from the teacher's every k-th layer
when the widths match, `distill.student`) and trains it with the fine-tuning loop itself
(`finetune.loop.finetune`), so OUT has the same layout as `bertkit finetune`'s (model/,
results.json, predictions, plots) plus distill.json: the teacher's dev scores next to the
student's, both models' sizes and where the student came from.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from torch import nn

from bertkit.distill.losses import DistillWeights
from bertkit.errors import UserError
from bertkit.finetune.hyper import Hyper
from bertkit.finetune.loop import finetune
from bertkit.finetune.task import Runtime

SPECIAL_TASKS = ("embedding", "mlm")  # beside every fine-tuning task of finetune.registry.TASKS


@dataclass
class DistillJob:
    teacher: str  # a fine-tuned model (head tasks), any encoder (embedding), an MLM model (mlm)
    task: str  # a fine-tuning task name, "embedding" or "mlm"
    train: list[str]  # the task's training file; embedding: corpus files or folders; mlm: a prepared folder
    out: str
    dev: str | None = None  # the task's dev file; embedding: STS-B pairs; mlm: default the data's val split
    student: str | None = None  # a student directory of its own ...
    student_preset: str | None = None  # ... or a preset name or "teacher" (the teacher's shape)
    student_layers: int | None = None  # the student's depth (default: see student.student_config)
    teacher_layers: tuple[int, ...] | None = None  # 1-based teacher layers to copy (default every k-th)
    weights: DistillWeights = field(default_factory=DistillWeights)
    hyper: Hyper = field(default_factory=lambda: Hyper(epochs=3, lr=1e-4, seeds=(1,)))
    max_seq_len: int | None = None
    text_columns: list[str] | None = None
    label_column: str | None = None
    pooling: str = "mean"  # embedding
    max_train_examples: int | None = None  # a random subset (seed 0)
    device: str = "auto"
    precision: str = "fp32"
    eval_batch_size: int = 64
    progress: bool = True
    report_to: str = "none"  # live curves: bertkit.tracking.REPORT_TO (OUT/tensorboard/seedN)


def _teacher_task(job: DistillJob, rt: Runtime):
    """(the distillation task, the teacher model, the tokenizer, the student's plan)."""
    from bertkit.distill.tasks import EmbeddingDistill, HeadDistill
    from bertkit.hf import load_config
    from bertkit.tokenizer import Tokenizer

    teacher_dir = Path(job.teacher)
    tokenizer = Tokenizer.from_pretrained(teacher_dir)
    plan = plan_student(job, load_config(teacher_dir))
    cosine = plan.same_width
    if job.task == "embedding":
        if not plan.same_width:
            raise UserError(f"an embedding student must be as wide as its teacher ({plan.config.hidden_size} vs "
                            f"{load_config(teacher_dir).hidden_size}): its vectors are compared with the teacher's")
        from bertkit.model import BertModel
        from bertkit.st import model_normalizes

        teacher = BertModel.from_pretrained(teacher_dir)
        task = EmbeddingDistill(teacher, tokenizer, job.weights, rt, cosine, job.pooling, job.max_seq_len or 128,
                                model_normalizes(teacher_dir))
        return task, teacher, tokenizer, plan
    if job.task == "mlm":
        from bertkit.distill.mlm import MLMTask

        inner = MLMTask(tokenizer, job.max_seq_len)
    else:
        from bertkit.finetune.registry import task_for_model

        inner = task_for_model(job.task, teacher_dir, rt, job.max_seq_len, job.text_columns, job.label_column)
    teacher = inner.load_model(teacher_dir)
    return HeadDistill(inner, teacher, job.weights, rt, cosine), teacher, tokenizer, plan


@dataclass
class StudentPlan:
    """What the student will be, settled (and checked) before any training."""

    config: object  # BertConfig
    same_width: bool
    teacher_layers: tuple[int, ...] | None  # 1-based; None: not initialised from the teacher


def plan_student(job: DistillJob, teacher_config) -> StudentPlan:
    from bertkit.distill.student import (
        check_teacher_layers,
        every_kth_layer,
        same_width,
        student_config,
    )
    from bertkit.hf import load_config

    if job.student:
        config = load_config(job.student)
        return StudentPlan(config, same_width(config, teacher_config), None)
    config = student_config(teacher_config, job.student_preset, job.student_layers)
    if not same_width(config, teacher_config):
        if job.teacher_layers:
            raise UserError("--teacher-layers needs a student as wide as the teacher "
                            f"({config.hidden_size} vs {teacher_config.hidden_size})")
        return StudentPlan(config, False, None)
    layers = job.teacher_layers or every_kth_layer(teacher_config.num_hidden_layers, config.num_hidden_layers)
    check_teacher_layers(tuple(layers), teacher_config.num_hidden_layers, config.num_hidden_layers)
    return StudentPlan(config, True, tuple(layers))


def make_student(job: DistillJob, plan: StudentPlan, task, teacher: nn.Module) -> tuple[nn.Module, dict]:
    """The student before training, and how it was made."""
    from bertkit.distill.student import init_from_teacher, new_like

    if job.student:
        student = task.new_model(Path(job.student))
        return student, {"from": job.student, "layers": student.config.num_hidden_layers}
    student = new_like(teacher, plan.config)
    how = {"preset": job.student_preset or "teacher", "layers": plan.config.num_hidden_layers,
           "hidden_size": plan.config.hidden_size, "init": "random"}
    if plan.teacher_layers is not None:
        missing = init_from_teacher(student, teacher, plan.teacher_layers)
        how.update(init="teacher", teacher_layers=list(plan.teacher_layers), not_copied=missing)
    return student, how


def _check_tokenizers(job: DistillJob, tokenizer) -> None:
    if job.student:
        from bertkit.tokenizer import Tokenizer

        if Tokenizer.from_pretrained(job.student).fingerprint != tokenizer.fingerprint:
            raise UserError("the student's vocab.txt differs from the teacher's: distillation needs one tokenizer",
                            job.student)


def _examples(task, job: DistillJob) -> tuple[list, list]:
    train = task.read(job.train if job.task == "embedding" else job.train[0])
    dev_path = job.dev or job.train[0]  # mlm: the prepared folder's val split
    dev = task.read_dev(dev_path)
    if job.max_train_examples is not None and job.max_train_examples < len(train):
        train = random.Random(0).sample(train, job.max_train_examples)
    return train, dev


# What a resumed distillation may change (its hyper-parameters carry their own rules), and the
# flags of the settings not named --their-name.
CHANGEABLE = ("out", "device", "eval_batch_size", "progress", "report_to")
FLAGS = {"hyper.seeds": "--seed", **{f"weights.{w}": f"--{w}-weight" for w in ("soft", "hard", "cosine", "mse")}}


def _resume_settings(job: DistillJob) -> dict:
    return {k: v for k, v in _job_dict(job).items() if k not in (*CHANGEABLE, "hyper")}


def run_distill(job: DistillJob, log=print, args: dict | None = None) -> dict:
    """Distil as `job` says; results.json's content with distill.json's under "distill"."""
    from bertkit.devices import resolve_device
    from bertkit.finetune.hyper import resume_settings
    from bertkit.finetune.resume import RunFolder
    from bertkit.finetune.run import check_length

    if job.hyper.resume:  # before the teacher is read: a changed setting costs nothing
        RunFolder(job.out, resume_settings(job.hyper, _resume_settings(job)), job.hyper.seeds, FLAGS).compare()
    rt = Runtime(resolve_device(job.device), job.precision, job.eval_batch_size, job.progress)
    task, teacher, tokenizer, plan = _teacher_task(job, rt)
    _check_tokenizers(job, tokenizer)
    check_length(task, teacher.config, Path(job.teacher))
    t0 = time.time()
    train_examples, dev_examples = _examples(task, job)
    task.fit_labels(train_examples)
    train, dev = task.prepare(train_examples, train=True), task.prepare(dev_examples)
    log(f"bertkit distill: {job.task} on {len(train.features)} training / {len(dev_examples)} dev examples "
        f"(encoded in {time.time() - t0:.1f}s); teacher {job.teacher} ({teacher.config.num_hidden_layers} layers, "
        f"hidden {teacher.config.hidden_size}); device {rt.device}, {job.precision}")
    teacher_dev = task.remember_teacher(dev, rt)
    log(f"  teacher dev {task.main_metric} {teacher_dev.get(task.main_metric, float('nan')):.2f}")
    made: dict = {}

    def new_model(_task, _dir):
        student, how = make_student(job, plan, task, teacher)
        made.update(how)
        return student

    run_info = {"model": job.teacher, "train": job.train, "dev": job.dev, "distilled": True,
                "args": args if args is not None else _job_dict(job)}
    report: dict = {}

    def write_report(folder: Path, results: dict) -> None:  # distill.json, in the run before it becomes OUT
        if not made:  # a resumed run with every seed done before: how its student was made, again
            made.update(make_student(job, plan, task, teacher)[1])
        report.update(_report(job, task.main_metric, teacher_dev, made, folder, results))

    results = finetune(task, Path(job.teacher), train, dev, job.hyper, rt, Path(job.out), tokenizer, run_info,
                       log=lambda line: log("  " + line), new_model=new_model, report_to=job.report_to,
                       settings=_resume_settings(job), flags=FLAGS, before_publish=write_report)
    return {**results, "distill": report}


def _report(job: DistillJob, main: str, teacher_dev: dict, made: dict, folder: Path, results: dict) -> dict:
    """distill.json's content, written into `folder`: both models' dev scores and sizes."""
    from bertkit.hf import parameter_count, weight_shapes
    from bertkit.io import write_json

    student_dev = next(r for r in results["seeds"] if r["seed"] == results["saved_seed"])["dev"]
    report = {"task": job.task, "main_metric": main, "teacher": job.teacher, "teacher_dev": teacher_dev,
              "student_dev": student_dev, "student": made, "weights": asdict(job.weights),
              "kept": student_dev.get(main, float("nan")) / teacher_dev[main] if teacher_dev.get(main) else None,
              "teacher_parameters": parameter_count(weight_shapes(job.teacher)),
              "student_parameters": parameter_count(weight_shapes(folder / "model"))}
    write_json(folder / "distill.json", report)
    return report


def _job_dict(job: DistillJob) -> dict:
    d = asdict(job)
    d["hyper"]["seeds"] = list(job.hyper.seeds)
    return d
