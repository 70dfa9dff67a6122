"""CPU inference speed, one run, same inputs: transformers, ONNX Runtime the usual way, and bertkit's paths.

    OMP_NUM_THREADS=1 python bench/cpu_speed.py --json bench/results/cpu_speed.json
    OMP_NUM_THREADS=1 python bench/cpu_speed.py --family all --json bench/results/family_speed.json

With `--family` (a family bertkit reads, or all of them), each family's encoder against
transformers' eager forward of that family on the same weights (bench/family_speed.py).

BERT-base shape (12 layers, 768 wide, random weights, seed 0: speed does not depend on the
values, and no BERT-base checkpoint is available offline), batch 8 x 128 tokens, one thread.
One bertkit `BertModel` is saved as a model directory; transformers' `BertModel` loads that
directory, so every contender runs the same weights on the same batch:

- transformers fp32 (the 1.00x reference), eager PyTorch;
- ORT fp32 / ORT int8: transformers' model traced by `torch.onnx.export`, run in ONNX Runtime
  (default session options: every graph optimisation on), and that graph quantised by
  `onnxruntime.quantization.quantize_dynamic` with its defaults: the usual way;
- bertkit torch fp32, bertkit torch int8 (`bertkit.quantize`, per-channel, oneDNN);
- bertkit ONNX fp32 / int8: `bertkit export --format onnx [--int8]` of the same directory
  (fused attention, per-channel int8 weights), run through `bertkit.export.backend.OnnxModel`.

Contenders run alternately in every round (each once per round, the order rotating), after a
warm-up round; the table gives each one's median and its ratio to transformers' median, and
the median of the per-round ratios ("paired"), steadier on a shared machine. Outputs are checked
first: every fp32 path against transformers (max abs difference of the last hidden state).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))


def make_dir(folder: Path, layers: int, width: int, vocab: int) -> Path:
    from bertkit import BertConfig, BertModel, Tokenizer

    tok_dir = folder / "tok"
    tok_dir.mkdir()
    words = [f"w{i}" for i in range(vocab - 5)]
    (tok_dir / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers,
                        num_attention_heads=width // 64, intermediate_size=4 * width, max_position_embeddings=512)
    model_dir = folder / "model"
    BertModel(config).save_pretrained(model_dir, tokenizer=Tokenizer.from_pretrained(tok_dir))
    return model_dir


def ort_session(path: Path, level: str = "all"):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC}[level]
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def hf_onnx(model_dir: Path, folder: Path, feed: dict) -> tuple[Path, Path]:
    """transformers -> ONNX (torch.onnx.export) -> quantize_dynamic with its defaults."""
    import transformers
    from onnxruntime.quantization import quantize_dynamic

    class ByName(torch.nn.Module):  # transformers' forward takes these by keyword
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    hf = ByName(transformers.BertModel.from_pretrained(model_dir, attn_implementation="eager")).eval()
    fp32, int8 = folder / "hf.onnx", folder / "hf_int8.onnx"
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]} | {"pooler_output": {0: "batch"}}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(hf, tuple(torch.from_numpy(feed[n]) for n in names), str(fp32), input_names=names,
                          output_names=["last_hidden_state", "pooler_output"], dynamic_axes=axes, opset_version=17,
                          dynamo=False)
        quantize_dynamic(str(fp32), str(int8))
    return fp32, int8


def _real_rows(hidden: np.ndarray, feed: dict) -> np.ndarray:
    return hidden[feed["attention_mask"].astype(bool)]  # (real tokens, C): padding rows are don't-care


def _by_length(feed: dict) -> list[tuple[np.ndarray, dict]]:
    """Sequence bucketing inside a batch: (row indices, an unpadded feed) per distinct length."""
    lengths = feed["attention_mask"].sum(1)
    return [(rows, {k: v[rows, :n] for k, v in feed.items()})
            for n in sorted(set(lengths.tolist())) for rows in [np.flatnonzero(lengths == n)]]


def contenders(model_dir: Path, folder: Path, feeds: list[dict], varlen: bool) -> dict:
    """name -> (a no-argument callable giving every batch's real-token vectors as numpy, precision)."""
    import transformers

    from bertkit.export.backend import OnnxModel
    from bertkit.export.writer import export_onnx
    from bertkit.model import BertModel, set_unpadding
    from bertkit.quantize import quantize_int8

    tensors = [{k: torch.from_numpy(v) for k, v in f.items()} for f in feeds]
    hf = transformers.BertModel.from_pretrained(model_dir).eval()
    ours = BertModel.from_pretrained(model_dir).eval()
    ours8 = quantize_int8(ours)
    hf_fp32, hf_int8 = hf_onnx(model_dir, folder, feeds[0])
    export_onnx(model_dir, folder / "export", int8=True, log=lambda s: print("bertkit export:", s))
    sessions = {"ORT fp32 (transformers export)": ort_session(hf_fp32),
                "ORT int8 (quantize_dynamic)": ort_session(hf_int8)}
    onnx32 = OnnxModel.load(folder / "export", threads=1)
    onnx8 = OnnxModel.load(folder / "export", int8=True, threads=1)

    def torch_call(model):
        def call():
            with torch.inference_mode():
                return np.concatenate([_real_rows(model(**t).last_hidden_state.numpy(), f)
                                       for t, f in zip(tensors, feeds)])
        return call

    def ort_call(run):
        return lambda: np.concatenate([_real_rows(run(f), f) for f in feeds])

    def bucketed(model):
        def call():
            out = []
            for f in feeds:
                hidden = np.zeros(f["input_ids"].shape + (model.config.hidden_size,), np.float32)
                for rows, part in _by_length(f):
                    hidden[rows, : part["input_ids"].shape[1]] = model.run(**part)["token_embeddings"]
                out.append(_real_rows(hidden, f))
            return np.concatenate(out)
        return call

    out = {"transformers fp32": (torch_call(hf), "fp32")}
    for name, session in sessions.items():
        out[name] = (ort_call(lambda f, s=session: s.run(["last_hidden_state"], f)[0]), name.split()[1])
    out["bertkit torch fp32"] = (torch_call(ours), "fp32")
    out["bertkit torch int8"] = (torch_call(ours8), "int8")
    out["bertkit ONNX fp32"] = (ort_call(lambda f: onnx32.run(**f)["token_embeddings"]), "fp32")
    out["bertkit ONNX int8"] = (ort_call(lambda f: onnx8.run(**f)["token_embeddings"]), "int8")
    if varlen:
        out["bertkit torch int8 unpadded"] = (torch_call(set_unpadding(quantize_int8(ours))), "int8")
        out["bertkit ONNX int8 bucketed"] = (bucketed(onnx8), "int8")
    return out


def make_feeds(batch: int, seq: int, lengths: str | None, batches: int, vocab: int) -> list[dict]:
    """Full-length (B, seq) batches, or batches of dev-set lengths (`bertkit.benchmark.lengths`)
    padded on the right to each batch's longest, as a padded runtime sees them."""
    rng = np.random.default_rng(0)
    if lengths:
        from bertkit.benchmark.lengths import dev_lengths, sample_batches

        rows = sample_batches(dev_lengths(lengths)[0], batch, batches)
    else:
        rows = [np.full(batch, seq)]
    feeds = []
    for row in rows:
        T = int(row.max())
        ids = rng.integers(5, vocab, size=(batch, T), dtype=np.int64)
        mask = (np.arange(T)[None] < row[:, None]).astype(np.int64)
        ids[:, 0] = 2
        ids[mask == 0] = 0
        feeds.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    return feeds


def time_all(calls: dict, rounds: int, warmup: int) -> dict[str, dict[str, list[float]]]:
    """Per contender, every timed round's wall-clock and CPU seconds (process time: on a machine
    shared with other jobs, the CPU time a one-thread forward used is its cost; the wall clock
    adds however long the scheduler made it wait)."""
    names = list(calls)
    times = {n: {"wall": [], "cpu": []} for n in names}
    for r in range(warmup + rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            wall, cpu = time.perf_counter(), time.process_time()
            calls[n][0]()
            if r >= warmup:
                times[n]["wall"].append(time.perf_counter() - wall)
                times[n]["cpu"].append(time.process_time() - cpu)
        print(f"round {r + 1}/{warmup + rounds} (cpu s): " + ", ".join(
            f"{n} {times[n]['cpu'][-1]:.2f}" for n in names if times[n]["cpu"]), flush=True)
    return times


def report(calls: dict, times: dict, batch: int, diffs: dict, clock: str) -> list[dict]:
    ref = times["transformers fp32"][clock]
    base = statistics.median(ref)
    rows = []
    for n in calls:
        mine = times[n][clock]
        med = statistics.median(mine)
        rows.append({"contender": n, "precision": calls[n][1], "clock": clock, "median_s": med,
                     "seq_per_s": batch / med, "ratio": base / med,
                     "paired_ratio": statistics.median(a / b for a, b in zip(ref, mine)),
                     "max_abs_diff_vs_transformers": diffs[n], "times_s": mine})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| contender | seq/s | vs transformers fp32 (paired) | max abs diff |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['contender']} | {r['seq_per_s']:.2f} | {r['ratio']:.2f}x ({r['paired_ratio']:.2f}x) | "
                     f"{r['max_abs_diff_vs_transformers']:.1e} |")
    best = max((r for r in rows if r["contender"].startswith("bertkit")), key=lambda r: r["ratio"])
    ort8 = next(r for r in rows if r["contender"].startswith("ORT int8"))
    paired = statistics.median(a / b for a, b in zip(ort8["times_s"], best["times_s"]))
    lines.append(f"\nbertkit's fastest: {best['contender']} {best['ratio']:.2f}x transformers fp32, "
                 f"{best['ratio'] / ort8['ratio']:.2f}x ORT int8 (paired {paired:.2f}x)")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--lengths", choices=("sst2", "mrpc", "squad"),
                   help="batches of this dev set's token lengths (padded per batch) instead of full --seq rows")
    p.add_argument("--batches", type=int, default=3, help="with --lengths: batches per timed call")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", type=Path)
    p.add_argument("--family", help="a family bertkit reads (bench/family_speed.py), or all: each against transformers")
    args = p.parse_args()
    torch.set_num_threads(1)
    vocab = 30522
    feeds = make_feeds(args.batch, args.seq, args.lengths, args.batches, vocab)
    if args.family:
        return families(args, feeds)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model_dir = make_dir(folder, args.layers, args.width, vocab)
        calls = contenders(model_dir, folder, feeds, varlen=args.lengths is not None)
        want = calls["transformers fp32"][0]()
        diffs = {n: float(np.abs(c() - want).max()) for n, (c, _) in calls.items()}
        print("max abs difference vs transformers:", json.dumps(diffs, indent=1), flush=True)
        times = time_all(calls, args.rounds, args.warmup)
    results = {clock: report(calls, times, args.batch, diffs, clock) for clock in ("cpu", "wall")}
    for clock, rows in results.items():
        print(f"\n{clock} time:\n{table(rows)}")
    if args.json:
        import onnxruntime
        import transformers

        env = {"torch": torch.__version__, "transformers": transformers.__version__,
               "onnxruntime": onnxruntime.__version__, "cpu": platform.processor() or platform.machine(),
               "threads": 1, "load_average": os.getloadavg(),
               "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"shape": vars(args) | {"json": str(args.json)}, "env": env, **results},
                                        indent=2) + "\n")
    return 0


