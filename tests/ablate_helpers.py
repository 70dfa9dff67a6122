"""What the `bertkit ablate` tests share: a tiny corpus and task data folder, the command at the
tiny scale, and the finished cells' records."""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.cli import main
from finetune_helpers import write_conll, write_mrpc, write_squad, write_sst2, write_stsb


def write_inputs(root: Path, pretraining_data: Path) -> dict[str, Path]:
    """A corpus (the pretraining tests' synthetic text plus task-like sentences) and a data
    folder in ../shared/data's layout holding tiny MRPC, SST-2, STS-B, SQuAD and CoNLL files."""
    data = root / "data"
    for folder in ("glue/MRPC", "glue/SST-2", "glue/STS-B", "squad", "ner/conll2003"):
        (data / folder).mkdir(parents=True)
    write_mrpc(data / "glue/MRPC/train.tsv", 24, 0)
    write_mrpc(data / "glue/MRPC/dev.tsv", 8, 1)
    write_sst2(data / "glue/SST-2/train.tsv", 24, 0)
    write_sst2(data / "glue/SST-2/dev.tsv", 8, 1)
    write_stsb(data / "glue/STS-B/train.tsv", 24, 0)
    write_stsb(data / "glue/STS-B/dev.tsv", 8, 1)
    write_squad(data / "squad/dev-v1.1.json", 3, 0)
    write_conll(data / "ner/conll2003/train.txt", 24, 0)
    write_conll(data / "ner/conll2003/dev.txt", 8, 1)
    text = (pretraining_data / "corpus.txt").read_text(encoding="utf-8")
    extra = "\n\n".join("the movie was very good . john was in paris river .\nthe film was a bad show ."
                        for _ in range(6))
    (root / "corpus.txt").write_text(text + "\n\n" + extra + "\n", encoding="utf-8")
    return {"corpus": root / "corpus.txt", "data": data}


def ablate(inputs, out: Path, *extra: str) -> int:
    return main(["ablate", "--corpus", str(inputs["corpus"]), "--data-dir", str(inputs["data"]), "--out", str(out),
                 "--scale", "tiny", *extra])


def records(out: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["id"]: json.loads(p.read_text()) for p in (out / "work" / "done").glob("*.json")}


def marker_times(out: Path) -> dict[str, int]:
    """cell id -> its record's modification time: a cell run again writes a new one."""
    return {json.loads(p.read_text())["id"]: p.stat().st_mtime_ns for p in (out / "work" / "done").glob("*.json")}
