"""How much can batching gain on this CPU? A roofline for `bench/serve_load.py`'s batching ratio.

The serve load test compares a batching server with one that runs one request per forward pass;
both spend nearly all their CPU in the model (py-spy: about 88% of the server's samples in the
forward pass when batching), so the ratio is bounded by how much faster the model runs a text in
a batch of 32 than alone. This script measures, on one thread and in CPU time (so a neighbour on
the other core changes little):

- the model's CPU milliseconds per text at batch 1 and batch 32 (the unpadded path the server
  runs), fp32 and torch int8, on the serve test's SST-2 sentences;
- the CPU's best dense rates on BERT-base's feed-forward shape: an fp32 matmul, and the int8
  GEMM alone (`torch._int_mm`, operands already int8);
- the model's FLOPs per text (the encoder's matmuls and attention), hence the ceiling: batch-1
  time over the time the text would take at the CPU's best rate;
- for the ONNX Runtime goal: the time 1.25x ORT int8 allows a BERT-base batch, against the time
  its linear layers alone take at the int8 GEMM peak and its attention at the fp32 peak (ORT's
  and bertkit's times from `bench/cpu_speed.py`'s JSON).

    OMP_NUM_THREADS=1 python bench/batching_ceiling.py [--texts 256] [--json bench/results/batching_ceiling.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import serve_load  # the load test's sentences and model

ROOT = Path(__file__).resolve().parents[1]


def cpu_ms(step, repeat: int, fastest: bool = False) -> float:
    """CPU milliseconds of `step` over `repeat` runs after one warm-up: the median, or the fastest
    run (for a peak rate, which noise can only lower)."""
    step()
    times = []
    for _ in range(repeat):
        start = time.process_time()
        step()
        times.append(time.process_time() - start)
    return (min(times) if fastest else sorted(times)[len(times) // 2]) * 1000


def linear_flops(config, L: int) -> int:
    """FLOPs (2 per multiply-add) of one L-token text's linear layers: per layer and token, the
    QKV and output projections (4 C^2) and the feed-forward (2 C I)."""
    C = config.hidden_size
    return config.num_hidden_layers * 2 * L * (4 * C * C + 2 * C * config.intermediate_size)


def attention_flops(config, L: int) -> int:
    """FLOPs of one L-token text's attention products, Q K^T and softmax(.) V: 2 x L x L x C each, per layer."""
    return config.num_hidden_layers * 2 * 2 * L * L * config.hidden_size


def flops_per_text(config, lengths: list[int]) -> tuple[float, float]:
    """Mean FLOPs per text over texts of these token lengths: (linear layers, attention)."""
    n = len(lengths)
    return sum(linear_flops(config, L) for L in lengths) / n, sum(attention_flops(config, L) for L in lengths) / n


def dense_peaks(repeat: int) -> dict:
    """The CPU's best rates (fastest of `repeat` runs) on BERT-base's feed-forward shape at
    8 x 128 tokens (1024 x 768 x 3072): an fp32 matmul, and `torch._int_mm` on operands already
    int8 (the int8 GEMM alone, no quantisation or rescaling: an upper bound on any int8 linear)."""
    M, K, N = 1024, 768, 3072
    x, w = torch.randn(M, K), torch.randn(N, K)
    xq, wq = torch.randint(-127, 128, (M, K), dtype=torch.int8), torch.randint(-127, 128, (K, N), dtype=torch.int8)
    ops = 2 * M * K * N
    with torch.inference_mode():
        fp32 = cpu_ms(lambda: torch.nn.functional.linear(x, w), repeat, fastest=True)
        int8 = cpu_ms(lambda: torch._int_mm(xq, wq), repeat, fastest=True)
    return {"shape": [M, K, N], "fp32_gflops": ops / fp32 / 1e6, "int8_gops": ops / int8 / 1e6}


