"""`bertkit data beir-squad --squad FILE --out DIR`: build offline retrieval sets in BEIR's layout.

From SQuAD v1.1 (the shared dev file): question -> its paragraph, with the articles split by a
seeded draw into a training half (qrels/train.tsv) and a held-out half (qrels/test.tsv), the
draw `bertkit finetune --task squad --split-articles K` makes. The same file, seed and split
give byte-identical output. See bertkit.data.beir.
"""

from __future__ import annotations

from bertkit.cli.args import add_overwrite, check_output_dir, existing_file, nonnegative_int, positive_int


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    squad = sub.add_parser("beir-squad", help="SQuAD v1.1 question -> paragraph retrieval set, articles split in two")
    squad.add_argument("--squad", required=True, type=existing_file, help="SQuAD v1.1 JSON file (e.g. dev-v1.1.json)")
    squad.add_argument("--out", required=True, help="folder to write corpus.jsonl, queries.jsonl and qrels/ into")
    squad.add_argument("--train-articles", type=positive_int, default=None,
                       help="articles in the training half (default: half of them, rounded down)")
    squad.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the article draw")
    add_overwrite(squad, "retrieval set")


def check(args) -> None:
    check_output_dir(args.out, "--out", args.overwrite, ("corpus.jsonl",), "retrieval set")


def run(args) -> int:
    from bertkit.data.beir import squad_to_beir
    from bertkit.io import atomic_dir

    with atomic_dir(args.out) as tmp:
        counts = squad_to_beir(args.squad, tmp, args.train_articles, args.seed)
    print(f"wrote {counts['documents']:,} paragraphs and {counts['queries']:,} questions to {args.out}: "
          f"{counts['train']:,} training questions from {counts['train_articles']} articles (qrels/train.tsv), "
          f"{counts['test']:,} held-out from {counts['test_articles']} (qrels/test.tsv)")
    return 0
