"""Entity-level precision, recall and F1 exactly as the CoNLL shared tasks' conlleval.pl computes.

A tag is split at its first hyphen into a chunk tag and a type ("B-creative-work" -> B,
"creative-work"); a tag without a hyphen ("O") has the empty type. A chunk starts and ends by
conlleval's rules over (previous tag, tag), which read IOB1, IOB2 and IOE alike:

- start: B after B, I or O; I after O or E; E after O or E; any non-O tag whose type differs from
  the previous one; "[" and "]" always.
- end (between the previous token and this one): B or I followed by B or O; E followed by E,
  I or O; a previous non-O tag whose type differs from this one's; after "[" or "]".

So an I- after O opens a chunk (IOB1, or a tagger's slip), and a type change inside a chunk
closes it and opens another. Sentence boundaries close every chunk. A predicted chunk is correct
when the gold chunk starts at the same token with the same type and both end at the same token.
Token accuracy counts tags equal in both chunk tag and type. All numbers are percentages.
"""

from __future__ import annotations


def _split(tag: str) -> tuple[str, str]:
    head, hyphen, kind = tag.partition("-")
    return (head, kind) if hyphen else (tag, "")


def _ends(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    if (prev_tag, tag) in {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"), ("E", "O")}:
        return True
    if prev_tag not in ("O", ".") and prev_type != kind:
        return True
    return prev_tag in ("[", "]")


def _starts(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    if (prev_tag, tag) in {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"), ("O", "E")}:
        return True
    if tag not in ("O", ".") and prev_type != kind:
        return True
    return tag in ("[", "]")


def chunks(tags: list[str]) -> list[tuple[str, int, int]]:
    """The (type, first token, last token) chunks of one sentence, inclusive ends."""
    found = []
    prev_tag, prev_type = "O", ""
    open_at = None
    for i, raw in enumerate([*tags, "O"]):  # the trailing "O" is the sentence boundary
        tag, kind = _split(raw)
        if open_at is not None and _ends(prev_tag, tag, prev_type, kind):
            found.append((prev_type, open_at, i - 1))
            open_at = None
        if i < len(tags) and _starts(prev_tag, tag, prev_type, kind):
            if open_at is not None:  # a start the rules do not pair with an end (e.g. E then B)
                found.append((prev_type, open_at, i - 1))
            open_at = i
        prev_tag, prev_type = tag, kind
    return found


def _stream(gold_sentences, pred_sentences):
    """(gold tag, predicted tag, is boundary) with a boundary after every sentence, as conlleval reads."""
    for number, (gold, pred) in enumerate(zip(gold_sentences, pred_sentences), start=1):
        if len(gold) != len(pred):
            raise ValueError(f"sentence {number}: {len(gold)} gold tags but {len(pred)} predicted")
        for g, p in zip(gold, pred):
            yield g, p, False
        yield "O", "O", True


def _ratio(a: int, b: int) -> float:
    return 100.0 * a / b if b else 0.0


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def evaluate(gold_sentences: list[list[str]], pred_sentences: list[list[str]]) -> dict:
    """conlleval's overall and per-type scores; also the counts it prints."""
    if len(gold_sentences) != len(pred_sentences):
        raise ValueError(f"{len(gold_sentences)} gold sentences but {len(pred_sentences)} predicted")
    found_gold: dict[str, int] = {}
    found_pred: dict[str, int] = {}
    correct: dict[str, int] = {}
    correct_tags = tokens = 0
    in_correct = False
    last_g, last_gt, last_p, last_pt = "O", "", "O", ""
    for g_raw, p_raw, boundary in _stream(gold_sentences, pred_sentences):
        g, gt = _split(g_raw)
        p, pt = _split(p_raw)
        gold_ends, pred_ends = _ends(last_g, g, last_gt, gt), _ends(last_p, p, last_pt, pt)
        if in_correct:
            if gold_ends and pred_ends and last_pt == last_gt:
                in_correct = False
                correct[last_gt] = correct.get(last_gt, 0) + 1
            elif gold_ends != pred_ends or pt != gt:
                in_correct = False
        gold_starts, pred_starts = _starts(last_g, g, last_gt, gt), _starts(last_p, p, last_pt, pt)
        if gold_starts and pred_starts and pt == gt:
            in_correct = True
        if gold_starts:
            found_gold[gt] = found_gold.get(gt, 0) + 1
        if pred_starts:
            found_pred[pt] = found_pred.get(pt, 0) + 1
        if not boundary:
            correct_tags += g == p and gt == pt
            tokens += 1
        last_g, last_gt, last_p, last_pt = g, gt, p, pt
    if in_correct:
        correct[last_gt] = correct.get(last_gt, 0) + 1
    n_correct, n_gold, n_pred = sum(correct.values()), sum(found_gold.values()), sum(found_pred.values())
    precision, recall = _ratio(n_correct, n_pred), _ratio(n_correct, n_gold)
    per_type = {}
    for kind in sorted(set(found_gold) | set(found_pred)):
        if kind == "":
            continue
        p_k = _ratio(correct.get(kind, 0), found_pred.get(kind, 0))
        r_k = _ratio(correct.get(kind, 0), found_gold.get(kind, 0))
        per_type[kind] = {"precision": p_k, "recall": r_k, "f1": _f1(p_k, r_k),
                          "support": found_gold.get(kind, 0), "predicted": found_pred.get(kind, 0)}
    return {
        "precision": precision, "recall": recall, "f1": _f1(precision, recall),
        "accuracy": _ratio(correct_tags, tokens),
        "tokens": tokens, "phrases": n_gold, "found": n_pred, "correct": n_correct,
        "per_type": per_type,
    }
