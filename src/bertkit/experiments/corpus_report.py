"""The `corpus` experiment's report, drawn from whatever records exist (a missing number is `…`):
the throughput table (each contender's median over its repetitions, its range, the ratio to
bertkit in-process under the same condition, the lowest cosine to transformers), Ray's scaling,
the index, the goals met or missed, and the conditions every number was measured under."""

from __future__ import annotations

import statistics

from bertkit.experiments.core import Cell, Context, Report
from bertkit.experiments.corpus_index import HNSW

GOAL_COSINE, GOAL_RAY = 0.999, 1.8
MISSING = "…"  # a cell not run yet
NONE = "–"  # a cell done that has no such number (steady rate: under three shards)


def _num(value, fmt: str = ",.1f") -> str:
    return MISSING if value is None else format(value, fmt)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def throughput(cells: list[Cell], records: dict) -> list[dict]:
    """One entry per (condition, contender), in the plan's order."""
    groups: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        if c.kind == "throughput":
            groups.setdefault((c.param("isa"), c.param("contender")), []).append(c)
    rows = []
    for (isa, contender), group in sorted(groups.items(), key=lambda kv: kv[0][0] != "native"):
        done = [records[c.id]["result"] for c in group if c.id in records]
        rates = [r["passages_per_s_per_core"] for r in done]
        cosines = [r["min_cosine"] for r in done if "min_cosine" in r]
        rows.append({"isa": isa, "contender": contender, "reps": len(group), "done": len(done),
                     "what": done[0]["what"] if done else None, "per_core": rates, "median": _median(rates),
                     "min": min(rates, default=None), "max": max(rates, default=None),
                     "steady": _median([r["steady_passages_per_s"] for r in done if r.get("steady_passages_per_s")]),
                     "min_cosine": min(cosines, default=None),
                     "precision": done[0]["precision"] if done else None,
                     "peak_mb": _median([r["tree_peak_mb"] for r in done]),
                     "kernels": done[0]["kernels"] if done else None,
                     "beside": sorted({b for r in done for b in r.get("beside", [])}),
                     "passages": group[0].param("passages")})
    base = {r["isa"]: r["median"] for r in rows if r["contender"] == "bertkit"}
    for r in rows:
        b = base.get(r["isa"])
        r["ratio_to_bertkit"] = r["median"] / b if r["median"] and b else None
    return rows


def scaling(cells: list[Cell], records: dict) -> dict:
    out = {"workers": {}}
    for c in cells:
        if c.kind == "scaling":
            r = records.get(c.id, {}).get("result")
            out["passages"] = c.param("passages")
            out["workers"][c.param("workers")] = None if r is None else {
                "passages_per_s": r["passages_per_s"], "steady_passages_per_s": r.get("steady_passages_per_s"),
                "per_core": r["passages_per_s_per_core"], "seconds": r["seconds"], "peak_mb": r["tree_peak_mb"],
                "beside": r.get("beside", [])}
    one, two = out["workers"].get(1), out["workers"].get(2)
    if one and two:
        out["ratio"] = two["passages_per_s"] / one["passages_per_s"]
        if one["steady_passages_per_s"] and two["steady_passages_per_s"]:
            out["steady_ratio"] = two["steady_passages_per_s"] / one["steady_passages_per_s"]
    return out


def index(records: dict) -> dict:
    out = {"vectors": records.get("index/vectors", {}).get("result"),
           "hnsw": [{"build": records.get("index/build" + name, {}).get("result"),
                     "search": records.get("index/search" + name, {}).get("result"), "dtypes": (dtype, graph_dtype)}
                    for name, dtype, graph_dtype in HNSW],
           "quantized": {kind: {"build": records.get(f"index/build-{kind}", {}).get("result"),
                                "search": records.get(f"index/search-{kind}", {}).get("result")}
                         for kind in ("int8", "binary")}}
    searched = out["hnsw"][0]["search"]  # ours: the goal's
    if searched:
        out["half_vectors_mb"] = searched["vector_bytes_fp32"] / 2 / 2**20
    return out


def goals(rows: list[dict], ray: dict, ix: dict) -> list[dict]:
    out = []
    for r in rows:
        value = r["min_cosine"]
        out.append({"goal": f"{r['contender']} ({r['isa']}): lowest cosine to transformers >= {GOAL_COSINE}",
                    "value": value, "met": None if value is None else value >= GOAL_COSINE,
                    "shown": None if value is None else f"{value:.6f}"})
    if ray["workers"]:
        value = ray.get("ratio")
        out.append({"goal": f"Ray: 2 workers >= {GOAL_RAY}x 1 worker on {ray['passages']:,} passages (whole runs)",
                    "value": value, "met": None if value is None else value >= GOAL_RAY,
                    "shown": None if value is None else f"{value:.2f}x"})
    search = ix["hnsw"][0]["search"]
    peak = None if not search else search["peak_rss_queries_mb"]
    out.append({"goal": "memory-mapped search: peak RSS < half the vectors' size (float32)", "value": peak,
                "met": None if not search else peak < ix["half_vectors_mb"],
                "shown": None if not search else f"{peak:,.0f} MB against {ix['half_vectors_mb']:,.0f} MB"})
    return out


