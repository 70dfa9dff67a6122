"""The fixed task subsets every variant of an ablation fine-tunes on, written once as files.

From the shared data folder (`../shared/data`: GLUE's MRPC, SST-2 and STS-B, SQuAD v1.1 dev, CoNLL-2003),
a scale's `TaskSize` keeps a random subset (seed 0) of the training rows or sentences, in their
file order, and of the dev set when it says so. SQuAD has only its dev file offline: its
articles are shuffled (seed 0), the first K train and the next D are evaluated on, as
`finetune --task squad --split-articles` does. The subsets are written in the official layouts,
so the ordinary readers read them. `majority_baseline` scores the dev subset's most frequent
label (for CoNLL, every word tagged O: F1 0 and its token accuracy; for SQuAD, an empty answer; for
STS-B, a regression, the mean score for every pair: no correlation, Spearman 0),
what a fine-tuned model must clearly beat before its numbers can separate pretrainings.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from bertkit.errors import UserError

SOURCES = {"mrpc": ("glue/MRPC/train.tsv", "glue/MRPC/dev.tsv"), "sst2": ("glue/SST-2/train.tsv", "glue/SST-2/dev.tsv"),
           "squad": ("squad/dev-v1.1.json", None), "conll": ("ner/conll2003/train.txt", "ner/conll2003/dev.txt"),
           "stsb": ("glue/STS-B/train.tsv", "glue/STS-B/dev.tsv")}
LABEL_COLUMN = {"mrpc": 0, "sst2": -1}  # where a TSV row's label is
SCORE_COLUMN = {"stsb": -1}  # where a regression TSV row's score is
TASK_FILES = {"mrpc": ("train.tsv", "dev.tsv"), "sst2": ("train.tsv", "dev.tsv"), "squad": ("train.json", "dev.json"),
              "conll": ("train.txt", "dev.txt"), "stsb": ("train.tsv", "dev.tsv")}


def source_files(task: str, data_dir: Path) -> list[Path]:
    """The shared files a task reads; a UserError naming the first that is missing."""
    paths = [Path(data_dir) / p for p in SOURCES[task] if p]
    for p in paths:
        if not p.is_file():
            raise UserError(f"no such file (task {task} needs it; see --data-dir)", p)
    return paths


def _sample(items: list, n: int | None) -> list:
    """n items at random (seed 0), kept in their original order; all when n is None or too large."""
    if n is None or n >= len(items):
        return items
    keep = sorted(random.Random(0).sample(range(len(items)), n))
    return [items[i] for i in keep]


def _table(src: Path, dest: Path, n: int | None) -> int:
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    rows = _sample([line for line in lines[1:] if line.strip()], n)
    dest.write_text(lines[0] + "".join(rows), encoding="utf-8")
    return len(rows)


def _conll(src: Path, dest: Path, n: int | None) -> int:
    blocks, block = [], []
    for line in src.read_text(encoding="utf-8").splitlines():
        if line.strip():
            if not line.startswith("-DOCSTART-"):
                block.append(line)
        elif block:
            blocks.append(block)
            block = []
    if block:
        blocks.append(block)
    chosen = _sample(blocks, n)
    dest.write_text("".join("\n".join(b) + "\n\n" for b in chosen), encoding="utf-8")
    return len(chosen)


def _squad(src: Path, out: Path, train: int, dev: int | None) -> dict:
    data = json.loads(src.read_text(encoding="utf-8"))
    articles = list(data["data"])
    order = list(range(len(articles)))
    random.Random(0).shuffle(order)
    if train >= len(articles):
        raise UserError(f"squad: {train} training articles leave none of {len(articles)} to evaluate on", src)
    chosen = {"train": order[:train], "dev": order[train : train + dev] if dev else order[train:]}
    counts = {}
    for split, indices in chosen.items():
        subset = [articles[i] for i in sorted(indices)]
        (out / f"{split}.json").write_text(json.dumps({"version": data.get("version", "1.1"), "data": subset}),
                                           encoding="utf-8")
        counts[f"{split}_articles"] = len(subset)
        counts[f"{split}_questions"] = sum(len(p["qas"]) for a in subset for p in a["paragraphs"])
    return counts


def write_task_subset(task: str, data_dir: Path, out: Path, size) -> dict:
    """Write `task`'s train and dev subsets into `out` (TASK_FILES names); their sizes."""
    paths = source_files(task, data_dir)
    if task == "squad":
        return _squad(paths[0], out, size.train, size.dev)
    write = _conll if task == "conll" else _table
    train_name, dev_name = TASK_FILES[task]
    return {"train": write(paths[0], out / train_name, size.train), "dev": write(paths[1], out / dev_name, size.dev)}


def majority_baseline(task: str, folder: Path) -> dict:
    """What predicting the dev subset's most frequent label scores, in the task's metrics (x100);
    for SQuAD, which has no labels to count, an empty answer (0); for STS-B, its mean score for every
    pair, which correlates with nothing (0)."""
    dev = Path(folder) / TASK_FILES[task][1]
    if task in LABEL_COLUMN:
        rows = dev.read_text(encoding="utf-8").splitlines()[1:]
        labels = [row.split("\t")[LABEL_COLUMN[task]].strip() for row in rows if row.strip()]
        label, count = Counter(labels).most_common(1)[0]
        return {"label": label, "accuracy": 100 * count / len(labels)}
    if task in SCORE_COLUMN:
        rows = dev.read_text(encoding="utf-8").splitlines()[1:]
        scores = [float(row.split("\t")[SCORE_COLUMN[task]]) for row in rows if row.strip()]
        return {"label": "", "mean": sum(scores) / len(scores), "spearman": 0.0, "pearson": 0.0}
    if task == "conll":
        tags = [line.split()[-1] for line in dev.read_text(encoding="utf-8").splitlines() if line.strip()]
        return {"label": "O", "f1": 0.0, "accuracy": 100 * tags.count("O") / len(tags)}
    return {"label": "", "f1": 0.0, "exact_match": 0.0}
