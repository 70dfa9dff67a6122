"""`bertkit bench`: bertkit against transformers, side by side, in one process, on the same weights.

spec.py says what a case is (and lists them), cases.py builds the model cases, data_cases.py the
data-pipeline cases, lengths.py gives the variable-length cases their real dev-set lengths,
timing.py times contenders interleaved, reporting.py writes the JSON records; the useful-FLOP
accounting and the matrix rate are `bertkit.flops`, shared with the pretraining status line.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch

from bertkit.benchmark.cases import build_model_case
from bertkit.benchmark.data_cases import build_data
from bertkit.benchmark.reporting import compare_outputs, markdown_table, record, summary_line
from bertkit.benchmark.spec import CASES, CaseSpec, Options, Workload, selected
from bertkit.benchmark.timing import measure_peak, time_interleaved
from bertkit.flops import matrix_rate

__all__ = ["CASES", "Options", "markdown_table", "run_benchmarks", "selected"]


def build(spec: CaseSpec, opts: Options) -> Workload:
    return build_data(spec, opts) if spec.kind == "data" else build_model_case(spec, opts)


def run_case(spec: CaseSpec, opts: Options, rate: float, repeats: int, warmup: int,
             status: Callable[[str], None] = print) -> dict:
    status(f"{spec.name}: building")
    workload = build(spec, opts)
    diffs = compare_outputs(workload)  # before any training step changes the weights
    if diffs:
        status("  outputs agree to: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    time_interleaved(workload.contenders, opts.device, warmup, repeats, status)
    for c in workload.contenders:
        measure_peak(c, opts.device)
    result = record(workload, rate, opts.device.type, diffs)
    del workload
    gc.collect()
    if opts.device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def run_benchmarks(specs: list[CaseSpec], opts: Options, repeats: int, warmup: int,
                   status: Callable[[str], None] = print,
                   on_record: Callable[[list[dict], dict], None] | None = None) -> tuple[list[dict], dict]:
    """Every case in turn; returns the records and the run's context (matrix rate, versions).

    `on_record(records, context)` runs after each case, so a run cut short keeps what it measured.
    """
    rate, what = matrix_rate(opts.device)
    status(f"matrix rate: {rate / 1e12:.3f} TFLOP/s ({what})")
    context = {"device": opts.device.type, "matrix_tflops": rate / 1e12, "matrix_measured": what,
               "torch": torch.__version__, "threads": torch.get_num_threads(), "compile": opts.compile,
               "repeats": repeats, "warmup": warmup}
    if opts.device.type == "cuda":
        context["gpu"] = torch.cuda.get_device_name(opts.device)
    try:
        import transformers

        context["transformers"] = transformers.__version__
    except ImportError:
        pass
    records = []
    for spec in specs:
        # On a shared machine a single reading can catch a busy moment (MFU above 100%): keep the
        # best rate seen, re-measured before every case.
        rate = max(rate, matrix_rate(opts.device, repeats=3)[0])
        context["matrix_tflops"] = rate / 1e12
        r = run_case(spec, opts, rate, repeats, warmup, status)
        r["matrix_tflops"] = rate / 1e12
        status(summary_line(r))
        records.append(r)
        if on_record is not None:
            on_record(records, context)
    return records, context
