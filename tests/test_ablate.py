"""`bertkit ablate` on a tiny slice: every cell written once, a rerun after a kill skips the
finished cells and continues, the report renders from report.json alone, and the sign rule."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ablate_helpers import ablate, records, write_inputs
from bertkit.ablate import cells as cells_module
from bertkit.ablate.plan import build_plan
from bertkit.ablate.report import (
    HOLDS,
    NO_SIGN,
    PENDING,
    REVERSED,
    UNRESOLVED,
    render_markdown,
    sign_verdict,
)
from bertkit.experiments.runner import Progress


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, pretraining_data) -> dict[str, Path]:
    return write_inputs(tmp_path_factory.mktemp("ablate-inputs"), pretraining_data)


@pytest.fixture(scope="module")
def full(inputs, tmp_path_factory, monkeypatch_module):
    """Every table, every task, one seed; each executed cell counted."""
    out = tmp_path_factory.mktemp("ablate-full") / "abl"
    calls: list[str] = []
    for kind, fn in list(cells_module.EXECUTORS.items()):
        def counted(cell, plan, ctx, fn=fn):
            calls.append(cell.id)
            return fn(cell, plan, ctx)
        monkeypatch_module.setitem(cells_module.EXECUTORS, kind, counted)
    assert ablate(inputs, out, "--seeds", "1") == 0
    return out, calls


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_every_cell_is_written_once(full):
    out, calls = full
    plan = build_plan("tiny", (1,))
    ids = [c.id for c in plan.cells]
    assert len(ids) == len(set(ids)) and sorted(calls) == sorted(ids)  # each cell ran once, none twice
    done = records(out)
    assert set(done) == set(ids)
    # 4 objectives, 3 of them again at equal time, 2 more sizes, 5 more rules
    assert len([i for i in ids if i.startswith("pretrain/")]) == 14
    for cell_id, record in done.items():
        if record["kind"] == "finetune":
            assert isinstance(record["result"]["dev"][{"squad": "f1", "conll": "f1"}.get(
                record["params"]["task"], "accuracy")], float), cell_id
    ppl = done["pretrain/bert"]["result"]["ppl"]
    assert ppl > 1 and not (out / "work/pretrain/bert/checkpoints").exists()
    assert not list((out / "work").rglob(".*.tmp"))  # no half-written folder left


def test_report_renders_from_report_json(full):
    out, _ = full
    report = json.loads((out / "report.json").read_text())
    assert [t["key"] for t in report["tables"]] == ["t5", "t5-time", "t6", "t7", "t8"]
    assert report["cells"] == {"done": report["cells"]["total"], "total": report["cells"]["total"]}
    text = render_markdown(report)
    assert text == (out / "report.md").read_text()
    for key in ("t5", "t5-time", "t6", "t7", "t8"):
        assert (out / f"{key}.png").stat().st_size > 1000
    t5 = next(t for t in report["tables"] if t["key"] == "t5")
    assert [r["key"] for r in t5["rows"]] == ["t5-bert", "t5-no-nsp", "t5-ltr", "t5-ltr-bilstm", "t5-electra"]
    assert t5["columns"][-1] == "CoNLL-2003 NER (F1)"
    assert t5["rows"][3]["entries"]["SQuAD (F1)"]["sign"]["against"] == "t5-ltr"
    assert "| LTR & No NSP | " in text and "/ 77.5 |" in text  # our number / the paper's, in its row
    electra = t5["rows"][4]["entries"]
    assert all(e["paper"] is None and e["n"] == 1 for e in electra.values())  # no paper figure, our number
    assert electra["MRPC (acc)"]["sign"]["against"] == "t5-bert"
    assert re.search(r"\| ELECTRA \(RTD\) \| [\d.]+ / - \|", text)
    assert t5["rows"][3]["entries"]["CoNLL-2003 NER (F1)"] == {"paper": None, "values": [], "seeds": [], "n": 0,
                                                               "not_run": True}
    assert "| n/a / - |" in text  # + BiLSTM has no NER entry
    assert "Majority class on our dev subsets: MRPC accuracy 50.0" in text and "### Pretraining" in text
    # one seed: no spread, so nothing can be resolved
    assert set(report["verdicts"]) <= {UNRESOLVED, NO_SIGN}
    report["tables"][0]["rows"][0]["entries"]["MRPC (acc)"].update(median=12.345, n=1)
    assert "12.35 / 86.7" in render_markdown(report)  # what is shown comes from the JSON


def test_equal_time_cells_take_the_references_minutes(full):
    """Table 5 at equal wall time: each pretraining gets the minutes the MLM + NSP reference took
    (measured in its cell), runs on the time schedule, and is fine-tuned like its equal-steps row."""
    out, _ = full
    done = records(out)
    reference = done["pretrain/bert"]["result"]
    assert reference["elapsed_s"] > 0 and done["pretrain/bert"]["params"]["steps"] == 3
    for name in ("no-nsp-time", "ltr-time", "electra-time"):
        record = done[f"pretrain/{name}"]
        assert record["params"]["minutes_of"] == "pretrain/bert" and "steps" not in record["params"]
        assert record["result"]["minutes"] == pytest.approx(reference["elapsed_s"] / 60)
        assert record["needs"]["pretrain/bert"] == done["pretrain/bert"]["uid"]  # made from this reference
        assert record["result"]["steps"] >= 1
        config = json.loads((out / "work" / "pretrain" / name / "config.json").read_text())["train"]
        assert config["minutes"] == pytest.approx(reference["elapsed_s"] / 60) and config["steps"] is None
    assert done["finetune/ltr-time/squad/ltr/seed1"]["result"]["dev"]["f1"] >= 0
    assert done["finetune/ltr-time/conll/ft/seed1"]["params"]["how"] == "ft"  # LTR tags from its left context
    report = json.loads((out / "report.json").read_text())
    time_table = next(t for t in report["tables"] if t["key"] == "t5-time")
    assert [r["variant"] for r in time_table["rows"]] == ["bert", "no-nsp-time", "ltr-time", "electra-time"]
    assert time_table["rows"][2]["entries"]["SQuAD (F1)"]["sign"]["against"] == "t5-time-bert"
    assert "| ltr-time | ltr | 0.002 | " in (out / "report.md").read_text()  # its steps and minutes listed


def test_rates_of_a_finished_run(full):
    """bench/ablate_rates.py reads the records back into the rates a scale's estimate uses."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ablate_rates", Path(__file__).parents[1] / "bench/ablate_rates.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    found = bench.rates(full[0])["rates"]
    assert {"step_reference", "step_smaller", "step_larger", "ltr_factor", "electra_factor", "head_ltr-bilstm",
            "ft_mrpc", "ft_squad", "fb_conll", "vocab", "data"} <= set(found)
    assert all(v > 0 for k, v in found.items() if k not in ("vocab", "data")), found  # those take ~0.01 s here


