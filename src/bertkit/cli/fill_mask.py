"""`bertkit fill-mask --model DIR "text with [MASK]"`: the masked-LM head's guesses for each [MASK].

The work is `bertkit.fill_mask`. Every check that needs no model runs before the weights are
loaded, so mistakes are reported at once.
"""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.errors import UserError


def add_arguments(parser) -> None:
    parser.add_argument("text", nargs="+", help='text(s) containing [MASK], e.g. "paris is the [MASK] of france."')
    parser.add_argument("--model", required=True, help="model directory with a masked-LM head and vocab.txt")
    parser.add_argument("--top-k", type=int, default=5, help="guesses shown per [MASK] (default 5)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args) -> int:
    if args.top_k < 1:
        raise UserError(f"--top-k must be at least 1, not {args.top_k}")
    from bertkit.fill_mask import check_masked_lm_dir, fill_mask, require_mask

    path = Path(args.model)
    tokenizer = check_masked_lm_dir(path)
    for text in args.text:
        require_mask(tokenizer, text)
    from bertkit.heads import BertForMaskedLM

    model = BertForMaskedLM.from_pretrained(path).eval()
    report = [{"text": text, "masks": fill_mask(model, tokenizer, text, args.top_k)} for text in args.text]
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    for item in report:
        print(item["text"])
        for n, mask in enumerate(item["masks"], 1):
            guesses = mask["guesses"]
            print(f"  [MASK] {n} (token {mask['position']})")
            width = max(len(g["token"]) for g in guesses)
            for g in guesses:
                print(f"    {g['token']:<{width}}  {g['probability']:.4f}  {g['text']}")
    return 0
