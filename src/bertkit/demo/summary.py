"""The demo's last screen and summary.md: what was pretrained on what, what it learned, static vs
contextual, pretrained vs not, and where the time went. Numbers carry their units; every number
shown is also in summary.json."""

from __future__ import annotations

from bertkit.demo.plan import NARROW_NAME


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


# Function words and punctuation: guesses made of these alone mean the model predicts how often a
# token occurs, not what the sentence says.
FREQUENT = frozenset("the , . a an to of and in on at for is was it he she they that said s ' \" - ( ) :".split())
OBJECTIVES = {
    "mlm": "masked-LM",
    "electra": ("ELECTRA's replaced-token detection (a small generator fills the masked positions and the model "
                "learns, at every token, whether it is the original; fill-mask below asks the generator)"),
}


def only_frequent_words(fills: list[dict]) -> str | None:
    """A sentence for the reader when the fill-mask guesses are still just frequent tokens (the
    same top guess for most sentences, or function words and punctuation at the top of nearly
    all of them); None when the guesses follow their sentences."""
    tops = [f["top"][0] for f in fills if f["top"]]
    if not tops:
        return None
    most = max(set(tops), key=tops.count)
    if tops.count(most) * 2 > len(tops) or sum(t in FREQUENT for t in tops) >= 0.8 * len(tops):
        return ("The top guesses are still mostly frequent words (" + ", ".join(dict.fromkeys(tops)) +
                "): the model predicts how often a token occurs more than what the sentence says. "
                "A longer `--minutes` (or a quieter machine) gives it more steps.")
    return None


def pretraining_lines(s: dict) -> list[str]:
    p, plan = s["pretraining"], s["plan"]
    val = p["last_validation"]
    steps = max(val.get("step", 0), p["last_train_log"].get("step", 0))
    objective = OBJECTIVES[p.get("objective", "mlm")]
    choices = plan.get("choices") or {}
    shape = f" (narrowed to {NARROW_NAME} for this machine)" if choices.get("overrides") else ""
    lines = [
        "## What was pretrained, on what",
        "",
        (f"A {p['preset']} BERT{shape} ({p['parameters'] / 1e6:.1f}M parameters) pretrained from random weights with "
        f"{objective} (the budget recipe: packed sequences, no dropout, weights drawn at the model's width scale with "
        f"a sinusoidal position table, a high lr decaying to zero at the deadline) for "
        f"{p['minutes']:.1f} minutes on {plan['threads']} CPU thread(s): "
        f"{steps:,} steps of {32} sequences of up to {plan['max_seq_len']} tokens, on the "
        f"{s['articles']['train']:,} training articles of BBC News (a {plan['vocab_size']:,}-entry WordPiece "
        f"vocabulary learned from them). The {s['articles']['held_out']:,} held-out articles are never seen "
        "in pretraining."),
        "",
        *([f"Chosen for this machine: {'; '.join(choices['reasons'])}.", ""] if choices.get("reasons") else []),
        "## What it learned",
        "",
        (f"Validation masked-LM accuracy **{_pct(val.get('mlm_accuracy'))}** "
        f"(MLM loss {val.get('mlm_loss', float('nan')):.2f}). Its top 5 guesses for [MASK]:"),
        "",
    ]
    for f in s["fill_mask"]:
        guesses = ", ".join(f"{t} ({100 * q:.1f}%)" for t, q in zip(f["top"], f["probabilities"]))
        lines.append(f"- {f['text']} -> {guesses}")
    note = only_frequent_words(s["fill_mask"])
    return [*lines, "", note] if note else lines