def test_rerun_after_a_kill_skips_finished_cells(inputs, tmp_path, monkeypatch):
    out = tmp_path / "abl"
    args = ("--only", "t5-ltr,t5-ltr-bilstm", "--tasks", "mrpc,squad", "--seeds", "1,2")
    ran: list[str] = []
    real = dict(cells_module.EXECUTORS)

    def killed_at_fourth_finetune(cell, plan, ctx):
        if cell.kind == "finetune" and sum(r.startswith("finetune") for r in ran) == 3:
            (ctx.path(cell.id).parent / f".{Path(cell.id).name}.abc.tmp").mkdir(parents=True)  # half-written
            raise KeyboardInterrupt  # as Ctrl-C in the middle of a cell
        ran.append(cell.id)
        return real[cell.kind](cell, plan, ctx)

    monkeypatch.setattr(cells_module, "EXECUTORS", dict.fromkeys(real, killed_at_fourth_finetune))
    assert ablate(inputs, out, *args) == 130
    first = records(out)
    assert set(first) == set(ran) and len([r for r in ran if r.startswith("finetune")]) == 3
    mtimes = {i: (out / "work" / "done" / (i.replace("/", "__") + ".json")).stat().st_mtime_ns for i in first}
    partial = json.loads((out / "report.json").read_text())
    assert partial["cells"]["done"] == len(first) < partial["cells"]["total"]
    assert "pending" in (out / "report.md").read_text()

    again: list[str] = []
    monkeypatch.setattr(cells_module, "EXECUTORS",
                        {k: (lambda c, p, x: (again.append(c.id), real[c.kind](c, p, x))[1]) for k in real})
    assert ablate(inputs, out, *args) == 0
    plan = build_plan("tiny", (1, 2), ("mrpc", "squad"), ["t5-ltr", "t5-ltr-bilstm"])
    assert not set(again) & set(first) and set(again) | set(first) == {c.id for c in plan.cells}
    assert all((out / "work" / "done" / (i.replace("/", "__") + ".json")).stat().st_mtime_ns == m
               for i, m in mtimes.items())
    assert not list((out / "work").rglob(".*.tmp"))
    report = json.loads((out / "report.json").read_text())
    assert report["cells"]["done"] == report["cells"]["total"]
    entry = report["tables"][0]["rows"][1]["entries"]["SQuAD (F1)"]
    assert entry["n"] == 2 and entry["sign"]["verdict"] in (HOLDS, REVERSED, UNRESOLVED)


