"""The CLI's error contract, for every command, as a user types it (one subprocess per case).

A mistake in the flags or the inputs ends with exit status 2 and exactly one line on stderr,
"bertkit COMMAND: error: ...", that names the flag or the file (and line) at fault, with no
traceback, even when the command chose its threads from the load (the rows run without
OMP_NUM_THREADS, so the line that reports the choice waits to be printed); and nothing in the
output location is changed or left behind. Each row of `CASES`
(tests/cli_cases.py) is one mistake; its command line runs in a fresh folder holding the row's
`files` (what the output location held before), `$name` standing for a shared input (the
`fixtures` fixture). To cover a new command or flag, add rows there:
`test_table_is_large_and_every_command_has_cases` fails for a command with none.

The rows run in parallel subprocesses. Most fail before torch is imported (~0.05 s of CPU each);
the ~20 that get as far as loading a model or opening data cost ~1.3 s each, ~30 s in all.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import pickle
import shlex
import shutil
import string
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import pytest

from bertkit.cli import COMMANDS, main
from bertkit.cli.args import Parser
from cli_cases import CASES, Case
from finetune_helpers import write_conll, write_squad, write_sst2
from pretrain_helpers import tiny_args

ROOT = Path(__file__).resolve().parents[1]


class _Evil:
    """Unpickling this runs `touch PWNED` in the case's folder, which the snapshot would show."""

    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def _case_id(case: Case) -> str:
    return f"{CASES.index(case):03d}-{case.argv.split()[0]}"


@pytest.fixture(scope="module")
def fixtures(tiny_dir, pretraining_data, tmp_path_factory, progress) -> dict[str, str]:
    """$name -> text: the shared inputs the rows name (absolute paths, or flags)."""
    progress("test_cli_contract: building the shared inputs (a pretraining run, an index, an ONNX export)")
    root = tmp_path_factory.mktemp("contract-fixtures")
    write_sst2(root / "train.tsv", 8, 0)
    write_sst2(root / "dev.tsv", 4, 1)
    write_conll(root / "gold.conll", 3, 0)
    write_squad(root / "squad.json", 1, 0)
    (root / "sentences.txt").write_text("the movie was good .\na film\n", encoding="utf-8")
    (root / "pairs.tsv").write_text("anchor\tpositive\tnegative\na film\tthe movie\tparis\nberlin\ta city\tjohn\n",
                                    encoding="utf-8")
    evil = root / "evil"
    shutil.copytree(tiny_dir, evil)
    (evil / "model.safetensors").unlink()
    (evil / "pytorch_model.bin").write_bytes(pickle.dumps(_Evil()))
    data = pretraining_data / "nsp"
    run = root / "run"
    assert main(tiny_args(data, run, "--steps", "2", "--save-every", "1", "--eval-samples", "0")) == 0
    progress("test_cli_contract: built the pretraining run")
    assert main(["index", "--model", str(tiny_dir), "--input", str(root / "sentences.txt"), "--out",
                 str(root / "index"), "--no-progress"]) == 0
    progress("test_cli_contract: built the index")
    assert main(["export", "--model", str(tiny_dir), "--format", "onnx", "--out", str(root / "onnx")]) == 0
    progress("test_cli_contract: built the ONNX export")
    tiny_flags = shlex.join(tiny_args(data, run)[5:])  # --preset tiny --batch-size 13 --lr ... --config-json ...
    return {"tiny": str(tiny_dir), "evil": str(evil), "train": str(root / "train.tsv"), "dev": str(root / "dev.tsv"),
            "conll": str(root / "gold.conll"), "squad": str(root / "squad.json"), "text": str(root / "sentences.txt"),
            "data": str(data), "packed": str(pretraining_data / "packed"), "tok": str(pretraining_data / "tok"),
            "corpus": str(pretraining_data / "corpus.txt"), "run": str(run), "tiny_flags": tiny_flags,
            "index": str(root / "index"), "onnx": str(root / "onnx"), "pairs": str(root / "pairs.tsv")}


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder` (hidden ones too) -> a hash of its content."""
    return {str(p.relative_to(folder)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))}


def _state(text: str):
    path = Path(text)
    return snapshot(path) if path.is_dir() else path.read_bytes() if path.is_file() else text


def _run_case(case: Case, fixtures: dict, folder: Path) -> dict:
    folder.mkdir()
    for name, content in case.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    for name in case.copy:
        shutil.copytree(fixtures[name], folder / name)
    before = snapshot(folder)
    argv = shlex.split(string.Template(case.argv).substitute(fixtures))
    # No OMP_NUM_THREADS: each command chooses its threads from the load, so its threads line is
    # pending, and a mistake must still be the only line on stderr.
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "bertkit.cli", *argv], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)
    return {"status": done.returncode, "stderr": done.stderr, "before": before, "after": snapshot(folder)}


@pytest.fixture(scope="module")
def results(fixtures, tmp_path_factory, progress) -> dict[str, dict]:
    """Every row run once, a few at a time (each mostly waits on Python starting up)."""
    root = tmp_path_factory.mktemp("contract-cases")
    shared = {name: _state(path) for name, path in fixtures.items()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {pool.submit(_run_case, c, fixtures, root / _case_id(c)): _case_id(c) for c in CASES}
        out = {}
        for future in as_completed(futures):
            out[futures[future]] = future.result()
            if len(out) % 25 == 0 or len(out) == len(CASES):
                progress(f"test_cli_contract: {len(out)}/{len(CASES)} cases run")
    out["shared"] = {name: _state(fixtures[name]) == before for name, before in shared.items()}
    return out


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_mistake_is_one_line_exit_2_and_changes_nothing(case, results):
    got = results[_case_id(case)]
    stderr = got["stderr"]
    assert "Traceback" not in stderr, stderr
    assert got["status"] == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    command = "" if case.command == "nosuch" else f" {case.command}"
    assert lines[0].startswith(f"bertkit{command}") and ": error: " in lines[0], lines[0]
    assert case.expect in lines[0], lines[0]
    changed = {k for k in got["before"].keys() | got["after"].keys() if got["before"].get(k) != got["after"].get(k)}
    assert not changed, f"changed or left behind: {sorted(changed)}"


def test_no_shared_input_was_changed(results):
    assert all(results["shared"].values()), results["shared"]


def test_table_is_large_and_every_command_has_cases():
    assert len(CASES) >= 60 and len({_case_id(c) for c in CASES}) == len(CASES)  # no row twice
    covered = {c.command for c in CASES}
    assert not set(COMMANDS) - covered, f"commands without contract cases: {sorted(set(COMMANDS) - covered)}"


def _parsers():
    """(name, parser) of every command, sub-commands included (`tokenizer train`)."""
    for name, (module_name, _) in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:  # a command announced but not in this version
            continue
        parser = Parser(prog=f"bertkit {name}")
        module.add_arguments(parser)
        pending = [(name, parser)]
        while pending:
            name, parser = pending.pop()
            yield name, parser
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    pending += [(f"{name} {sub}", p) for sub, p in action.choices.items()]


def test_help_explains_every_option_and_shows_every_default(capsys):
    for name, parser in _parsers():
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            flag = action.option_strings[-1] if action.option_strings else action.dest
            assert action.help, f"bertkit {name} {flag}: no help text"
            if action.default not in (None, False) and not action.required:
                default = action.default if isinstance(action.default, str) else f"{action.default}"
                assert f"(default: {default})" in text, f"bertkit {name} {flag}: default not shown"
    assert main(["finetune", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "one full fine-tuning run per seed (default: 1,2,3)" in text and "per seed (default: 3)" in text
