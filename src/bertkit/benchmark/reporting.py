"""Turning timed contenders into one JSON record per case, and printing them.

A record holds, for bertkit and transformers (and any extra contender): sequences/s, tokens/s,
useful TFLOP/s, MFU against the matrix rate measured in the same run, peak memory, median step
time; the ratio bertkit / transformers of sequences per second (of the medians, and the median
of the per-round ratios), with the largest absolute differences of their outputs on identical
weights.
"""

from __future__ import annotations

import statistics

from bertkit.benchmark.spec import Workload
from bertkit.benchmark.timing import Contender, max_abs_diffs


def _measures(c: Contender, w: Workload, rate: float) -> dict:
    t = c.median
    tflops = w.flops / t / 1e12 if w.flops else None
    return {
        "seq_per_s": w.sequences / t,
        "tokens_per_s": w.tokens / t,
        "tflops": tflops,
        "mfu": tflops * 1e12 / rate if tflops is not None else None,
        "peak_mib": c.peak_bytes / 2**20 if c.peak_bytes is not None else None,
        "median_ms": t * 1e3,
        "times_ms": [round(x * 1e3, 2) for x in c.times],
    }


def paired_ratio(ours: Contender, other: Contender) -> float:
    """Median over rounds of other's time / ours in the same round: steadier than the ratio of
    medians when the machine's load drifts between rounds."""
    return statistics.median(t / o for o, t in zip(ours.times, other.times))


def record(w: Workload, rate: float, device: str, diffs: dict[str, float] | None) -> dict:
    """One case's JSON record; bertkit_* and transformers_* flat, other contenders under `others`."""
    ours, rest = w.contenders[0], w.contenders[1:]
    theirs = next((c for c in rest if c.name == "transformers"), None)
    out = {"case": w.spec.name, "device": device, "kind": w.spec.kind,
           "model": w.spec.preset if w.spec.kind != "data" else None,
           "sequences_per_step": w.sequences, "tokens_per_step": w.tokens,
           "useful_flops_per_step": w.flops}
    mine = _measures(ours, w, rate)
    out.update({f"bertkit_{k}": v for k, v in mine.items()})
    if theirs is not None:
        out.update({f"transformers_{k}": v for k, v in _measures(theirs, w, rate).items()})
        out["ratio"] = mine["seq_per_s"] / out["transformers_seq_per_s"]
        out["paired_ratio"] = paired_ratio(ours, theirs)
    else:
        out["transformers_seq_per_s"] = None
        out["ratio"] = None
    out["others"] = {}
    for c in rest:
        if c is theirs:
            continue
        m = _measures(c, w, rate)
        out["others"][c.name] = {**m, "ratio_bertkit_over_this": mine["seq_per_s"] / m["seq_per_s"],
                                 "paired_ratio": paired_ratio(ours, c)}
    out["max_abs_diff"] = diffs
    out["notes"] = w.notes
    return out


def compare_outputs(w: Workload) -> dict[str, float] | None:
    ours = w.contenders[0]
    theirs = next((c for c in w.contenders[1:] if c.name == "transformers"), None)
    if ours.outputs is None or theirs is None or theirs.outputs is None:
        return None
    return max_abs_diffs(ours.outputs(), theirs.outputs())


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def summary_line(r: dict) -> str:
    diff = ", ".join(f"{k} {v:.1e}" for k, v in (r["max_abs_diff"] or {}).items()) or "n/a"
    others = "".join(f"  {name} {o['seq_per_s']:,.2f} seq/s (bertkit {o['ratio_bertkit_over_this']:.2f}x, "
                     f"paired {o['paired_ratio']:.2f}x)"
                     for name, o in r["others"].items())
    return (f"{r['case']:<26} bertkit {r['bertkit_seq_per_s']:>9,.2f} seq/s {r['bertkit_tokens_per_s']:>11,.0f} tok/s "
            f"{_fmt(r['bertkit_tflops'], '.3f')} TFLOP/s "
            f"MFU {_fmt(r['bertkit_mfu'] and 100 * r['bertkit_mfu'], '.1f')}% "
            f"peak {_fmt(r['bertkit_peak_mib'], ',.0f')} MiB | "
            f"transformers {_fmt(r['transformers_seq_per_s'], ',.2f')} "
            f"seq/s peak {_fmt(r.get('transformers_peak_mib'), ',.0f')} MiB | ratio {_fmt(r['ratio'], '.2f')}x "
            f"(paired {_fmt(r.get('paired_ratio'), '.2f')}x)"
            f"{others} | max |diff|: {diff}")


def markdown_table(records: list[dict]) -> str:
    rows = ["| case | bertkit seq/s | transformers seq/s | ratio (paired) | bertkit tokens/s | bertkit TFLOP/s | "
            "MFU | peak MiB (ours / theirs) | max abs diff | other contenders: seq/s, bertkit over it |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        diff = ", ".join(f"{k} {v:.1e}" for k, v in (r["max_abs_diff"] or {}).items()) or "-"
        others = "; ".join(f"{n} {o['seq_per_s']:,.2f}, {o['ratio_bertkit_over_this']:.2f}x "
                           f"({o['paired_ratio']:.2f}x)" for n, o in r["others"].items()) or "-"
        mfu = r["bertkit_mfu"]
        rows.append(f"| {r['case']} | {r['bertkit_seq_per_s']:,.2f} | {_fmt(r['transformers_seq_per_s'], ',.2f')} | "
                    f"{_fmt(r['ratio'], '.2f')} ({_fmt(r.get('paired_ratio'), '.2f')}) | "
                    f"{r['bertkit_tokens_per_s']:,.0f} | {_fmt(r['bertkit_tflops'], '.3f')} | "
                    f"{_fmt(mfu and 100 * mfu, '.1f')}% | {_fmt(r['bertkit_peak_mib'], ',.0f')} / "
                    f"{_fmt(r.get('transformers_peak_mib'), ',.0f')} | {diff} | {others} |")
    return "\n".join(rows)