def test_a_folder_started_otherwise_is_refused(inputs, tmp_path, capsys):
    out = tmp_path / "abl"
    (out).mkdir()
    (out / "ablation.json").write_text(json.dumps({"scale": "gpu", "corpus": [], "data_dir": ""}))
    assert ablate(inputs, out, "--only", "t5-bert", "--tasks", "mrpc", "--plan-only") == 0
    assert ablate(inputs, out, "--only", "t5-bert", "--tasks", "mrpc") == 2
    assert "was started with other settings (scale 'gpu' -> 'tiny'" in capsys.readouterr().err


@pytest.mark.parametrize("paper_gap, ours, reference, verdict", [
    (-9.2, [60.0, 61.0, 62.0], [70.0, 71.0, 72.0], HOLDS),  # gap -10, spread 1
    (-9.2, [72.0, 73.0, 74.0], [60.0, 61.0, 62.0], REVERSED),
    (-9.2, [70.0, 71.0, 72.0], [70.5, 71.5, 72.5], UNRESOLVED),  # gap -0.5 within spread 1
    (0.3, [70.0, 71.0, 72.0], [69.0, 70.0, 71.0], UNRESOLVED),  # gap 1 equals the spread: not more
    (0.3, [70.0, 71.0, 75.0], [60.0, 61.0, 62.0], HOLDS),  # spread is the larger std (2.65) < gap 10
    (-9.2, [60.0], [70.0], UNRESOLVED),  # one seed: no spread to compare with
    (-9.2, [], [70.0, 71.0], PENDING),
    (None, [60.0, 61.0], [70.0, 71.0], NO_SIGN),
    (0.0, [60.0, 61.0], [70.0, 71.0], NO_SIGN),
])
def test_sign_rule(paper_gap, ours, reference, verdict):
    assert sign_verdict(paper_gap, ours, reference)["verdict"] == verdict


@pytest.mark.parametrize("ours, reference, direction", [
    ([75.0, 76.0, 77.0], [70.0, 71.0, 72.0], "higher"),
    ([65.0, 66.0, 67.0], [70.0, 71.0, 72.0], "lower"),
    ([70.0, 71.0, 72.0], [70.5, 71.5, 72.5], UNRESOLVED),
    ([75.0], [70.0], UNRESOLVED),  # one seed
])
def test_a_row_without_a_paper_figure_gets_our_gap_by_the_same_rule(ours, reference, direction):
    out = sign_verdict(None, ours, reference)
    assert out["verdict"] == NO_SIGN and out["direction"] == direction and "paper_gap" not in out


def test_sign_rule_reports_the_gap_and_spread():
    out = sign_verdict(2.0, [3.0, 5.0], [1.0, 1.0])
    assert out == {"paper_gap": 2.0, "our_gap": 3.0, "spread": pytest.approx(1.4142, abs=1e-4), "verdict": HOLDS}


def test_plan_shares_cells_and_respects_only_tasks_seeds():
    full = build_plan("cpu-small", (1, 2, 3))
    ids = [c.id for c in full.cells]
    assert len(ids) == len(set(ids))
    assert len([i for i in ids if i.startswith("finetune/")]) == 56 * 3  # shared rows' cells counted once
    order = {c.id: n for n, c in enumerate(full.cells)}
    assert all(order[need] < order[c.id] for c in full.cells for need in c.needs)
    small = build_plan("cpu-small", (7,), ("conll",), ["t7"])
    assert [c.id for c in small.cells if c.kind == "pretrain"] == ["pretrain/bert"]
    assert {c.param("how") for c in small.cells if c.kind == "finetune"} == {
        "ft", "fb-embeddings", "fb-second-to-last", "fb-last", "fb-sum-last-four", "fb-concat-last-four", "fb-sum-all"}
    assert {c.param("seed") for c in small.cells if c.kind == "finetune"} == {7}
    assert full.estimate_s > 0


