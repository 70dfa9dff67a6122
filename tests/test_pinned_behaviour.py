"""Numbers pinned before a refactoring: the same seed must keep giving the same results.

The expected values in tests/expected/ were written by this file (BERTKIT_WRITE_EXPECTED=1) from
the code as it stood before the package was restructured (issue 10), so these tests show that
the restructuring changed no number: a tiny model's first 20 pretraining losses, and the dev
metrics and per-step losses of one GLUE fine-tune and one NER fine-tune. Tolerances allow for a
different CPU's float rounding only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bertkit.cli import main as cli
from finetune_helpers import write_conll, write_sst2
from pretrain_helpers import tiny_args

EXPECTED = Path(__file__).parent / "expected"
WRITE = os.environ.get("BERTKIT_WRITE_EXPECTED") == "1"


def _check(name: str, got: dict) -> None:
    path = EXPECTED / f"{name}.json"
    if WRITE:
        path.write_text(json.dumps(got, indent=1) + "\n")
        return
    want = json.loads(path.read_text())
    assert want.keys() == got.keys()
    for key in want:
        w, g = want[key], got[key]
        if isinstance(w, list):
            assert len(w) == len(g), key
            worst = max((abs(a - b) / max(abs(a), 1e-3) for a, b in zip(w, g)), default=0.0)
            assert worst < 1e-3, f"{key}: largest relative difference {worst:.2e}\n want {w}\n got  {g}"
        else:
            assert g == pytest.approx(w, rel=1e-3, abs=1e-3), key


def test_first_20_pretraining_losses_match_the_stored_curve(pretraining_data, tmp_path):
    out = tmp_path / "run"
    args = tiny_args(pretraining_data / "nsp", out, "--steps", "20", "--log-every", "1", "--eval-every", "1000")
    assert cli(args) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 21))
    _check("pretrain_tiny_20_losses", {"loss": [r["loss"] for r in train],
                                       "mlm_loss": [r["mlm_loss"] for r in train],
                                       "nsp_loss": [r["nsp_loss"] for r in train]})


def _finetune(tiny_dir: Path, out: Path, task: str, train: Path, dev: Path, *extra: str) -> dict:
    code = cli([str(a) for a in ("finetune", "--model", tiny_dir, "--task", task, "--train", train, "--dev", dev,
                                 "--out", out, "--batch-size", "8", "--seeds", "1", "--no-progress", *extra)])
    assert code == 0
    run = json.loads((out / "results.json").read_text())["seeds"][0]
    metrics = {f"epoch{e['epoch']}_{k}": v for e in run["epochs"] for k, v in e.items()
               if k != "epoch" and isinstance(v, (int, float))}
    return {"train_loss": run["train_loss"], **metrics}


def test_glue_fine_tune_gives_the_stored_metrics(tiny_dir, tmp_path):
    write_sst2(tmp_path / "train.tsv", 40, 0)
    write_sst2(tmp_path / "dev.tsv", 20, 1)
    got = _finetune(tiny_dir, tmp_path / "out", "sst2", tmp_path / "train.tsv", tmp_path / "dev.tsv",
                    "--epochs", "20", "--lr", "3e-3", "--warmup", "0")
    _check("sst2_tiny_seed1", got)


def test_ner_fine_tune_gives_the_stored_metrics(tiny_dir, tmp_path):
    write_conll(tmp_path / "train.txt", 40, 0)
    write_conll(tmp_path / "dev.txt", 13, 1)
    got = _finetune(tiny_dir, tmp_path / "out", "ner", tmp_path / "train.txt", tmp_path / "dev.txt",
                    "--epochs", "6", "--lr", "3e-3")
    _check("ner_tiny_seed1", got)
