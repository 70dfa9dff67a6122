"""The demo's two figures: occurrence-by-occurrence cosine heat maps (one row of panels per word,
one panel per model, one shared colour scale) and the label-budget learning curve."""

from __future__ import annotations

from pathlib import Path

from bertkit.plots import pyplot, save_figure


def plot_senses(senses: dict, path: Path) -> None:
    """senses: compare_senses' output. Row labels are numbered snippets; columns use the numbers."""
    import numpy as np

    plt = pyplot()
    words = list(senses)
    names = list(senses[words[0]]["models"])
    lows = [min(min(r) for r in m["cosine"]) for w in words for m in senses[w]["models"].values()]
    vmin = float(np.floor(min(lows) * 10) / 10)  # one scale for every panel, from just below the lowest cosine
    fig, axes = plt.subplots(len(words), len(names), figsize=(4.2 * len(names) + 3.5, 4.4 * len(words)),
                             squeeze=False, constrained_layout=True)
    image = None
    for r, word in enumerate(words):
        block = senses[word]
        n = len(block["labels"])
        for c, name in enumerate(block["models"]):
            ax, m = axes[r][c], block["models"][name]
            image = ax.imshow(np.asarray(m["cosine"]), vmin=vmin, vmax=1.0, cmap="viridis")
            ax.set_title(f"{name}: '{word}'\nwithin {m['within']:.2f}, across {m['across']:.2f}, "
                         f"separation {m['separation']:+.2f}", fontsize=9)
            ax.set_xticks(range(n), [str(i + 1) for i in range(n)], fontsize=8)
            ax.set_xlabel(f"occurrence of '{word}' (numbered as the rows)", fontsize=8)
            if c == 0:
                ax.set_yticks(range(n), block["labels"], fontsize=8)
                ax.set_ylabel(f"occurrence of '{word}': sense and context", fontsize=8)
            else:
                ax.set_yticks(range(n), [str(i + 1) for i in range(n)], fontsize=8)
            half = block["senses"].count(block["senses"][0]) - 0.5
            ax.axhline(half, color="white", lw=1)
            ax.axvline(half, color="white", lw=1)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="cosine similarity")
    fig.suptitle("Same word, different senses: cosine of the word's vectors (last layer; Word2Vec: its one vector)")
    save_figure(fig, path, dpi=110)


def plot_label_budgets(rows: list[dict], path: Path) -> None:
    """Held-out accuracy against labelled articles per topic, one line per model (mean of the
    draws, the band from the lowest to the highest draw)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [r["labelled_articles"] / 5 if r["per_topic"] == "all" else r["per_topic"] for r in rows]
    for name in rows[0]["accuracy"]:
        cells = [r["accuracy"][name] for r in rows]
        ax.plot(xs, [c["mean"] for c in cells], marker="o", label=name)
        ax.fill_between(xs, [c["min"] for c in cells], [c["max"] for c in cells], alpha=0.15)
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(xs, [str(r["per_topic"]) if r["per_topic"] != "all" else f"all ({x:.0f})" for r, x in zip(rows, xs)])
    ax.set_xlabel("labelled training articles per topic (log scale)")
    ax.set_ylabel("held-out topic accuracy (%)")
    ax.set_title("Frozen features + logistic regression: what pretraining buys at few labels")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path, dpi=110)