def families(args, feeds: list[dict]) -> int:
    """Every family asked for, each timed against transformers' eager forward of its own kind."""
    import family_speed

    names = list(family_speed.FAMILIES) if args.family == "all" else args.family.split(",")
    results = {}
    for family in names:
        print(f"\n== {family}", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            calls = family_speed.contenders(family, Path(tmp), feeds, varlen=args.lengths is not None)
            want = calls["transformers fp32"][0]()
            diffs = {n: float(np.abs(c() - want).max()) for n, (c, _) in calls.items()}
            times = time_all(calls, args.rounds, args.warmup)
        results[family] = {clock: report(calls, times, args.batch, diffs, clock) for clock in ("cpu", "wall")}
        print(family_speed.table(results[family]["cpu"]), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"shape": vars(args) | {"json": str(args.json)}, "env": environment(),
                                         "families": results}, indent=2) + "\n")
    return 0


def environment() -> dict:
    import subprocess

    import transformers

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "cpu": fields.get("Model name", platform.processor()).strip(),
            "cpu_family": fields.get("CPU family", "").strip(), "flags_avx512_bf16": "avx512_bf16" in fields.get(
                "Flags", ""), "threads": 1, "load_average": os.getloadavg(),
            "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


if __name__ == "__main__":
    sys.exit(main())