def test_two_processes_share_one_folder_and_run_each_cell_once(inputs, tmp_path):
    """Two `bertkit ablate` processes on one folder split the cells: each cell runs in exactly one
    of them, and both end with the whole report."""
    from pretrain_helpers import start

    out = tmp_path / "abl"
    args = ["ablate", "--corpus", str(inputs["corpus"]), "--data-dir", str(inputs["data"]), "--out", str(out),
            "--scale", "tiny", "--only", "t5", "--tasks", "mrpc,conll", "--seeds", "1,2"]
    procs = [start(args) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outputs]
    ran = [re.findall(r"^\[\d+/\d+\] (\S+) done", o[0], re.M) for o in outputs]
    plan = build_plan("tiny", (1, 2), ("mrpc", "conll"), ["t5"])
    assert sorted(ran[0] + ran[1]) == sorted(c.id for c in plan.cells)  # every cell once, in one process
    assert ran[0] and ran[1]  # both did some of the work
    assert not list((out / "work" / "claims").iterdir())  # every claim released
    report = json.loads((out / "report.json").read_text())
    assert report["cells"]["done"] == report["cells"]["total"]


def test_a_dead_processs_claim_is_taken_over(inputs, tmp_path, monkeypatch):
    out = tmp_path / "abl"
    args = ("--only", "t5-bert", "--tasks", "mrpc", "--seeds", "1")
    real = dict(cells_module.EXECUTORS)

    def interrupted(cell, plan, ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(cells_module, "EXECUTORS", dict.fromkeys(real, interrupted))
    assert ablate(inputs, out, *args) == 130  # the folder is started, no cell done
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    claims = out / "work" / "claims"
    (claims / "vocab").write_text(str(dead.pid))  # a process that died holding the first cell
    monkeypatch.setattr(cells_module, "EXECUTORS", real)
    assert ablate(inputs, out, *args) == 0
    assert "vocab" in records(out) and not (claims / "vocab").exists()


def test_time_left_trusts_measurements_only_as_they_accumulate():
    """A first cell 10x faster than its estimate does not promise a run 10x shorter; an hour of
    cells that all took twice their estimates does double the time left."""
    plan = build_plan("cpu-small", (1, 2, 3), None, None)
    first, *rest = plan.cells
    progress = Progress(plan.cells, set(), log=lambda line: None)
    estimate_left = sum(c.estimate_s for c in rest)
    progress.finished(first, first.estimate_s / 10)
    assert 0.8 * estimate_left < progress.remaining() < estimate_left
    for cell in rest[:60]:
        progress.finished(cell, 2 * cell.estimate_s)
    left = sum(c.estimate_s for c in rest[60:])
    assert 1.8 * left < progress.remaining() < 2 * left


def test_plan_only_estimates_from_this_cpu_once_calibrated(inputs, tmp_path, capsys):
    """--plan-only uses the scale's constants until --calibrate measures this CPU; the rates are then
    saved in the folder, so a later --plan-only gives the same estimates without measuring."""
    out, args = tmp_path / "abl", ("--only", "t5-ltr", "--tasks", "mrpc", "--seeds", "1", "--plan-only")

    def plan(*more) -> tuple[str, dict[str, str]]:
        capsys.readouterr()
        assert ablate(inputs, out, *args, *more) == 0
        text = capsys.readouterr().out
        return text.splitlines()[-1], dict(re.findall(r"^    (\S+)  (~\d+s)$", text, re.M))

    source, _ = plan()
    assert re.search(r"for 0 of (\d+) cells; the scale's constant rates", source), source
    source, measured = plan("--calibrate")
    total = len(measured)
    assert f"for {total} of {total} cells" in source and "constant" not in source, source
    assert (out / "work" / "calibration.json").is_file() and (out / "ablation.json").is_file()
    assert plan() == (source, measured)  # saved: nothing measured again, the same estimates
