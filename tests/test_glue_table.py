"""bench/glue_table.py: the bertkit-vs-Trainer table and its goal check, from fixture runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import glue_table


def _write(root: Path, task: str, pipeline: str, seed: int, value: float, time_s: float) -> None:
    epochs = [{"epoch": 1, "accuracy": value - 1, "train_loss": 0.9},
              {"epoch": 2, "accuracy": value, "train_loss": 0.5 + seed / 100}]
    run = {"seed": seed, "dev": {"accuracy": value}, "epochs": epochs, "time_s": time_s}
    path = glue_table.run_path(root, task, pipeline, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"main_metric": "accuracy", "seeds": [run]}))


def test_goal_check_and_rendering(tmp_path):
    seeds = [1, 2, 3]
    for s, (b, t) in zip(seeds, [(60, 62), (64, 63), (62, 61)]):
        _write(tmp_path, "rte", "bertkit", s, b, 100 + s)  # bertkit median 62, std 2; trainer median 62, std 1
        _write(tmp_path, "rte", "trainer", s, t, 200)
    for s, (b, t) in zip(seeds, [(50, 70), (51, 71), (52, 72)]):
        _write(tmp_path, "mrpc", "bertkit", s, b, 300)  # far below, and slower
        _write(tmp_path, "mrpc", "trainer", s, t, 200)
    _write(tmp_path, "stsb", "bertkit", 1, 80, 10)  # one run only
    summary = glue_table.summarize(tmp_path, ("rte", "mrpc", "stsb", "cola"), seeds)
    rte, mrpc, stsb, cola = (summary[t] for t in ("rte", "mrpc", "stsb", "cola"))
    assert rte["complete"] and rte["bertkit"]["median"] == 62 and rte["bertkit"]["std"] == pytest.approx(2)
    assert rte["margin"] == pytest.approx(1) and rte["quality_ok"] and rte["time_ok"]
    assert rte["bertkit"]["time_s"] == 102
    assert mrpc["complete"] and not mrpc["quality_ok"] and not mrpc["time_ok"]
    assert not stsb["complete"] and stsb["quality_ok"] is None and stsb["trainer"] is None
    assert cola["bertkit"] is None and not cola["complete"]
    table = glue_table.render(summary)
    lines = table.splitlines()
    assert lines[2] == ("| RTE | accuracy | bertkit | 62.00 | 2.00 | 60.00 | 64.00 | 102 | 0.5200 | "
                        "quality yes (>= 61.00); time yes (Trainer/bertkit 1.96x per pair) |")
    assert rte["trainer"]["train_loss"] == pytest.approx(0.52) and lines[3].endswith("| 200 | 0.5200 | |")
    assert rte["time_ratio"] == pytest.approx(200 / 102) and mrpc["time_ratio"] == pytest.approx(2 / 3)
    assert "quality **no** (>= 70.50); time **no** (Trainer/bertkit 0.67x per pair)" in lines[4]
    assert "incomplete (1/3 bertkit, 0/3 Trainer seeds)" in lines[6]
    assert "incomplete (0/3 bertkit, 0/3 Trainer seeds)" in lines[8]
    readme = f"intro\n{glue_table.START}\nold\n{glue_table.END}\nrest\n"
    new = glue_table.replace_section(readme, table)
    assert new == f"intro\n{glue_table.START}\n{table}{glue_table.END}\nrest\n"
    assert glue_table.replace_section(new, table) == new
    glue_table.plot(summary, tmp_path / "table.png")
    assert (tmp_path / "table.png").stat().st_size > 1000


def test_a_run_limited_to_some_tasks_keeps_every_tasks_rows(tmp_path):
    import glue_vs_trainer

    _write(tmp_path / "runs", "rte", "bertkit", 1, 61, 100)
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{glue_table.START}\nold\n{glue_table.END}\n")
    assert glue_vs_trainer.main(["--render-only", "--tasks", "mrpc", "--model", "m", "--glue", "g", "--seeds", "1",
                                 "--results", str(tmp_path / "runs"), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert all(f"| {name} |" in text for name in ("MRPC", "RTE", "STS-B", "CoLA")), text
    assert "| RTE | accuracy | bertkit | 61.00 |" in text


def test_stop_at_earlier_than_now_means_tomorrow_not_at_once():
    import datetime as dt

    import glue_vs_trainer

    late = dt.datetime(2026, 12, 3, 22, 20, tzinfo=dt.timezone.utc)
    assert glue_vs_trainer.deadline("00:40", late) == dt.datetime(2026, 12, 4, 0, 40, tzinfo=dt.timezone.utc)
    assert glue_vs_trainer.deadline("23:05", late) == dt.datetime(2026, 12, 3, 23, 5, tzinfo=dt.timezone.utc)
    assert glue_vs_trainer.deadline(None, late) is None


def test_the_script_summarizes_a_range_of_seeds_of_one_task(tmp_path, capsys):
    for seed in range(1, 11):
        _write(tmp_path, "rte", "bertkit", seed, 50 + seed, 100)
        _write(tmp_path, "rte", "trainer", seed, 60, 200)
    _write(tmp_path, "mrpc", "bertkit", 1, 80, 10)  # another task: not asked for, not shown
    assert glue_table.parse_seeds("1-3,7") == [1, 2, 3, 7]
    glue_table.main(["--results", str(tmp_path), "--tasks", "rte", "--seeds", "1-10",
                     "--json", str(tmp_path / "rte-10.json")])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and lines[2].startswith("| RTE | accuracy | bertkit | 55.50 |")  # median of 51..60
    assert lines[4].startswith("RTE: Trainer - bertkit = +4.50 (median), +4.50 (mean); permutation p 0.00")
    assert "by chance alone (a pipeline vs itself): Trainer 0%" in lines[5]  # ten equal values never miss
    summary = json.loads((tmp_path / "rte-10.json").read_text())
    assert list(summary) == ["rte"] and summary["rte"]["bertkit"]["n"] == 10 and summary["rte"]["complete"]
    assert (tmp_path / "rte-10.png").stat().st_size > 1000


def test_adam_eps_reaches_both_pipelines_and_only_the_chosen_pipelines_run(tmp_path, monkeypatch):
    import glue_vs_trainer

    args = glue_vs_trainer.parse_args(["--model", "m", "--glue", "g", "--adam-eps", "1e-6"])
    cmds = glue_vs_trainer.commands(args, "rte", 3, tmp_path)
    for name in ("bertkit", "trainer"):
        i = cmds[name].index("--adam-eps")
        assert float(cmds[name][i + 1]) == 1e-6, cmds[name]
    plain = glue_vs_trainer.commands(glue_vs_trainer.parse_args(["--model", "m", "--glue", "g"]), "rte", 3, tmp_path)
    assert all("--adam-eps" not in cmd for cmd in plain.values())

    started = []
    monkeypatch.setattr(glue_vs_trainer, "run_pair", lambda a, task, seed, todo: started.append((task, seed, todo)))
    _write(tmp_path / "runs", "rte", "trainer", 2, 57, 100)  # already done: skipped
    readme = tmp_path / "README.md"
    readme.write_text(f"{glue_table.START}\n{glue_table.END}\n")
    common = ["--model", "m", "--glue", "g", "--tasks", "rte", "--seeds", "1-2", "--pause", "0",
              "--results", str(tmp_path / "runs"), "--readme", str(readme)]
    assert glue_vs_trainer.main([*common, "--pipelines", "trainer"]) == 0
    assert started == [("rte", 1, ["trainer"])]
    assert glue_vs_trainer.main([*common, "--pipelines", "trainer,hf"]) == 2


def test_a_bad_task_pipeline_or_readme_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
    import glue_vs_trainer

    started = []
    monkeypatch.setattr(glue_vs_trainer, "run_pair", lambda *a: started.append(a))
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    common = ["--model", "m", "--glue", "g", "--seeds", "1", "--pause", "0", "--results", str(tmp_path / "runs")]
    assert glue_vs_trainer.main([*common, "--readme", str(readme)]) == 2
    assert "no glue-vs-trainer table markers" in capsys.readouterr().err
    assert glue_vs_trainer.main([*common, "--readme", str(tmp_path / "missing.md")]) == 2
    readme.write_text(f"{glue_table.START}\n{glue_table.END}\n")
    assert glue_vs_trainer.main([*common, "--readme", str(readme), "--tasks", "rte,qnli"]) == 2
    assert "unknown task(s) qnli" in capsys.readouterr().err
    assert started == []


def test_permutation_p_is_exact_for_few_seeds_and_sampled_close_to_exact_for_more():
    # 5 vs 5: 252 splits, and only the observed one and its mirror are as far apart
    assert glue_table.permutation_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert glue_table.permutation_p([3, 1, 2], [2, 3, 1]) == 1.0  # the same values: no evidence at all
    assert glue_table.permutation_p([1, 2, 3, 4, 5], [1.5, 2.5, 3.5, 4.5, 5.5]) > 0.5
    a = [55.2, 53.8, 56.7, 57.0, 54.5, 55.6, 56.0, 52.7, 57.4, 55.2]
    b = [57.4, 56.7, 56.3, 58.8, 57.0, 54.2, 55.6, 59.2, 56.0, 53.8]
    exact = glue_table.permutation_p(a, b, rounds=200_000)  # C(20, 10) = 184,756 splits, all of them
    sampled = glue_table.permutation_p(a, b)  # 20,000 random ones
    assert 0.01 < exact < 0.5 and sampled == pytest.approx(exact, abs=0.015)
    assert glue_table.permutation_p(a, b) == sampled  # seeded
    assert glue_table.gap([1, 2], [5]) is None
    g = glue_table.gap([1, 2, 3], [2, 4, 6])
    assert g["median"] == 2 and g["mean"] == 2


def test_miss_rates_count_goal_failures_across_pipelines_and_of_each_against_itself():
    low, high = [float(v) for v in range(10)], [100.0 + v for v in range(10)]
    worse = glue_table.miss_rates(low, high, draws=200)
    assert worse["bertkit_vs_trainer"] == 1.0 and worse["n"] == 5
    assert glue_table.miss_rates(high, low, draws=200)["bertkit_vs_trainer"] == 0.0
    # against itself: spread-out values sometimes miss, and the same values miss equally often either way
    spread = [50.0 + v for v in (0, 0, 1, 1, 2, 3, 5, 6, 8, 9)]
    placebo = glue_table.miss_rates(spread, list(spread), draws=2000)
    assert 0 < placebo["trainer_vs_itself"] < 0.5 and 0 < placebo["bertkit_vs_itself"] < 0.5
    assert placebo["trainer_vs_itself"] == pytest.approx(placebo["bertkit_vs_itself"], abs=0.05)
    assert glue_table.miss_rates(low[:9], high) is None  # fewer than 2 x 5 seeds
    assert glue_table.goal_met([54, 56.4, 58], [56, 57, 58])  # the larger std (2, not 1) sets the margin
    assert not glue_table.goal_met([50, 51, 52], [56, 57, 58])