def ort_bound(peaks: dict, cpu_speed: Path) -> dict | None:
    """Issue 14's other goal, bertkit int8 at 1.25x ONNX Runtime int8 on BERT-base (batch 8 x 128,
    one thread): the time that needs, against the time BERT-base's linear layers alone take at
    the int8 GEMM peak, from `bench/cpu_speed.py`'s saved CPU-clock medians."""
    if not cpu_speed.is_file():
        return None
    rows = {r["contender"]: r for r in json.loads(cpu_speed.read_text())["cpu"]}
    ort = next(r["median_s"] for name, r in rows.items() if name.startswith("ORT int8"))
    ours = rows["bertkit torch int8"]["median_s"]
    from bertkit import BertConfig

    base = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072)
    linear_s = 8 * linear_flops(base, 128) / (peaks["int8_gops"] * 1e9)
    attention_s = 8 * attention_flops(base, 128) / (peaks["fp32_gflops"] * 1e9)  # fp32 in every contender
    shown = cpu_speed.resolve()
    shown = shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown
    return {"from": str(shown), "ort_int8_s": ort, "bertkit_int8_s": ours, "goal_s": ort / 1.25,
            "linear_layers_at_int8_peak_s": linear_s, "attention_at_fp32_peak_s": attention_s,
            "left_for_the_rest_s": ort / 1.25 - linear_s - attention_s}


def model_rates(texts: list[str], int8: bool, repeat: int) -> dict:
    """The served model's CPU ms per text at batch 32 and batch 1, and the texts' FLOPs."""
    from bertkit.embed import embed_texts

    model, tokenizer = serve_load.served_model(int8)
    ms = {}
    for size in (32, 1):
        def step(size=size):
            embed_texts(model, tokenizer, texts, pooling="mean", batch_size=size, max_length=256, progress=False)
        ms[size] = cpu_ms(step, repeat) / len(texts)
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts, max_length=256)]
    linear, attention = flops_per_text(model.config, lengths)
    return {"batch1_ms_per_text": ms[1], "batch32_ms_per_text": ms[32], "model_ratio": ms[1] / ms[32],
            "mean_tokens": sum(lengths) / len(lengths), "linear_flops_per_text": linear,
            "attention_flops_per_text": attention}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--texts", type=int, default=256, help="SST-2 sentences timed at each batch size")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (the median is kept)")
    p.add_argument("--cpu-speed", type=Path, default=ROOT / "bench" / "results" / "cpu_speed_base.json",
                   help="bench/cpu_speed.py's JSON, for the ONNX Runtime int8 bound")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    texts = serve_load.sentences(args.texts)
    peaks = dense_peaks(args.repeat)
    result: dict = {"threads": 1, "texts": len(texts), "dense": peaks}
    for name, int8, peak in (("fp32", False, peaks["fp32_gflops"]), ("int8", True, peaks["int8_gops"])):
        rates = model_rates(texts, int8, args.repeat)
        # int8 models quantise the linear layers only: attention runs in fp32 in both
        at_peak_ms = (rates["linear_flops_per_text"] / peak
                      + rates["attention_flops_per_text"] / peaks["fp32_gflops"]) / 1e6
        rates |= {"batch32_share_of_peak": at_peak_ms / rates["batch32_ms_per_text"],
                  "ceiling_ratio": rates["batch1_ms_per_text"] / at_peak_ms}
        result[name] = rates
        print(f"{name}: {rates['batch1_ms_per_text']:.2f} ms/text at batch 1, {rates['batch32_ms_per_text']:.2f} at "
              f"batch 32 ({rates['model_ratio']:.2f}x); at the CPU's dense peak {at_peak_ms:.2f} ms "
              f"(batch 32 runs at {rates['batch32_share_of_peak']:.0%} of it): ceiling "
              f"{rates['ceiling_ratio']:.2f}x", flush=True)
    bound = ort_bound(peaks, args.cpu_speed)
    if bound is not None:
        result["ort_int8_goal"] = bound
        print(f"1.25x ONNX Runtime int8 on BERT-base needs {bound['goal_s']:.3f} s a batch (bertkit int8 "
              f"{bound['bertkit_int8_s']:.3f} s, ORT {bound['ort_int8_s']:.3f} s); its linear layers alone take "
              f"{bound['linear_layers_at_int8_peak_s']:.3f} s at the int8 GEMM peak and attention "
              f"{bound['attention_at_fp32_peak_s']:.3f} s at the fp32 peak, leaving "
              f"{bound['left_for_the_rest_s']:.3f} s "
              "for quantising activations, rescaling, LayerNorm, GELU and residual adds in 12 layers", flush=True)
    print(json.dumps(result, indent=1))
    if args.json:
        from bertkit.io import write_json

        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