def senses_lines(s: dict) -> list[str]:
    words = list(s["senses"])
    names = list(s["senses"][words[0]]["models"])
    columns = " | ".join(f"'{w}' within | across | separation | same-sense neighbours" for w in words)
    header = f"| model | {columns} |"
    lines = [
        "## Static vs contextual: one word, two senses",
        "",
        ("Mean cosine of the word's vectors between occurrences of the same sense (within) and of the "
        "two senses (across); separation = within - across. Same-sense neighbours: the fraction of each "
        "occurrence's nearest occurrences (as many as its sense has others) that share its sense; "
        f"chance is {_chance(s['senses'][words[0]]['senses'])}. The word stands at different positions within "
        "each sense, and the randomly initialised model is the floor: what position and token identity alone give."),
        "",
        header,
        "|---|" + "---:|" * (4 * len(words)),
    ]
    for name in names:
        cells = []
        for w in words:
            m = s["senses"][w]["models"].get(name)
            cells += ["n/a"] * 4 if m is None else [f"{m['within']:.3f}", f"{m['across']:.3f}",
                                                    f"{m['separation']:+.3f}",
                                                    f"{100 * m['neighbours_same_sense']:.0f}%"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", *_senses_verdicts(s["senses"])]
    if s.get("static"):
        from bertkit.demo.static import static_line

        lines.append(static_line(s["static"]))
    return lines


def _chance(senses: list[str]) -> str:
    n, m = len(senses), senses.count(senses[0])
    return f"{100 * (m - 1) / (n - 1):.0f}%"


def _senses_verdicts(senses: dict) -> list[str]:
    out = []
    for word, block in senses.items():
        models = block["models"]
        floor = models.get("random init", {}).get("separation")
        parts = []
        if "Word2Vec" in models:
            near = ", ".join(block.get("word2vec_nearest", []))
            parts.append("Word2Vec gives one vector for every occurrence "
                         f"(separation {models['Word2Vec']['separation']:+.3f}; its nearest words: {near})")
        for name, m in models.items():
            if name not in ("Word2Vec", "random init") and floor is not None:
                parts.append(f"{name} {m['separation']:+.3f} against the random floor's {floor:+.3f}")
        out.append(f"- '{word}': " + "; ".join(parts) + ".")
    return out


def labels_lines(s: dict) -> list[str]:
    rows = s["label_budgets"]
    names = list(rows[0]["accuracy"])
    lines = [
        "## Pretrained vs not: topic accuracy from few labels",
        "",
        (f"Held-out accuracy on the {s['articles']['held_out']:,} held-out articles (5 topics; chance 20%). Every "
        "model is frozen: each article's first "
        f"{s['plan']['probe_max_len']} tokens mean-pooled over the last layer, then a logistic-regression probe "
        "(full fine-tuning of MiniLM does not fit the demo's CPU budget, so all three get the same frozen probe). "
        f"Budgets below 'all' are the mean of {s['plan']['probe_draws']} random draws of the labelled articles "
        "(lowest to highest draw in brackets)."),
        "",
        "| labelled articles per topic | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for r in rows:
        label = f"all ({r['labelled_articles']:,} articles)" if r["per_topic"] == "all" else str(r["per_topic"])
        cells = [f"{c['mean']:.1f}%" + (f" ({c['min']:.1f}-{c['max']:.1f})" if r["draws"] > 1 else "")
                 for c in r["accuracy"].values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, "", *_labels_verdicts(rows)]


def _labels_verdicts(rows: list[dict]) -> list[str]:
    names = list(rows[0]["accuracy"])
    out = []
    if "random init" in names and "pretrained (demo)" in names:
        wins = [r for r in rows if r["accuracy"]["pretrained (demo)"]["mean"] > r["accuracy"]["random init"]["mean"]]
        out.append(f"- The demo's pretrained model beats random initialisation at {len(wins)} of {len(rows)} budgets.")
    if "all-MiniLM-L6-v2" in names:
        best = [r for r in rows if max(r["accuracy"], key=lambda n: r["accuracy"][n]["mean"]) == "all-MiniLM-L6-v2"]
        out.append(f"- all-MiniLM-L6-v2 (trained on about a billion sentence pairs) is best at {len(best)} "
                   f"of {len(rows)} budgets.")
    return out


def time_lines(s: dict) -> list[str]:
    lines = ["## Time", "", "| stage | seconds | budget (s) |", "|---|---:|---:|"]
    for name, t in s["stages"].items():
        lines.append(f"| {name} | {t['seconds']:.0f} | {t['budget_seconds']:.0f} |")
    lines += ["", (f"Total: {s['total_minutes']:.1f} minutes (budget {s['plan']['minutes']:g}), "
              f"{s['plan']['threads']} thread(s).")]
    return lines


def story(s: dict) -> str:
    """The last screen of `bertkit demo`."""
    parts = [["# bertkit demo: BERT's story on BBC News"], pretraining_lines(s), senses_lines(s), labels_lines(s),
             time_lines(s)]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"


def summary_markdown(s: dict) -> str:
    """`story` with the figures embedded."""
    figures = [
        "## Figures",
        "",
        "![cosine heat maps of 'court' and 'bank', one per model](senses.png)",
        "",
        "![held-out accuracy against labelled articles per topic](label_budgets.png)",
        "",
        "![pretraining loss](pretrain/loss.png) ![pretraining accuracy](pretrain/accuracy.png)",
    ]
    return story(s) + "\n" + "\n".join(figures) + "\n"
