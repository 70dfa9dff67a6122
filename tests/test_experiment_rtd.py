"""The RTD sweep at its tiny scale, end to end through `bertkit experiment rtd`: each arm pretrains
for the same useful FLOPs (the generator counted), its options reach the run, and the report
compares every ELECTRA arm with the MLM arm."""

from __future__ import annotations

import json

from ablate_helpers import write_inputs
from bertkit.ablate.curve import flops_per_step
from bertkit.cli import main
from bertkit.experiments import rtd


def test_each_arm_takes_its_options_and_the_same_flops():
    s = rtd.scale_of("cpu")
    budget = s.steps * flops_per_step(s, "mlm+nsp", "nsp")
    pretrains = {c.id: c for c in rtd.plan_of("cpu").cells if c.kind == "pretrain"}
    wide, narrow = pretrains["pretrain/electra-gen0.75"], pretrains["pretrain/electra-lr1e-3"]
    assert dict(wide.param("options")) == {"generator_width": 0.75} and narrow.param("options") is None
    assert wide.param("steps") < narrow.param("steps")  # a wider generator costs more per step
    for c in pretrains.values():
        spent = c.param("steps") * flops_per_step(s, c.param("objective"), "packed",
                                                  options=dict(c.param("options") or ()))
        assert abs(spent / budget - 1) < 1e-3, c.id
    assert s.train_options(dict(wide.params))["generator_width"] == 0.75


def test_the_sweep_runs_end_to_end(tmp_path, pretraining_data):
    inputs = write_inputs(tmp_path / "inputs", pretraining_data)
    out, work = tmp_path / "out", tmp_path / "work"
    assert main(["experiment", "rtd", "--scale", "tiny", "--out", str(out), "--work", str(work), "--threads", "1",
                 "--set", f"corpus={inputs['corpus']}", "--set", f"data_dir={inputs['data']}"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["arms"]) == {"mlm", "electra-gdes"}
    gdes = report["arms"]["electra-gdes"]
    assert gdes["options"] == {"embedding_sharing": "gdes"} and "rtd_auc" in gdes["val"]
    assert gdes["tasks"]["sst2"]["scores"] and "direction" in gdes["tasks"]["sst2"]["vs_mlm"]
    assert (out / "rtd.png").stat().st_size > 0
    assert "| electra-gdes | embedding_sharing gdes |" in (out / "report.md").read_text()
