"""A screenshot of TensorBoard showing a bertkit run's live curves (docs/img/tensorboard.png).

    python bench/tensorboard_screenshot.py [--corpus DIR] [--steps 600] [--out docs/img/tensorboard.png]

Learns a small vocabulary on the corpus (default: the inaugural addresses in ../shared/data),
prepares it, pretrains the tiny preset with the budget recipe and `--report-to tensorboard`, then
serves RUN/tensorboard with `tensorboard --logdir ... --host 127.0.0.1` on a free loopback port and
takes the screenshot with Debian's headless Chromium (`apt-get install -y chromium`). Everything
stays on this machine: TensorBoard listens on loopback only and is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
TAGS = "loss%7Clr%7Caccuracy%7Ctokens"  # the curves shown first: losses, lr, MLM accuracy, tokens/s


def bertkit(*args) -> None:
    from bertkit.cli import main

    if main([str(a) for a in args]) != 0:
        raise SystemExit(f"bertkit {args[0]} failed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"TensorBoard did not answer at {url} within {seconds:.0f}s")


def pretrain(corpus: Path, work: Path, steps: int) -> Path:
    bertkit("tokenizer", "train", "--input", corpus, "--vocab-size", "2000", "--out", work / "tok")
    bertkit("prepare", "--input", corpus, "--tokenizer", work / "tok", "--max-seq-len", "64", "--format", "packed",
            "--val-fraction", "0.05", "--workers", "1", "--out", work / "data")
    run = work / "run"
    bertkit("pretrain", "--data", work / "data", "--out", run, "--preset", "tiny", "--recipe", "budget",
            "--batch-size", "32", "--steps", steps, "--log-every", "5", "--eval-every", max(steps // 10, 1),
            "--eval-samples", "128", "--device", "cpu", "--report-to", "tensorboard")
    return run


def screenshot(logdir: Path, out: Path, chromium: str) -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir_spec", f"bertkit-tiny:{logdir}",
                               "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/data/runs")
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as profile:
            # The Scalars dashboard draws with SVG (Time Series needs WebGL, which headless Chromium lacks)
            url = f"http://127.0.0.1:{port}/#scalars&_smoothingWeight=0&tagFilter={TAGS}"
            subprocess.run([chromium, "--headless", "--no-sandbox", "--hide-scrollbars", f"--user-data-dir={profile}",
                            f"--screenshot={out}", "--window-size=1400,900", "--virtual-time-budget=15000", url],
                           check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"screenshot of TensorBoard on {logdir}: {out}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared"))
    p.add_argument("--corpus", type=Path, default=shared / "data" / "corpus" / "inaugural")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "tensorboard.png")
    p.add_argument("--work", type=Path, default=None, help="keep the run here (default: a temporary folder)")
    args = p.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Debian's chromium: apt-get install -y chromium")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        run = pretrain(args.corpus, work, args.steps)
        screenshot(run / "tensorboard", args.out.resolve(), chromium)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
