"""`bertkit fill-mask --model DIR "text with [MASK]"`: the masked-LM head's guesses for each [MASK].

The work is `bertkit.fill_mask`. Every check that needs no model runs before the weights are
loaded, so mistakes are reported at once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bertkit.cli.args import model_dir, positive_int


def add_arguments(parser) -> None:
    parser.add_argument("text", nargs="+", help='text(s) containing [MASK], e.g. "paris is the [MASK] of france."')
    parser.add_argument("--model", required=True, type=model_dir,
                        help="model directory with a masked-LM head and vocab.txt")
    parser.add_argument("--top-k", type=positive_int, default=5, help="guesses shown per [MASK]")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def run(args) -> int:
    from bertkit.fill_mask import check_masked_lm_dir, fill_masks, require_mask

    path = Path(args.model)
    tokenizer = check_masked_lm_dir(path)
    for text in args.text:
        require_mask(tokenizer, text)
    from bertkit.heads import BertForMaskedLM

    model = BertForMaskedLM.from_pretrained(path).eval()
    report = fill_masks(model, tokenizer, args.text, args.top_k)
    cut = [item for item in report if item["cut_to"]]
    if cut:
        which = "the text was" if len(args.text) == 1 else f"{len(cut)} of the {len(args.text)} texts were"
        print(f"bertkit fill-mask: note: {which} cut to the model's {cut[0]['cut_to']} tokens", file=sys.stderr)
    if args.json:
        print(json.dumps([{**item, "text": _short(item["text"])} for item in report], indent=2, ensure_ascii=False))
        return 0
    for item in report:
        print(_short(item["text"]))
        for n, mask in enumerate(item["masks"], 1):
            guesses = mask["guesses"]
            print(f"  [MASK] {n} (token {mask['position']})")
            width = max(len(g["token"]) for g in guesses)
            for g in guesses:
                print(f"    {g['token']:<{width}}  {g['probability']:.4f}  {g['text']}")
    return 0
