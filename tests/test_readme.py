"""The README's commands work as written, and every link in README.md and docs/ resolves.

`test_every_readme_command_runs` takes each `bertkit ...` line of the README's fenced bash blocks,
in order, and runs it as a user would, in one folder holding tiny files at the paths the README
names (`my_corpus/`, `train.tsv`, `SST-2/`, ...). Durations are the one thing changed:
`SHORTER` swaps a wall-clock budget for a few steps, and `serve` gets a free port and is stopped
with SIGTERM once it answers. A line the README gains is run too; one this test cannot run must be
added to `NOT_RUN` with the reason, or the test fails.
"""

from __future__ import annotations

import json
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from finetune_helpers import ENV, write_conll, write_squad, write_sst2

ROOT = Path(__file__).resolve().parents[1]
SHORTER = {"--minutes 30": "--steps 3", "--minutes 20": "--steps 2", "--minutes 60": "--steps 4"}
NOT_RUN: dict[str, str] = {}  # a README line's start -> why this test does not run it
MUST_EXIST = {  # a README line's start -> what it must have written (paths in the work folder)
    "bertkit tokenizer train": "vocab/vocab.txt",
    "bertkit prepare": "data/manifest.json",
    "bertkit pretrain --data data --preset": "run/model/model.safetensors",
    "bertkit pretrain --data data --init-from": "adapted/model/model.safetensors",
    "bertkit finetune --model run/model --task classify": "clf/model/finetune.json",
    "bertkit finetune --model run/model --task sst2": "sst2/results.json",
    "bertkit finetune --model run/model --task ner": "ner/results.json",
    "bertkit finetune --model run/model --task squad": "qa/results.json",
    "bertkit finetune --model run/model --task embedding": "bi/model/modules.json",
    "bertkit embed": "vectors.npy",
    "bertkit features": "features.npz",
    "bertkit index": "idx",
    "bertkit export": "clf-onnx/model_int8.onnx",
    "bertkit distill": "sst2-student/model/config.json",
}


def readme_commands(text: str) -> list[str]:
    """Every line of a ```bash block that starts with `bertkit`, continuation lines joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("bertkit "):
                commands.append(line.split("  #")[0].strip())
    return commands


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_workspace(root: Path) -> None:
    rng = random.Random(0)
    people = "anna bruno clara david elena felix greta hugo".split()
    things = "garden river letter window painting bridge market harbour".split()
    verbs = "painted crossed opened visited watched remembered built sold".split()

    def sentence() -> str:
        return f"{rng.choice(people)} {rng.choice(verbs)} the old {rng.choice(things)} near the {rng.choice(things)} ."

    corpus = root / "my_corpus"
    corpus.mkdir()
    for i in range(4):
        docs = ["\n".join(" ".join(sentence() for _ in range(3)) for _ in range(6)) for _ in range(25)]
        (corpus / f"part{i}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    for name, n in (("train.tsv", 48), ("dev.tsv", 16)):
        rows = [(f"{sentence()} it was {'good' if y else 'bad'} .", "yes" if y else "no")
                for y in (True, False) * (n // 2)]
        (root / name).write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
    (root / "SST-2").mkdir()
    write_sst2(root / "SST-2" / "train.tsv", 48, 1)
    write_sst2(root / "SST-2" / "dev.tsv", 16, 2)
    (root / "conll").mkdir()
    write_conll(root / "conll" / "train.txt", 24, 1)
    write_conll(root / "conll" / "dev.txt", 8, 2)
    (root / "squad").mkdir()
    write_squad(root / "squad" / "dev-v1.1.json", 4, 1)
    (root / "sentences.txt").write_text("".join(sentence() + "\n" for _ in range(12)), encoding="utf-8")
    pairs = [(sentence(), sentence()) for _ in range(24)]
    (root / "pairs.tsv").write_text("anchor\tpositive\n" + "".join(f"{a}\t{p}\n" for a, p in pairs),
                                    encoding="utf-8")
    passages = [{"_id": f"p{i}", "title": "", "text": sentence()} for i in range(30)]
    (root / "passages.jsonl").write_text("".join(json.dumps(p) + "\n" for p in passages), encoding="utf-8")


def _shorter(command: str) -> str:
    for long, short in SHORTER.items():
        command = command.replace(long, short)
    return command


def _run(command: str, cwd: Path) -> None:
    argv = [sys.executable, "-m", "bertkit.cli", *shlex.split(command)[1:]]
    done = subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, f"{command}\n{done.stderr[-3000:]}"


def _serve(command: str, cwd: Path) -> None:
    """Start the server, wait until /health answers 200, embed one text, then SIGTERM: exit 0."""
    port = _free_port()
    command = re.sub(r"--port \d+", f"--port {port}", command)
    argv = [sys.executable, "-m", "bertkit.cli", *shlex.split(command)[1:]]
    proc = subprocess.Popen(argv, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"{command}\nexited {proc.returncode}: {proc.stderr.read()[-3000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"{command}: not healthy within 120 s"
            time.sleep(0.3)
        body = json.dumps({"inputs": ["the old garden"]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/embed", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            assert len(json.loads(r.read())[0]) > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, f"{command}: exit {code} after SIGTERM"


def test_readme_commands_are_found():
    commands = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(commands) >= 15
    assert commands[0].startswith("bertkit tokenizer train")  # the first block is the user's own data
    for start in [*NOT_RUN, *MUST_EXIST]:
        assert any(c.startswith(start) for c in commands), f"no README command starts with {start!r}"


@pytest.mark.slow
def test_every_readme_command_runs(tmp_path):
    _write_workspace(tmp_path)
    for command in readme_commands((ROOT / "README.md").read_text(encoding="utf-8")):
        if any(command.startswith(start) for start in NOT_RUN):
            continue
        command = _shorter(command)
        if command.startswith("bertkit serve"):
            _serve(command, tmp_path)
            continue
        _run(command, tmp_path)
        for start, path in MUST_EXIST.items():
            if command.startswith(start):
                assert (tmp_path / path).exists(), f"{command}: wrote no {path}"
    vectors = np.load(tmp_path / "vectors.npy")
    assert vectors.shape[0] == 12
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)  # --normalize


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_link_in_readme_and_docs_resolves():
    broken = []
    for page in _markdown_files():
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            path = target.split("#")[0]
            if not path or re.match(r"[a-z]+:", path):
                continue
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "\n".join(broken)


def test_readme_is_a_map():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "the README carries no dates"
    assert not re.search(r"\d+ passed", text), "the README pins no test counts"
    first = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1).strip().splitlines()
    assert len(first) == 2 and "bertkit demo" in first[0] and "pytest" in first[1]
