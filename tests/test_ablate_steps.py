"""`bertkit ablate`'s steps around a full run, at the tiny scale: the lr tuning (`--tune-lr`), the
task check against each task's majority class (`--check-tasks`, whose cells the full run reuses),
a changed scale setting rerunning only the cells made with it, a report row without a paper figure,
and the scales' settings (the budget recipe, a fixed equal-time budget)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ablate_helpers import ablate, marker_times, records, write_inputs
from bertkit.ablate.check import task_check
from bertkit.ablate.plan import build_plan
from bertkit.ablate.report import NO_SIGN, build_report, render_markdown, write_report
from bertkit.ablate.scales import SCALES, TaskSize
from bertkit.ablate.taskdata import majority_baseline
from bertkit.ablate.tune import tune_score
from bertkit.pretrain.recipes import RECIPES


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, pretraining_data) -> dict[str, Path]:
    return write_inputs(tmp_path_factory.mktemp("ablate-steps-inputs"), pretraining_data)


def test_tune_lr_scores_each_objective_by_its_own_metric(inputs, tmp_path, capsys):
    out = tmp_path / "abl"
    assert ablate(inputs, out, "--tune-lr") == 0
    done = records(out)
    grid = SCALES["tiny"].lr_grid
    assert {i for i in done if i.startswith("tune/")} == {f"tune/{o}/lr{lr:g}" for o, lrs in grid.items() for lr in lrs}
    assert done["tune/electra/lr0.0001"]["params"]["lr"] == 1e-4
    assert done["tune/electra/lr0.0001"]["params"]["steps"] == SCALES["tiny"].tune_steps
    result = json.loads((out / "lr-tuning.json").read_text())
    for objective, o in result["objectives"].items():
        assert [r["lr"] for r in o["runs"]] == list(grid[objective])
        assert o["best_lr"] == max(o["runs"], key=lambda r: r["score"])["lr"]
    electra = result["objectives"]["electra"]["runs"][0]
    assert electra["score"] == pytest.approx(50 * (electra["val"]["replaced_accuracy"]
                                                   + electra["val"]["original_accuracy"]))
    printed = capsys.readouterr().out
    assert "lr tuning at scale tiny" in printed and "electra  balanced_rtd_accuracy" in printed
    assert not any(i.startswith(("pretrain/", "finetune/")) for i in done)  # tuning only


def test_an_all_original_discriminator_scores_half():
    assert tune_score("electra", {"replaced_accuracy": 0.0, "original_accuracy": 1.0}) == 50.0
    assert tune_score("ltr", {"next_token_accuracy": 0.2}) == pytest.approx(20.0)
    assert tune_score("mlm", {}) is None


def test_task_check_then_the_full_run_reuses_its_cells(inputs, tmp_path, capsys):
    out = tmp_path / "abl"
    assert ablate(inputs, out, "--check-tasks", "--tasks", "mrpc,conll", "--seeds", "1,2") == 0
    check = json.loads((out / "task-check.json").read_text())
    assert set(check["tasks"]) == {"mrpc", "conll"} and check["reference"]["steps"] == 3
    mrpc = check["tasks"]["mrpc"]
    assert mrpc["majority"] == {"label": "0", "accuracy": 50.0}  # the tiny dev file alternates its labels
    assert len(mrpc["values"]) == 2 and mrpc["gap"] == pytest.approx(mrpc["median"] - 50.0)
    assert mrpc["verdict"] in ("clearly above", "not clearly above")
    conll = check["tasks"]["conll"]
    assert conll["majority"]["f1"] == 0.0 and conll["majority"]["accuracy"] == pytest.approx(50.0)  # 3 of 6 tags O
    assert len(conll["token_accuracy"]) == 2
    printed = capsys.readouterr().out
    assert "task check at scale tiny" in printed and "majority class" in printed
    checked = marker_times(out)
    assert set(checked) == {"vocab", "data/nsp", "tasks/mrpc", "tasks/conll", "pretrain/bert",
                            *(f"finetune/bert/{t}/ft/seed{s}" for t in ("mrpc", "conll") for s in (1, 2))}

    assert ablate(inputs, out, "--only", "t5-bert,t5-no-nsp", "--tasks", "mrpc,conll", "--seeds", "1,2") == 0
    after = marker_times(out)
    assert all(after[i] == t for i, t in checked.items())  # none of the check's cells ran again
    assert "pretrain/no-nsp" in after


def test_a_changed_task_size_reruns_only_what_was_made_with_it(inputs, tmp_path, monkeypatch):
    out = tmp_path / "abl"
    args = ("--only", "t5-bert", "--tasks", "mrpc,sst2", "--seeds", "1")
    assert ablate(inputs, out, *args) == 0
    before = marker_times(out)
    tiny = SCALES["tiny"]
    changed = dataclasses.replace(tiny, tasks={**tiny.tasks, "mrpc": TaskSize(12, 8, 2, 1e-3, 32, 8)})
    monkeypatch.setitem(SCALES, "tiny", changed)
    assert ablate(inputs, out, *args) == 0
    after = marker_times(out)
    rerun = {i for i in after if after[i] != before[i]}
    assert rerun == {"tasks/mrpc", "finetune/bert/mrpc/ft/seed1"}
    assert records(out)["finetune/bert/mrpc/ft/seed1"]["result"]["n_train"] == 12

    # another lr for the reference: its pretraining and everything made from it run again
    monkeypatch.setitem(SCALES, "tiny", dataclasses.replace(
        changed, lr_by_objective={**tiny.lr_by_objective, "mlm+nsp": 1e-3}))
    assert ablate(inputs, out, *args) == 0
    again = marker_times(out)
    assert {i for i in again if again[i] != after[i]} == {"pretrain/bert", "finetune/bert/mrpc/ft/seed1",
                                                           "finetune/bert/sst2/ft/seed1"}


def _fake(cell_id: str, kind: str, result: dict) -> dict:
    return {"id": cell_id, "kind": kind, "params": {"task": cell_id.split("/")[-1]} if kind == "tasks" else {},
            "result": result, "time_s": 1.0}


def test_report_with_rows_without_a_paper_figure(tmp_path):
    """ELECTRA's row and the NER column have no paper figure: "-" in the table, our gap to BERT
    by the sign rule, no paper sign counted, and the PNG draws."""
    plan = build_plan("tiny", (1, 2, 3), ("mrpc", "conll"), ["t5-bert", "t5-electra"])
    scores = {"bert": ([70.0, 71.0, 72.0], [30.0, 31.0, 32.0]), "electra": ([75.0, 76.0, 77.0], [30.5, 31.5, 30.0])}
    fake = {}
    for variant, (mrpc, conll) in scores.items():
        for seed, (m, c) in enumerate(zip(mrpc, conll), 1):
            fake[f"finetune/{variant}/mrpc/ft/seed{seed}"] = _fake("", "finetune", {"dev": {"accuracy": m}})
            fake[f"finetune/{variant}/conll/ft/seed{seed}"] = _fake("", "finetune", {"dev": {"f1": c}})
    fake["tasks/mrpc"] = _fake("tasks/mrpc", "tasks", {"majority": {"label": "1", "accuracy": 68.38}})
    report = build_report(plan, fake, {"command": "bertkit ablate ..."})
    electra = report["tables"][0]["rows"][1]["entries"]
    assert electra["MRPC (acc)"]["sign"] == {"against": "t5-bert", "our_gap": 5.0, "spread": 1.0,
                                             "verdict": NO_SIGN, "direction": "higher"}
    assert electra["CoNLL-2003 NER (F1)"]["sign"]["direction"] == "not resolved at this scale"
    assert report["verdicts"] == {NO_SIGN: 2}
    assert report["without_paper_figure"] == {"higher": 1, "not resolved at this scale": 1}
    text = render_markdown(report)
    assert "our gap to the compared row: 1 higher, 1 not resolved at this scale." in text
    assert "| ELECTRA (RTD) | 76.00 ± 1.00 / - | 30.50 ± 0.76 / - | vs t5-bert: MRPC higher (+5.00; no paper " \
           "figure); CoNLL-2003 NER not resolved (-0.50; no paper figure) |" in text
    assert "| BERT (MLM + NSP) | 71.00 ± 1.00 / 86.7 | 31.00 ± 1.00 / - | (reference) |" in text
    assert "Majority class on our dev subsets: MRPC accuracy 68.4 (label 1)." in text
    for seed in (1, 2, 3):  # BERT's row still running: ELECTRA's is compared with it, not a reference
        del fake[f"finetune/bert/mrpc/ft/seed{seed}"], fake[f"finetune/bert/conll/ft/seed{seed}"]
    assert "| ELECTRA (RTD) | 76.00 ± 1.00 / - | 30.50 ± 0.76 / - | vs t5-bert: MRPC: pending; CoNLL-2003 NER: " \
           "pending |" in render_markdown(build_report(plan, fake, {"command": "bertkit ablate ..."}))
    write_report(tmp_path, report)
    assert (tmp_path / "t5.png").stat().st_size > 1000
    assert majority_baseline("squad", tmp_path) == {"label": "", "f1": 0.0, "exact_match": 0.0}  # an empty answer


def test_the_scales_pretrain_with_their_recipe_and_a_fixed_time_budget(monkeypatch):
    cpu = SCALES["cpu-small"]
    assert cpu.recipe == "budget" and RECIPES["budget"]["init"] == "scaled" and RECIPES["budget"]["adam_beta2"] == 0.98
    plan = build_plan("cpu-small", (1,), ("mrpc",), ["t5"])
    cells = {c.id: c for c in plan.cells}
    assert cells["pretrain/ltr"].param("lr") == cpu.lr_by_objective["ltr"]
    assert cells["pretrain/electra"].param("lr") == cpu.lr_by_objective["electra"]
    assert cells["pretrain/bert"].param("recipe") == "budget" and cells["pretrain/bert"].param("warmup") is None
    assert cells["pretrain/electra"].estimate_s > cells["pretrain/no-nsp"].estimate_s  # a costlier step
    # the LTR head costs what the plain head does; its BiLSTM more; the pretraining's factor is not the head's
    assert cells["finetune/ltr/mrpc/ltr/seed1"].estimate_s == cells["finetune/bert/mrpc/ft/seed1"].estimate_s
    assert cells["finetune/ltr/mrpc/ltr-bilstm/seed1"].estimate_s > cells["finetune/bert/mrpc/ft/seed1"].estimate_s
    assert SCALES["gpu"].recipe == "paper" and build_plan("gpu", (1,)).cells  # still defined, as before

    monkeypatch.setitem(SCALES, "cpu-small", dataclasses.replace(cpu, time_minutes=6.0))
    fixed = {c.id: c for c in build_plan("cpu-small", (1,), ("mrpc",), ["t5-time-ltr"]).cells}
    assert fixed["pretrain/ltr-time"].param("minutes") == 6.0 and "pretrain/bert" not in fixed
    assert fixed["pretrain/ltr-time"].estimate_s == pytest.approx(6.0 * 60 + cpu.rates["fixed"])
    measured = {c.id for c in build_plan("tiny", (1,), ("mrpc",), ["t5-time-ltr"]).cells}
    assert "pretrain/bert" in measured  # its minutes come from the reference, which runs first


def test_task_check_of_a_reference_below_its_majority_class():
    plan = build_plan("tiny", (1, 2, 3), ("mrpc",), ["t5-bert"])
    fake = {f"finetune/bert/mrpc/ft/seed{s}": _fake("", "finetune", {"dev": {"accuracy": a}})
            for s, a in zip((1, 2, 3), (66.0, 68.0, 70.0))}
    fake["tasks/mrpc"] = _fake("tasks/mrpc", "tasks", {"majority": {"label": "1", "accuracy": 68.38}})
    check = task_check(plan, fake)["tasks"]["mrpc"]
    assert check["verdict"] == "not clearly above" and check["gap"] == pytest.approx(-0.38)
    fake.update({f"finetune/bert/mrpc/ft/seed{s}": _fake("", "finetune", {"dev": {"accuracy": a}})
                 for s, a in zip((1, 2, 3), (74.0, 75.0, 76.0))})
    assert task_check(plan, fake)["tasks"]["mrpc"]["verdict"] == "clearly above"


@pytest.mark.parametrize("extra, message", [
    (("--tune-lr", "--check-tasks"), "--tune-lr and --check-tasks: choose one"),
    (("--tune-lr", "--only", "t5"), "--only does not apply to --tune-lr"),
    (("--check-tasks", "--only", "t5"), "--only does not apply to --check-tasks"),
    (("--tune-lr", "--tasks", "mrpc"), "--tasks does not apply to --tune-lr"),
])
def test_the_steps_flags_mistakes_are_one_line(inputs, tmp_path, capsys, extra, message):
    assert ablate(inputs, tmp_path / "abl", *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "abl").exists()
