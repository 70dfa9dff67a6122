"""One place chooses the thread count of every command: --threads, else OMP_NUM_THREADS, else the load.

The choice is applied once the flags are checked and reported as the first line on stderr when it
was made from the load (a count the user fixed is not repeated back); a mistake caught by the
checks is still one line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.threads import choose_threads

ROOT = Path(__file__).resolve().parents[1]


def test_the_flag_then_the_environment_then_the_load(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert choose_threads(5).count == 5 and not choose_threads(5).chosen
    assert (choose_threads().count, choose_threads().reason, choose_threads().chosen) == (3, "OMP_NUM_THREADS", False)
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    for load, expected, waits in ((0.0, 4, ""), (1.2, 3, ", passive wait"), (2.6, 1, ""), (9.0, 1, "")):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        got = choose_threads()
        assert (got.count, got.chosen) == (expected, True), load
        assert got.line() == f"threads: {expected}{waits} (4 cores, load {load:.1f}; --threads N to override)"


def test_the_wait_policy_is_passive_beside_other_work_and_always_in_serve(monkeypatch):
    """More than one thread on a machine that is not idle (or in a server) waits passively; one
    thread has nothing to wait for; OMP_WAIT_POLICY in the environment wins."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    for load, server, expected in ((0.0, False, None), (0.0, True, "PASSIVE"), (0.6, False, "PASSIVE"),
                                   (3.5, True, None)):  # 3.5 of 4 cores busy: one thread
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert choose_threads(server=server).wait_policy == expected, (load, server)
    assert choose_threads(2, server=True).wait_policy == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert choose_threads(2, server=True).wait_policy is None


def test_the_wait_policy_reaches_openmp_before_torch_loads(tmp_path):
    """In a fresh interpreter: `apply_threads` sets OMP_WAIT_POLICY before torch is imported."""
    script = ("import os, sys; from bertkit.threads import Threads, apply_threads; "
              "apply_threads(Threads(2, 'test', False, 'PASSIVE')); import torch; "
              "print(os.environ['OMP_WAIT_POLICY'], torch.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.stdout.split() == ["PASSIVE", "2"], done.stderr


def _bertkit(args: list[str], cwd: Path, omp: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    if omp is not None:
        env["OMP_NUM_THREADS"] = omp
    return subprocess.run([sys.executable, "-m", "bertkit.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize("omp, flags, line", [
    (None, [], r"bertkit embed: threads: [1-9]\d*(, passive wait)? \(\d+ cores, load \d+\.\d; "
               r"--threads N to override\)"),
    (None, ["--threads", "1"], None),
    ("1", [], None),
])
def test_a_command_reports_the_count_it_chose_in_its_first_line(tiny_dir, tmp_path, omp, flags, line):
    (tmp_path / "in.txt").write_text("a film\n", encoding="utf-8")
    done = _bertkit(["embed", "--model", str(tiny_dir), "--input", "in.txt", "--pooling", "mean", "--out", "v.npy",
                     "--precision", "fp32", *flags], tmp_path, omp)  # fp32 chosen: no line on a bf16 CPU first
    assert done.returncode == 0, done.stderr
    first = (done.stderr.splitlines() or [""])[0]
    assert re.fullmatch(line, first) if line else "threads" not in done.stderr, done.stderr


def test_a_mistake_found_by_the_checks_is_still_one_line_without_omp(tiny_dir, tmp_path):
    (tmp_path / "in.txt").write_text("a film\n", encoding="utf-8")
    (tmp_path / "v.npy").write_bytes(b"old")
    done = _bertkit(["embed", "--model", str(tiny_dir), "--input", "in.txt", "--pooling", "mean", "--out", "v.npy"],
                    tmp_path, None)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith("bertkit embed: error: v.npy: exists"), lines
    done = _bertkit(["embed", "--threads", "0"], tmp_path, None)
    assert done.returncode == 2 and "argument --threads" in done.stderr and len(done.stderr.splitlines()) == 1


def test_commands_without_a_model_take_no_threads_flag():
    from bertkit.cli import main

    assert main(["tokenize", "--threads", "2", "x"]) == 2


def test_the_count_reaches_torch(tiny_dir, tmp_path):
    """In a fresh interpreter (torch loaded by the command, after the choice): the count from
    --threads, or the one reported, is torch's."""
    (tmp_path / "in.txt").write_text("a film\n", encoding="utf-8")
    script = ("import sys; from bertkit.cli import main; code = main(sys.argv[1:]); "
              "import torch; print(torch.get_num_threads()); sys.exit(code)")
    embed = ["embed", "--model", str(tiny_dir), "--input", "in.txt", "--pooling", "mean", "--overwrite"]
    for flags in (["--threads", "1", "--out", "a.npy"], ["--out", "b.npy"]):
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
        done = subprocess.run([sys.executable, "-c", script, *embed, *flags], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        reported = re.search(r"threads: (\d+) ", done.stderr)
        expected = 1 if "--threads" in flags else int(reported.group(1))
        assert int(done.stdout.split()[-1]) == expected, (flags, done.stdout, done.stderr)