def _goal_line(g: dict) -> str:
    if g["met"] is None:
        return f"- {g['goal']}: not measured yet ({MISSING})"
    return f"- {g['goal']}: **{'met' if g['met'] else 'missed'}** ({g['shown']})"


def _throughput_md(rows: list[dict]) -> list[str]:
    n = rows[0]["passages"] if rows else 0
    lines = [f"## Throughput: {n:,} passages", "",
             "Passages per second per core (passages/s / cores), median of the repetitions with their range; "
             "bertkit's seconds are its whole `bertkit embed --shards` run (the model's loading and Ray's start "
             "included), the peers' are `encode`/`embed` with the model loaded and warmed up. One thread per "
             "system, batches of 32, 256 tokens. Cosine: the lowest of any passage to transformers' fp32 vectors.",
             "", "| condition | contender | passages/s per core | range | ratio to bertkit | steady passages/s "
             "| lowest cosine | precision | peak memory (MB) | done |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        spread = MISSING if r["min"] is None else f"{r['min']:.1f}-{r['max']:.1f}"
        steady = NONE if r["done"] and r["steady"] is None else _num(r["steady"])
        lines.append(f"| {r['isa']} | {r['contender']} | {_num(r['median'])} | {spread} | "
                     f"{_num(r['ratio_to_bertkit'], '.2f')} | {steady} | {_num(r['min_cosine'], '.6f')} | "
                     f"{r['precision'] or MISSING} | {_num(r['peak_mb'], ',.0f')} | {r['done']}/{r['reps']} |")
    return lines


def _scaling_md(ray: dict) -> list[str]:
    if not ray["workers"]:
        return []
    lines = ["", f"## Ray scaling: {ray['passages']:,} passages", "",
             "| workers | passages/s (whole run) | steady (first to last shard) | per core | peak memory (MB) |",
             "|---|---|---|---|---|"]
    for w, r in sorted(ray["workers"].items()):
        r = r or {}
        lines.append(f"| {w} | {_num(r.get('passages_per_s'))} | {_num(r.get('steady_passages_per_s'))} | "
                     f"{_num(r.get('per_core'))} | {_num(r.get('peak_mb'), ',.0f')} |")
    lines += ["", f"2 workers / 1: {_num(ray.get('ratio'), '.2f')}x whole runs, "
                  f"{_num(ray.get('steady_ratio'), '.2f')}x steady."]
    return lines


def _index_md(ix: dict) -> list[str]:
    made = ix["vectors"] or {}
    how = made.get("generator", {}).get("how", MISSING)
    mb = 2**20
    lines = ["", f"## Index: {_num(made.get('vectors'), ',')} vectors from shards", "",
             f"Vectors: {how}; queries drawn the same way from another stream. Built by `bertkit index --vectors` "
             "into graphs searched together; searched memory-mapped, one query at a time; recall@10 against the "
             "exact scan of every stored vector. The graphs are memory-mapped and nearly every page of them is "
             "touched, so they count in the resident set; the few rows a query rescores are read from the vector "
             "file, not mapped, so they stay in the page cache, outside it.", "",
             "| vectors | graphs' copies | graphs | build s | build peak RSS (MB) | on disk (MB) | recall@10 | p50 ms "
             "| p99 ms | search peak RSS (MB) | of it file-backed (MB) | half the float32 vectors (MB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in ix["hnsw"]:
        built, s = row["build"] or {}, row["search"] or {}
        lines.append(f"| {row['dtypes'][0]} | {row['dtypes'][1]} | {built.get('graphs', MISSING)} | "
                     f"{_num(built.get('seconds'))} | {_num(built.get('peak_rss_mb'), ',.0f')} | "
                     f"{_num(built['bytes_on_disk'] / mb if built else None, ',.0f')} | "
                     f"{_num(s.get('recall_at_10'), '.4f')} | {_num(s.get('p50_ms'), '.2f')} | "
                     f"{_num(s.get('p99_ms'), '.2f')} | {_num(s.get('peak_rss_queries_mb'), ',.0f')} | "
                     f"{_num(s.get('rss_file_mb'), ',.0f')} | {_num(ix.get('half_vectors_mb'), ',.0f')} |")
    return lines + _quantized_md(ix)


def _quantized_md(ix: dict) -> list[str]:
    """The `index --quantize` rows: quantised rows scanned, k x 4 candidates rescored from fp32."""
    lines = ["", "Quantised (`bertkit index --vectors --quantize KIND`, no graph; the quantised rows held in memory "
             "and scanned exactly, 4x the candidates rescored from rows read from the fp32 vector file):", "",
             "| quantize | bytes per vector held | build s | recall@10 | p50 ms | p99 ms | search peak RSS (MB) "
             "| of it file-backed (MB) |", "|---|---|---|---|---|---|---|---|"]
    for kind, q in ix["quantized"].items():
        built, s = q["build"] or {}, q["search"] or {}
        held = built["quantized_bytes"] / built["vectors"] if built else None
        lines.append(f"| {kind} | {_num(held, ',.0f')} | {_num(built.get('seconds'))} | "
                     f"{_num(s.get('recall_at_10'), '.4f')} | {_num(s.get('p50_ms'), '.2f')} | "
                     f"{_num(s.get('p99_ms'), '.2f')} | {_num(s.get('peak_rss_queries_mb'), ',.0f')} | "
                     f"{_num(s.get('rss_file_mb'), ',.0f')} |")
    return lines


def _conditions_md(records: dict) -> list[str]:
    machines = sorted({(r["machine"]["cpu"], " ".join(r["machine"]["flags"])) for r in records.values()
                       if "machine" in r})
    loads = [r["machine"]["load"] for r in records.values() if r.get("machine", {}).get("load") is not None]
    kernels = sorted({r["result"]["kernels"] for r in records.values() if "kernels" in r.get("result", {})})
    beside = sorted({f"{k}: {', '.join(r['result']['beside'])}" for k, r in records.items()
                     if r.get("result", {}).get("beside")})
    lines = ["", "## Conditions", ""]
    lines += [f"- CPU: {cpu} [{flags}]" for cpu, flags in machines]
    lines += [f"- kernels: {k}" for k in kernels]
    if loads:
        lines.append(f"- load average when the cells started: {min(loads):.1f} to {max(loads):.1f}")
    lines.append("- cells that ran beside another: " + ("; ".join(beside) if beside else "none"))
    return lines


def _figures(rows: list[dict], ray: dict):
    from bertkit.plots import plot_ablation_table

    conditions = list(dict.fromkeys(r["isa"] for r in rows))
    contenders = list(dict.fromkeys(r["contender"] for r in rows))
    by = {(r["isa"], r["contender"]): r for r in rows}

    def entry(values: list[float]) -> dict:
        return {"median": _median(values) or 0.0, "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
                "values": values, "paper": None}

    table = {"title": "passages/s per core", "columns": conditions,
             "rows": [{"label": c, "entries": {i: entry(by[(i, c)]["per_core"] if (i, c) in by else [])
                                               for i in conditions}} for c in contenders]}
    figures = []
    if any(r["per_core"] for r in rows):
        figures.append(lambda out: plot_ablation_table(table, out / "throughput.png"))
    done = {w: r for w, r in ray["workers"].items() if r}
    if done:
        ray_table = {"title": "Ray: passages/s", "columns": ["whole run", "steady"],
                     "rows": [{"label": f"{w} worker{'s' * (w > 1)}", "entries": {
                         "whole run": entry([r["passages_per_s"]]),
                         "steady": entry([r["steady_passages_per_s"]] if r["steady_passages_per_s"] else [])}}
                         for w, r in sorted(done.items())]}
        figures.append(lambda out: plot_ablation_table(ray_table, out / "scaling.png"))
    return figures


def corpus_report(cells: list[Cell], records: dict, ctx: Context) -> Report:
    rows, ray, ix = throughput(cells, records), scaling(cells, records), index(records)
    met = goals(rows, ray, ix)
    command = "bertkit experiment corpus" + ("" if ctx.scale == "cpu" else f" --scale {ctx.scale}")
    lines = [f"Command: `{command}` (the same command again continues a stopped run).", ""]
    lines += _throughput_md(rows) + ["", "![passages per second per core](throughput.png)"]
    lines += _scaling_md(ray) + (["", "![Ray scaling](scaling.png)"] if ray["workers"] else [])
    lines += _index_md(ix) + ["", "## Goals", ""] + [_goal_line(g) for g in met] + _conditions_md(records)
    data = {"command": command, "throughput": rows, "scaling": ray, "index": ix, "goals": met}
    return Report("\n".join(lines), _figures(rows, ray), data)
