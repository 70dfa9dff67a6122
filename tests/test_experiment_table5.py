"""Table 5's experiments at their tiny scales, end to end through `bertkit experiment`: the shape
sweep and the compute curve calibrate, run, write one record per cell and a report, and a rerun
runs nothing."""

from __future__ import annotations

import json

from ablate_helpers import write_inputs
from bertkit.cli import main


def _run(name, inputs, out, work, *extra) -> int:
    return main(["experiment", name, "--scale", "tiny", "--out", str(out), "--work", str(work), "--threads", "1",
                 "--set", f"corpus={inputs['corpus']}", "--set", f"data_dir={inputs['data']}", *extra])


def test_the_shape_sweep_runs_end_to_end_and_a_rerun_runs_nothing(tmp_path, pretraining_data):
    inputs = write_inputs(tmp_path / "inputs", pretraining_data)
    out, work = tmp_path / "out", tmp_path / "work"
    assert _run("t5-shapes", inputs, out, work) == 0
    cells = sorted(p.name for p in (out / "cells").iterdir())
    assert cells == ["data__nsp.json", "data__packed.json", "pretrain__a.json", "pretrain__b.json", "vocab.json"]
    report = json.loads((out / "report.json").read_text())
    assert set(report["arms"]) == {"a", "b"} and all(len(a["curve"]) >= 4 for a in report["arms"].values())
    assert (out / "shapes.png").stat().st_size > 0 and "| a | mlm+nsp |" in (out / "report.md").read_text()
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    assert _run("t5-shapes", inputs, out, work) == 0
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()} == stamps


def test_the_compute_curve_runs_end_to_end_with_one_record_per_cell(tmp_path, pretraining_data):
    inputs = write_inputs(tmp_path / "inputs", pretraining_data)
    out, work = tmp_path / "out", tmp_path / "work"
    assert _run("table5", inputs, out, work, "--only", "finetune/*/sst2/*/seed1") == 0
    records = [json.loads(p.read_text()) for p in (out / "cells").iterdir()]
    pretrains = sorted(r["id"] for r in records if r["kind"] == "pretrain")
    finetunes = [r for r in records if r["kind"] == "finetune"]
    assert len(pretrains) == 8 and len(finetunes) == 8  # 4 objectives x 2 budgets, SST-2 seed 1 each
    assert all("accuracy" in r["result"]["dev"] and r["cpu_key"] for r in finetunes)
    assert "Table 5 on a compute curve" in (out / "report.md").read_text()
    assert (work / "calibration.json").is_file()
