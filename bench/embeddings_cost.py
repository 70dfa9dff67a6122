"""Embeddings at every cost: one table and one plot from the measured results of issue 52's benches.

    python bench/embeddings_cost.py

Reads docs/results/embeddings-cost/{static,quantized,matryoshka}.json (written by
bench/static_embeddings.py, bench/quantized_search.py and bench/matryoshka.py) and writes
docs/results/embeddings-cost/summary.md, summary.json and quality-vs-cost.png. Every row's quality is
its NDCG@10 on SQuAD retrieval as a share of fp32 all-MiniLM-L6-v2's NDCG@10 *in the same bench*
(the benches use different query sets; a share is comparable across them, an absolute NDCG is not).
Bytes per vector: what a query reads per stored vector (fp32 = 4 x width; the rescoring rows stay on
disk). Passages per CPU-second: the static bench's, on one thread; an option that keeps the
transformer (quantised vectors, Matryoshka widths) embeds at the teacher's speed. Nothing is
recomputed here: a bench not yet run leaves its rows out, and the table says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results" / "embeddings-cost"
sys.path.insert(0, str(ROOT / "src"))
WIDTH = 384  # all-MiniLM-L6-v2's


def _read(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def static_rows(static: dict) -> list[dict]:
    rows, teacher = [], static["rows"]["teacher"]
    for name, r in static["rows"].items():
        if "error" in r:
            continue
        width = WIDTH if name == "teacher" else int(r.get("options", {}).get("dim") or 256)  # PCA 256 by default
        rows.append({"option": "MiniLM fp32 (the teacher)" if name == "teacher" else name,
                     "family": {"teacher": "transformer", "model2vec": "peer (model2vec)"}.get(name, "static"),
                     "kept": r["ndcg@10"] / teacher["ndcg@10"],
                     "stsb_kept": r["stsb_spearman"] / teacher["stsb_spearman"],
                     "bytes": 4 * width, "passages_per_s": r["passages_per_s"], "source": "static"})
    return rows


def quantized_rows(quantized: dict, teacher_speed: float | None) -> list[dict]:
    keep = ("int8 calibrated, rescored x4 from fp32", "binary, no rescoring", "binary, rescored x4 from fp32")
    return [{"option": f"MiniLM {q['variant']}", "family": "quantised", "kept": q["ndcg_ratio"], "stsb_kept": None,
             "bytes": q["ram_bytes_per_vector"], "passages_per_s": teacher_speed, "source": "quantized"}
            for q in quantized["quality"] if q["variant"] in keep]


def matryoshka_rows(matryoshka: dict, teacher_speed: float | None) -> list[dict]:
    arms = matryoshka["arms"]
    full = arms["zero_shot"][str(WIDTH)]["ndcg@10"]
    names = {"zero_shot": "MiniLM cut", "bertkit_matryoshka": "MiniLM, bertkit Matryoshka, cut"}
    return [{"option": f"{label} to {d}", "family": "matryoshka", "kept": arms[arm][str(d)]["ndcg@10"] / full,
             "stsb_kept": None, "bytes": 4 * d, "passages_per_s": teacher_speed, "source": "matryoshka"}
            for arm, label in names.items() for d in matryoshka["dims"] if d != WIDTH]


def summary() -> dict:
    static, quantized, matryoshka = _read("static"), _read("quantized"), _read("matryoshka")
    rows = static_rows(static) if static else []
    speed = static["rows"]["teacher"]["passages_per_s"] if static else None
    rows += quantized_rows(quantized, speed) if quantized else []
    rows += matryoshka_rows(matryoshka, speed) if matryoshka else []
    missing = [n for n, d in (("static", static), ("quantized", quantized), ("matryoshka", matryoshka)) if d is None]
    return {"rows": rows, "missing": missing,
            "commands": {n: d["command"] for n, d in (("static", static), ("quantized", quantized),
                                                       ("matryoshka", matryoshka)) if d}}


def markdown(result: dict) -> str:
    lines = ["# Embeddings at every cost: the measured table", "",
             "`python bench/embeddings_cost.py`, from the benches' JSON beside this file. Quality: SQuAD NDCG@10 "
             "as a share of fp32 all-MiniLM-L6-v2's in the same bench; STS-B likewise (static bench only).", "",
             "| option | NDCG@10 kept | STS-B kept | passages / CPU-s | bytes / vector | bench |",
             "|---|---:|---:|---:|---:|---|"]
    for r in sorted(result["rows"], key=lambda r: (-r["bytes"], -r["kept"])):
        sts = f"{100 * r['stsb_kept']:.1f}%" if r["stsb_kept"] is not None else "-"
        speed = f"{r['passages_per_s']:,.0f}" if r["passages_per_s"] else "-"
        lines.append(f"| {r['option']} | {100 * r['kept']:.1f}% | {sts} | {speed} | {r['bytes']:,} | {r['source']} |")
    if result["missing"]:
        lines += ["", "Not yet measured: " + ", ".join(f"{m}.json" for m in result["missing"]) + "."]
    lines += ["", "Commands: " + "; ".join(f"{k}: `{v}`" for k, v in result["commands"].items()), ""]
    return "\n".join(lines)


def plot(result: dict, dest: Path) -> None:
    from bertkit.plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    colors = {"transformer": "black", "quantised": "tab:blue", "matryoshka": "tab:orange", "static": "tab:green",
              "peer (model2vec)": "tab:purple"}
    for ax, key, label in ((axes[0], "bytes", "bytes per vector (log)"),
                           (axes[1], "passages_per_s", "passages per CPU-second, one thread (log)")):
        for family, color in colors.items():
            points = [r for r in result["rows"] if r["family"] == family and r[key]]
            ax.scatter([r[key] for r in points], [100 * r["kept"] for r in points], color=color, label=family)
            for r in points:
                ax.annotate(r["option"].replace("MiniLM ", ""), (r[key], 100 * r["kept"]), fontsize=6,
                            xytext=(3, 3), textcoords="offset points")
        if any(r[key] for r in result["rows"]):
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("SQuAD NDCG@10, % of fp32 MiniLM")
    axes[0].legend(fontsize=8)
    fig.suptitle("Embeddings at every cost: quality kept against memory and speed")
    save_figure(fig, dest)


def main() -> int:
    from bertkit.io import write_json, write_text

    result = summary()
    write_json(RESULTS / "summary.json", result)
    write_text(RESULTS / "summary.md", markdown(result))
    if result["rows"]:
        plot(result, RESULTS / "quality-vs-cost.png")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
