"""The sign rule of an ablation's report: is our gap between two rows beyond the seeds' spread, and
does it have the paper's sign?

A gap counts only when it is larger than the larger of the two rows' standard deviations over
seeds; a smaller gap, or a single run (no spread to measure), is "not resolved at this scale".
Where the paper has no figure there is no sign to check, and the same rule gives our gap's
direction. The compute curve's "bidirectional passes left-to-right" uses the same rule.
"""

from __future__ import annotations

import statistics

HOLDS, REVERSED, UNRESOLVED, PENDING, NO_SIGN = ("holds", "reversed", "not resolved at this scale", "pending",
                                                 "no sign in the paper")


def sign_verdict(paper_gap: float | None, ours: list[float], reference: list[float]) -> dict:
    """Whether our gap (median of `ours` minus median of `reference`) has the paper's sign,
    counting it only when it exceeds the seeds' spread (the larger of the two standard deviations).
    With no paper figure (`paper_gap` None) there is no sign to check: our gap alone, and its
    `direction` ("higher", "lower", or not resolved by the same rule)."""
    if not ours or not reference:
        return {"verdict": NO_SIGN} if paper_gap is None else {"verdict": PENDING, "paper_gap": paper_gap}
    gap = statistics.median(ours) - statistics.median(reference)
    spread = max(statistics.stdev(ours), statistics.stdev(reference)) if min(len(ours), len(reference)) > 1 else None
    out = {"our_gap": round(gap, 4), "spread": None if spread is None else round(spread, 4)}
    resolved = spread is not None and abs(gap) > spread
    if paper_gap is None:
        return {**out, "verdict": NO_SIGN, "direction": ("higher" if gap > 0 else "lower") if resolved else UNRESOLVED}
    out = {"paper_gap": round(paper_gap, 4), **out}
    if spread is None:
        return {**out, "verdict": UNRESOLVED, "why": "one run: no seed spread to compare with"}
    if paper_gap == 0:
        return {**out, "verdict": NO_SIGN}
    if not resolved:
        return {**out, "verdict": UNRESOLVED, "why": "the gap is within the seeds' spread"}
    return {**out, "verdict": HOLDS if (gap > 0) == (paper_gap > 0) else REVERSED}
