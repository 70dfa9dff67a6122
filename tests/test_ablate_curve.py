"""`bertkit ablate`'s compute axis (`t5-curve`): each objective's steps at equal FLOPs, the curve's
cells and what they share with Table 5, STS-B's subsets and baseline, the report's curve section
(the bidirectional-passes-LTR sentence on hand-made results; PNGs on a tiny run), and a stopped
curve resumed where it stopped."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from ablate_helpers import ablate, marker_times, records, write_inputs
from bertkit.ablate import cells as cells_module
from bertkit.ablate.curve import flops_per_step
from bertkit.ablate.plan import build_plan, describe
from bertkit.ablate.report import build_report, render_markdown, write_report
from bertkit.ablate.scales import SCALES, TaskSize
from bertkit.ablate.taskdata import majority_baseline, write_task_subset
from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.flops import step_flops


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, pretraining_data) -> dict[str, Path]:
    return write_inputs(tmp_path_factory.mktemp("ablate-curve-inputs"), pretraining_data)


def _pretrain_steps(plan) -> dict[str, int]:
    return {c.id.removeprefix("pretrain/"): c.param("steps") for c in plan.cells if c.kind == "pretrain"}


def test_each_objective_gets_the_steps_that_spend_the_budgets_flops():
    """At one budget LTR (its head at every position) and ELECTRA (a generator beside the model) get
    fewer steps than MLM, by the ratio of their FLOPs per step, counted as pretraining counts them."""
    scale = SCALES["cpu-curve"]
    steps = _pretrain_steps(build_plan("cpu-curve", (1,)))
    flops = {o: flops_per_step(scale, o, f) for o, f in
             (("mlm+nsp", "nsp"), ("mlm", "packed"), ("ltr", "packed"), ("electra", "packed"))}
    # an independent count: the encoder plus the head at 15% of positions, or at every next token
    config = BertConfig.preset("tiny", vocab_size=8000, num_hidden_layers=1, hidden_size=64, num_attention_heads=2,
                               intermediate_size=256)
    lengths = [128] * 32
    assert flops["mlm"] == flops["mlm+nsp"] == step_flops(config, lengths, round(32 * 128 * 0.15), training=True)
    assert flops["ltr"] == step_flops(config, lengths, 32 * 127, training=True)
    assert flops["mlm"] < flops["electra"] < flops["ltr"]
    for m in (1, 3, 9):
        suffix = "" if m == 1 else f"-x{m}"
        budget = m * 3200 * flops["mlm+nsp"]
        assert steps[f"bert{suffix}"] == steps[f"no-nsp{suffix}"] == 3200 * m
        for objective, name in (("ltr", "ltr"), ("electra", "electra")):
            ours = steps[f"{name}-x{m}"]
            assert ours < 3200 * m and abs(ours * flops[objective] - budget) <= flops[objective] / 2
    assert steps["ltr-x9"] == round(28800 * flops["mlm"] / flops["ltr"])  # ~4x fewer: 7,125 of 28,800


def test_curve_cells_share_table5s_and_seeds_can_stop_short(monkeypatch):
    plan = build_plan("tiny", (1, 2), ("sst2", "stsb"), ["t5", "t5-curve"])
    ids = [c.id for c in plan.cells]
    assert len(ids) == len(set(ids))
    steps = _pretrain_steps(plan)
    # 1x with the scale's steps is Table 5's own pretraining; 2x pretrains anew, LTR for fewer steps
    assert steps == {"bert": 3, "no-nsp": 3, "ltr": 3, "electra": 3, "bert-x2": 6, "no-nsp-x2": 6, "ltr-x2": 5,
                     "electra-x2": 5}
    curve = next(t for t in plan.tables if t.key == "t5-curve")
    assert [r.variant.name for r in curve.rows[:4]] == ["bert", "no-nsp", "ltr", "electra"]
    assert all(r.against == f"t5-curve-bert-x{r.key[-1]}" for r in curve.rows)  # MLM + NSP at the same budget
    finetunes = {c.id for c in plan.cells if c.kind == "finetune"}
    assert "finetune/ltr-x2/sst2/ltr/seed2" in finetunes and "finetune/bert-x2/stsb/ft/seed2" in finetunes
    assert "finetune/ltr-x2/stsb/ltr/seed2" in finetunes  # STS-B through the LTR head's regression output
    assert build_plan("tiny", (1,), None, ["t5-curve"]).tasks == ("sst2", "squad", "conll", "stsb")
    assert build_plan("tiny", (1,)).tasks == ("mrpc", "sst2", "squad", "conll")  # the paper's tables, as before
    assert {r.key.rsplit("-", 1)[0] for r in build_plan("cpu-curve", (1,)).rows} == {
        "t5-curve-bert", "t5-curve-no-nsp", "t5-curve-ltr", "t5-curve-electra"}  # cpu-curve's default table

    monkeypatch.setitem(SCALES, "tiny", dataclasses.replace(SCALES["tiny"], largest_budget_seeds=1))
    short = build_plan("tiny", (1, 2), ("sst2",), ["t5-curve"])
    seeds = {c.param("variant"): set() for c in short.cells if c.kind == "finetune"}
    for c in short.cells:
        if c.kind == "finetune":
            seeds[c.param("variant")].add(c.param("seed"))
    assert seeds["bert"] == {1, 2} and seeds["bert-x2"] == seeds["ltr-x2"] == {1}
    assert "the 2x budget fine-tunes with the first 1 seeds only" in describe(short)


def test_the_task_check_of_a_curve_scale_is_its_reference_on_the_curves_tasks():
    from bertkit.ablate.check import check_plan, task_check

    plan = check_plan("cpu-curve", (1, 2), None)
    assert [c.id for c in plan.cells if c.kind in ("pretrain", "finetune")] == ["pretrain/bert"] + [
        f"finetune/bert/{t}/ft/seed{s}" for s in (1, 2) for t in ("sst2", "squad", "conll", "stsb")]
    fake = {f"finetune/bert/stsb/ft/seed{s}": _record("finetune", {"dev": {"spearman": v}})
            for s, v in ((1, 20.0), (2, 22.0))}
    fake["tasks/stsb"] = _record("tasks", {"majority": {"label": "", "mean": 2.5, "spearman": 0.0}})
    stsb = task_check(plan, fake)["tasks"]["stsb"]
    assert stsb["metric"] == "spearman" and stsb["gap"] == 21.0 and stsb["verdict"] == "clearly above"


def test_a_scale_without_a_curve_refuses_it():
    with pytest.raises(UserError, match="scale cpu-small has no compute curve; choose from tiny, cpu-curve"):
        build_plan("cpu-small", (1,), None, ["t5-curve"])
    with pytest.raises(UserError, match=r"no table or row 't5-curve-ltr-x4'; choose from .*t5-curve-ltr-x2"):
        build_plan("tiny", (1,), None, ["t5-curve-ltr-x4"])


def test_stsb_subset_and_its_baseline(inputs, tmp_path):
    size = TaskSize(10, None, 1, 1e-3, 32, 8)
    counts = write_task_subset("stsb", inputs["data"], tmp_path, size)
    assert counts == {"train": 10, "dev": 8}
    source = (inputs["data"] / "glue/STS-B/train.tsv").read_text().splitlines()
    train = (tmp_path / "train.tsv").read_text().splitlines()
    assert train[0] == source[0] and set(train[1:]) <= set(source[1:])
    again = tmp_path / "again"
    again.mkdir()
    write_task_subset("stsb", inputs["data"], again, size)
    assert (again / "train.tsv").read_text() == (tmp_path / "train.tsv").read_text()  # a fixed subset
    scores = [float(line.split("\t")[-1]) for line in (tmp_path / "dev.tsv").read_text().splitlines()[1:]]
    base = majority_baseline("stsb", tmp_path)
    assert base["mean"] == pytest.approx(statistics.mean(scores)) and base["spearman"] == 0.0


def _record(kind: str, result: dict, params: dict | None = None) -> dict:
    return {"id": "", "kind": kind, "params": params or {}, "result": result, "time_s": 1.0}


# per task and variant, three seeds' scores. SST-2: at 2x MLM (not MLM + NSP) is above LTR by 5, beyond
# the spread 1; CoNLL: at 2x MLM + NSP is 3 above LTR, within LTR's spread 3 (beyond MLM + NSP's 1)
_SCORES = {"sst2": {"bert": (60, 61, 62), "no-nsp": (60, 62, 64), "ltr": (70, 71, 72), "electra": (60, 61, 62),
                    "bert-x2": (70, 71, 72), "no-nsp-x2": (80, 81, 82), "ltr-x2": (75, 76, 77),
                    "electra-x2": (84, 85, 86)},
           "conll": {"bert": (50, 51, 52), "no-nsp": (40, 41, 42), "ltr": (50, 52, 54), "electra": (40, 41, 42),
                     "bert-x2": (55, 56, 57), "no-nsp-x2": (40, 41, 42), "ltr-x2": (50, 53, 56),
                     "electra-x2": (40, 41, 42)},
           "stsb": {"bert": (10, 11, 12), "no-nsp": (10, 11, 12), "electra": (10, 11, 12), "bert-x2": (20, 21, 22),
                    "no-nsp-x2": (20, 21, 22), "electra-x2": (20, 21, 22), "ltr": (10, 11, 12),
                    "ltr-x2": (30, 31, 32)}}


def _hand_made(plan) -> dict:
    fake = {}
    metric = {"sst2": "accuracy", "conll": "f1", "stsb": "spearman"}
    for task, variants in _SCORES.items():
        for variant, values in variants.items():
            how = "ltr" if variant.startswith("ltr") and task in ("sst2", "stsb") else "ft"
            for seed, value in zip((1, 2, 3), values):
                result = {"dev": {metric[task]: value}}
                fake[f"finetune/{variant}/{task}/{how}/seed{seed}"] = _record("finetune", result)
    fake["pretrain/ltr-x2"] = _record("pretrain", {"steps": 5, "elapsed_s": 120.0,
                                                   "val": {"next_token_accuracy": 0.25}})
    fake["pretrain/electra-x2"] = _record("pretrain", {"steps": 5, "elapsed_s": 60.0,
                                                       "val": {"replaced_accuracy": 0.4, "rtd_auc": 0.71}})
    fake["tasks/stsb"] = _record("tasks", {"majority": {"label": "", "mean": 2.5, "spearman": 0.0}}, {"task": "stsb"})
    return fake


def test_the_report_names_the_budget_where_bidirectional_passes_ltr(tmp_path):
    plan = build_plan("tiny", (1, 2, 3), ("sst2", "conll", "stsb"), ["t5-curve"])
    report = build_report(plan, _hand_made(plan), {"command": "bertkit ablate ..."})
    curve = report["curve"]
    sst2, conll, stsb = (curve["tasks"][c] for c in ("SST-2 (acc)", "CoNLL-2003 NER (F1)", "STS-B (Spearman)"))
    assert sst2["passes"]["budget"] == 2 and sst2["passes"]["compared"][1]["better"] == "mlm"
    assert [c["passes"] for c in sst2["passes"]["compared"]] == [False, True]
    assert conll["passes"]["budget"] is None and conll["passes"]["compared"][1]["spread"] == pytest.approx(3.0)
    assert stsb["passes"]["budget"] is None and stsb["passes"]["compared"][1]["gap"] == pytest.approx(-10.0)
    assert sst2["rtd_vs_mlm"]["direction"] == "higher" and sst2["rtd_vs_mlm"]["gap"] == 4.0
    ltr = curve["budgets"][1]["pretraining"]["ltr"]
    assert ltr["steps"] == 5 and ltr["flops"] == 5 * ltr["flops_per_step"] and ltr["done"]
    assert curve["budgets"][1]["pretraining"]["mlm+nsp"]["steps"] == 6 and not curve["budgets"][1]["pretraining"][
        "mlm+nsp"]["done"]  # pending: its planned steps
    text = render_markdown(report)
    assert text == render_markdown(json.loads(json.dumps(report)))  # from report.json's content alone
    assert ("SST-2 (acc): bidirectional passes left-to-right at 2x" in text
            and "MLM 81.00 ± 1.00 against LTR 76.00 ± 1.00, gap +5.00 beyond the spread 1.00." in text)
    assert ("CoNLL-2003 NER (F1): at no budget is the better bidirectional row above LTR beyond the larger seed "
            "spread (at 2x: MLM + NSP 56.00 ± 1.00 against LTR 53.00 ± 3.00, gap +3.00, spread 3.00)." in text)
    assert "STS-B (Spearman): at no budget is the better bidirectional row above LTR" in text
    assert "SST-2 (acc): at 2x, 85.00 ± 1.00 against 81.00 ± 1.00: higher (gap +4.00, spread 1.00)." in text
    assert "| 2x | LTR | 5 | " in text and "next token 25.0%" in text and "RTD AUC 0.710" in text
    assert "STS-B Spearman 0 (the mean score, 2.50, for every pair)" in text
    row = next(r for r in report["tables"][0]["rows"] if r["key"] == "t5-curve-no-nsp-x2")
    assert row["entries"]["SST-2 (acc)"]["sign"]["against"] == "t5-curve-bert-x2"  # the paper's sign, per budget
    write_report(tmp_path, report)
    assert {p.name for p in tmp_path.glob("t5-curve-*.png")} == {"t5-curve-sst2.png", "t5-curve-conll.png",
                                                                 "t5-curve-stsb.png"}
    assert "curve" not in build_report(build_plan("tiny", (1,), ("sst2",), ["t5"]), {}, {})


def test_plan_only_estimates_the_curve(capsys):
    from bertkit.cli import main

    assert main(["ablate", "--out", "unused", "--scale", "cpu-curve", "--plan-only"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("scale cpu-curve: ") and "compute curve: budgets 1x, 3x, 9x" in out
    assert "LTR: 792 / 2,375 / 7,125" in out and "pretrain/electra-x9  ~" in out and "tasks/stsb" in out


def test_a_stopped_curve_resumes_and_draws_each_task(inputs, tmp_path, monkeypatch):
    out = tmp_path / "abl"
    args = ("--only", "t5-curve-bert-x1,t5-curve-ltr-x1,t5-curve-bert-x2,t5-curve-ltr-x2", "--tasks", "sst2,stsb",
            "--seeds", "1")
    real = dict(cells_module.EXECUTORS)
    ran: list[str] = []

    def stopped_at_the_second_budget(cell, plan, ctx):
        if cell.id == "pretrain/ltr-x2":
            raise KeyboardInterrupt
        ran.append(cell.id)
        return real[cell.kind](cell, plan, ctx)

    monkeypatch.setattr(cells_module, "EXECUTORS", dict.fromkeys(real, stopped_at_the_second_budget))
    assert ablate(inputs, out, *args) == 130
    before = marker_times(out)
    assert set(before) == set(ran) and "pretrain/bert-x2" in before and "pretrain/ltr-x2" not in before
    monkeypatch.setattr(cells_module, "EXECUTORS", real)
    assert ablate(inputs, out, *args) == 0
    after = marker_times(out)
    assert all(after[i] == t for i, t in before.items())  # nothing done before ran again
    done = records(out)
    assert done["pretrain/ltr-x2"]["result"]["steps"] == 5 and done["pretrain/bert-x2"]["result"]["steps"] == 6
    assert isinstance(done["finetune/bert-x2/stsb/ft/seed1"]["result"]["dev"]["spearman"], float)
    report = json.loads((out / "report.json").read_text())
    assert report["cells"]["done"] == report["cells"]["total"]
    assert [b["multiplier"] for b in report["curve"]["budgets"]] == [1, 2]
    assert report["baselines"]["stsb"]["spearman"] == 0.0
    for task in ("sst2", "stsb"):
        assert (out / f"t5-curve-{task}.png").stat().st_size > 1000
    text = (out / "report.md").read_text()
    assert "### Table 5 along a compute axis: each budget, and where" in text
    assert "![SST-2 (acc) against pretraining FLOPs](t5-curve-sst2.png)" in text


def test_the_ltr_head_regresses_sts_b_scores_with_mse_from_the_last_real_token():
    import torch

    from bertkit import BertConfig, BertModel
    from bertkit.finetune.ltr import LTRHead

    torch.manual_seed(0)
    encoder = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=20, max_position_embeddings=16, attention="causal"))
    head = LTRHead(encoder, "classify", 1, False).eval()
    ids = torch.randint(5, 50, (3, 7))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5])
    labels = torch.tensor([0.5, 3.0, 4.5])
    out = head(ids, mask, labels=labels)
    assert out.logits.shape == (3, 1)
    assert out.loss.item() == pytest.approx(((out.logits.squeeze(-1) - labels) ** 2).mean().item(), abs=1e-6)
    ids2 = ids.clone()
    ids2[1, 4:] = 7  # padding after the last real token changes nothing: the causal head reads up to it
    assert torch.allclose(head(ids2, mask).logits, out.logits, atol=1e-6)
