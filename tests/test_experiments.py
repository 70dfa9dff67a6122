"""The experiment runner: a killed run continues without redoing finished cells, a changed param
reruns only its cells, the report marks what is missing, two processes on one folder never run
the same cell, a later session remakes the files its committed records need, and the plan's
estimate comes from this machine's calibration."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import experiment_helpers as toy
from bertkit.experiments import calibrate
from bertkit.experiments.core import Context
from bertkit.experiments.machine import cpu_key
from bertkit.experiments.run import Job, Session, run_experiment
from bertkit.io import read_json

HERE = Path(__file__).resolve().parent


def _job(tmp_path, **env) -> Job:
    env = {"journal": str(tmp_path / "journal.txt"), **{k: str(v) for k, v in env.items()}}
    return Job("toy", out=str(tmp_path / "results"), work=str(tmp_path / "work"), env=env)


def _ran(tmp_path) -> list[str]:
    return [cell for _, cell in toy.journal(tmp_path / "journal.txt")]


def _run(tmp_path, **env) -> int:
    return run_experiment(toy.EXPERIMENT, _job(tmp_path, **env), log=lambda line: None)


def test_a_rerun_skips_finished_cells_and_a_changed_param_reruns_only_its_cells(tmp_path):
    assert _run(tmp_path) == 0
    assert _ran(tmp_path) == ["base", "step/0", "step/1", "step/2", "step/3"]
    records = {p.name for p in (tmp_path / "results" / "cells").iterdir()}
    assert records == {"base.json", "step__0.json", "step__1.json", "step__2.json", "step__3.json"}
    _run(tmp_path)
    assert len(_ran(tmp_path)) == 5  # nothing again
    _run(tmp_path, lr2=0.5)  # step/2's own param
    assert _ran(tmp_path)[5:] == ["step/2"]
    record = read_json(tmp_path / "results" / "cells" / "step__2.json")
    assert record["params"]["lr"] == 0.5 and record["result"]["score"] == 10 + 2 * 0.5
    _run(tmp_path, lr2=0.5, size=2)  # base's param: base and everything made from it
    assert _ran(tmp_path)[6:] == ["base", "step/0", "step/1", "step/2", "step/3"]


def test_an_interrupted_run_keeps_its_cells_and_the_report_marks_the_missing(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, fail="step/2")
    report = (tmp_path / "results" / "report.md").read_text()
    assert "3 of 5 cells done; 2 not run yet" in report
    assert "| step/2 | … |" in report and "| step/3 | … |" in report and "| step/1 | {'score'" in report
    assert not list((tmp_path / "work" / "claims").iterdir())  # the claim was released
    _run(tmp_path)
    assert _ran(tmp_path) == ["base", "step/0", "step/1", "step/2", "step/2", "step/3"]
    assert "5 of 5 cells done." in (tmp_path / "results" / "report.md").read_text()


def _process(tmp_path, **env) -> subprocess.Popen:
    job = _job(tmp_path, **env)
    pairs = [f"{k}={v}" for k, v in job.env.items()]
    return subprocess.Popen([sys.executable, str(HERE / "experiment_helpers.py"), job.out, job.work, *pairs],
                            env={**os.environ, "PYTHONPATH": str(HERE)})


def test_a_killed_process_loses_only_the_cell_it_was_running(tmp_path):
    proc = _process(tmp_path, sleep=0.6, n=6)
    deadline = time.time() + 60
    while len(_ran(tmp_path)) < 3 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ran_before = _ran(tmp_path)
    finished = {p.stem for p in (tmp_path / "results" / "cells").iterdir()}
    assert len(ran_before) >= 3 and len(finished) == len(ran_before) - 1  # the running cell has no record
    _run(tmp_path, n=6)
    again = _ran(tmp_path)[len(ran_before):]
    assert again[0] == ran_before[-1]  # the killed cell, its dead claim taken over
    assert not {c.replace("/", "__") for c in again} & finished
    assert len({p.stem for p in (tmp_path / "results" / "cells").iterdir()}) == 7


def test_two_processes_on_one_folder_never_run_the_same_cell(tmp_path):
    procs = [_process(tmp_path, sleep=0.3, n=8) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    runs = toy.journal(tmp_path / "journal.txt")
    cells = [c for _, c in runs]
    assert sorted(cells) == sorted({*cells}) and len(cells) == 9  # each cell once
    assert len({pid for pid, _ in runs}) == 2  # and both processes took some


def test_a_later_session_remakes_the_files_its_committed_records_need(tmp_path):
    _run(tmp_path, n=2)
    uid = read_json(tmp_path / "results" / "cells" / "base.json")["uid"]
    import shutil

    shutil.rmtree(tmp_path / "work")  # a new checkout: the committed records, no work folder
    _run(tmp_path, n=3)  # one new cell needs base's file
    assert _ran(tmp_path)[3:] == ["base", "step/2"]
    assert read_json(tmp_path / "results" / "cells" / "base.json")["uid"] == uid  # base's record stays
    remade = read_json(tmp_path / "work" / "kept" / "base.remade.json")
    assert remade["result"] == remade["record_result"] == {"value": 10}
    assert read_json(tmp_path / "results" / "cells" / "step__2.json")["result"]["score"] == 10 + 2 * 0.1


def test_the_estimate_comes_from_this_machines_calibration(tmp_path, capsys):
    toy.CALIBRATIONS.clear()
    job = _job(tmp_path, n=3)
    lines = []
    run_experiment(toy.EXPERIMENT, job, log=lines.append, plan_only=True)
    assert toy.CALIBRATIONS == [["base", "step"]]
    saved = read_json(tmp_path / "work" / calibrate.CALIBRATION)
    fixed, per_unit = saved[cpu_key()]["rates"]["step"]
    assert fixed == 1.0 and 0.01 <= per_unit < 1.0  # the sleep, timed here
    plan = "\n".join(lines)
    assert f"step/2  ~{1.0 + 3 * per_unit:.0f}s" in plan and f"rates measured on {cpu_key()}" in plan
    run_experiment(toy.EXPERIMENT, job, log=lines.append, plan_only=True)
    assert len(toy.CALIBRATIONS) == 1  # kept for this CPU
    run_experiment(toy.EXPERIMENT, job, log=lines.append, plan_only=True, force_calibration=True)
    assert len(toy.CALIBRATIONS) == 2


def test_finished_cells_on_this_cpu_replace_the_calibration(tmp_path):
    _run(tmp_path, n=2, sleep=0.2)
    session = Session(toy.EXPERIMENT, _job(tmp_path, n=2))
    rates = calibrate.rates(toy.EXPERIMENT, "default", session.cells, session.ctx, log=lambda line: None,
                            records=session.records())
    assert 0.2 / 2 <= rates["step"][1] < 0.5  # (0.2 s per cell) / (1 and 2 units): measured, not the 10 ms sleep


def test_another_experiment_or_scale_in_the_same_folder_is_refused(tmp_path):
    from bertkit.errors import UserError

    _run(tmp_path, n=1)
    job = _job(tmp_path, n=1)
    job.scale = "tiny"
    with pytest.raises(UserError, match="other settings"):
        run_experiment(toy.EXPERIMENT, job, log=lambda line: None)


def test_context_names_records_and_work_files_apart(tmp_path):
    ctx = Context(tmp_path / "w", tmp_path / "r")
    assert ctx.record_file("a/b") == tmp_path / "r" / "a__b.json"
    assert ctx.path("a/b") == tmp_path / "w" / "a" / "b"


def test_a_need_read_by_its_record_alone_is_not_remade(tmp_path):
    """A cell that reads only a needed cell's record (an equal-time budget reading the reference's
    minutes) does not make a later session rebuild that cell's files."""
    import dataclasses
    import shutil

    def plan(scale, env):
        return [dataclasses.replace(c, records_only=("base",)) if c.id == "step/1" else c
                for c in toy.plan(scale, env)]

    exp = dataclasses.replace(toy.EXPERIMENT, plan=plan)
    run_experiment(exp, _job(tmp_path, n=1), log=lambda line: None)
    shutil.rmtree(tmp_path / "work")  # a new session: records, no files
    (tmp_path / "work" / "base").mkdir(parents=True)  # what step/1's toy executor happens to read
    (tmp_path / "work" / "base" / "value.txt").write_text("10")
    run_experiment(exp, _job(tmp_path, n=2), log=lambda line: None)
    assert _ran(tmp_path) == ["base", "step/0", "step/1"]  # step/1 ran; base was not made again for it
