"""`bertkit tokenize --model DIR "text" ["pair"]`: show how a text becomes BERT's input.

Prints one row per token: position, token, id, type (segment) id, character offsets and the
characters of the input they cover, so lower-casing, accent stripping, punctuation splits and
## continuations can be read off directly. `--json` gives the same as one JSON object.
"""

from __future__ import annotations

import json
import unicodedata

from bertkit.cli.args import int_at_least, tokenizer_dir


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, type=tokenizer_dir,
                        help="model or tokenizer directory (holding vocab.txt)")
    parser.add_argument("text", help="the text to tokenize")
    parser.add_argument("pair", nargs="?", help="optional second text: [CLS] text [SEP] pair [SEP]")
    parser.add_argument("--max-length", type=int_at_least(3),
                        help="truncate to this many tokens, [CLS] and [SEP] included (longest text first)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _width(text: str) -> int:
    """Terminal columns: CJK and other wide characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _table(rows: list[list[str]]) -> str:
    widths = [max(_width(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(cell + " " * (w - _width(cell)) for cell, w in zip(r, widths)).rstrip() for r in rows)
    return "\n".join(lines)


def run(args) -> int:
    from bertkit.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_pretrained(args.model)
    e = tokenizer.encode(args.text, args.pair, max_length=args.max_length, truncation=args.max_length is not None)
    sources = (args.text, args.pair)
    spans = [sources[s][a:b] if s is not None else "" for s, (a, b) in zip(e.sequence_ids, e.offsets)]
    if args.json:
        print(json.dumps({
            "tokens": e.tokens, "ids": e.ids, "type_ids": e.type_ids,
            "offsets": [list(o) for o in e.offsets], "word_ids": e.word_ids,
        }, ensure_ascii=False))
        return 0
    rows = [["#", "token", "id", "type", "offsets", "text"]]
    for i, (token, id_, type_id, (a, b), seq, span) in enumerate(
            zip(e.tokens, e.ids, e.type_ids, e.offsets, e.sequence_ids, spans)):
        rows.append([str(i), token, str(id_), str(type_id), f"{a}-{b}" if seq is not None else "", repr(span)[1:-1]])
    print(_table(rows))
    print(f"{len(e)} tokens; ids: {' '.join(map(str, e.ids))}")
    return 0
