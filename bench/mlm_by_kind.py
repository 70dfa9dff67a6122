"""Validation MLM accuracy split by what the model saw at each labelled position: [MASK], a random
token, or the token itself (kept), plus the score of a model that reads no context at all.

    python bench/mlm_by_kind.py MODEL_DIR... [--data scratch/pretrain-recipes/data-packed]

The data is a packed folder written by `bertkit prepare` (default: the one bench/pretrain_recipes.py
makes from the demo's BBC News split); its validation split is masked once (15%, 80/10/10, the
seed bench/pretrain_recipes.py scores with). The no-context reference predicts the training split's
most frequent token at [MASK] and random positions and copies the input where it was kept: a model
near that score has learned token frequencies and copying, not context.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
KINDS = ("mask", "random", "kept")


def by_kind(model_dir: Path, scorer) -> dict[str, tuple[int, int]]:
    """{kind: (correct, labelled positions)} for one model."""
    import numpy as np
    import torch

    from bertkit.config import IGNORE_INDEX
    from bertkit.heads import BertForMaskedLM

    model = BertForMaskedLM.from_pretrained(model_dir).eval()
    mask_id = int(scorer.val.manifest["mask_id"])
    counts = {k: [0, 0] for k in KINDS}
    with torch.no_grad():
        for number, start in enumerate(range(0, len(scorer.val), 64)):
            batch = scorer.val.batch(np.arange(start, min(start + 64, len(scorer.val))))
            inputs = scorer.objective.prepare(batch, torch.device("cpu"), 1 << 40, number)  # the Scorer's masking
            logits = model(inputs["input_ids"], attention_mask=inputs["attention_mask"],
                           token_type_ids=inputs["token_type_ids"], labels=inputs["labels"]).logits
            labelled = inputs["labels"] != IGNORE_INDEX
            y, x = inputs["labels"][labelled], inputs["input_ids"][labelled]
            kind = torch.where(x == mask_id, 0, torch.where(x == y, 2, 1))
            right = logits.argmax(-1) == y
            for i, k in enumerate(KINDS):
                counts[k][0] += int(right[kind == i].sum())
                counts[k][1] += int((kind == i).sum())
    return {k: (a, b) for k, (a, b) in counts.items()}


def no_context_score(data: Path, counts: dict[str, tuple[int, int]]) -> float:
    """The accuracy of 'most frequent training token, or copy where kept' on the same positions."""
    import numpy as np

    special = json.loads((data / "manifest.json").read_text())["special_ids"]  # never labels
    train = np.concatenate([np.load(f).ravel() for f in sorted(glob.glob(str(data / "train" / "input_ids-*.npy")))])
    val = np.concatenate([np.load(f).ravel() for f in sorted(glob.glob(str(data / "val" / "input_ids-*.npy")))])
    train, val = train[~np.isin(train, special)], val[~np.isin(val, special)]
    top = np.bincount(train).argmax()
    p_top = float(np.mean(val == top))
    labelled = sum(b for _, b in counts.values())
    return (p_top * (counts["mask"][1] + counts["random"][1]) + counts["kept"][1]) / labelled


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mlm_by_kind.py", description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", type=Path, help="model folders (BertForMaskedLM or BertForPreTraining)")
    p.add_argument("--data", type=Path, default=ROOT.parent / "scratch/pretrain-recipes/data-packed",
                   help="a packed data folder (default: %(default)s)")
    args = p.parse_args(argv)
    import torch

    from pretrain_recipes import Scorer

    torch.set_num_threads(1)
    scorer = Scorer(args.data)
    reference = None
    for model_dir in args.models:
        counts = by_kind(model_dir, scorer)
        if reference is None:
            reference = no_context_score(args.data, counts)
            print(f"no context (most frequent token, copy where kept): {100 * reference:.1f}%")
        total = sum(a for a, _ in counts.values()) / max(1, sum(b for _, b in counts.values()))
        print(f"{model_dir}: all {100 * total:.1f}%  " +
              "  ".join(f"{k} {100 * a / max(b, 1):.1f}% of {b}" for k, (a, b) in counts.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
