"""The `bertkit finetune` recipe with transformers' model in place of bertkit's.

    python bench/hf_finetune.py --model DIR --task sst2 --train ... --dev ... --out OUT [same flags]

Everything but the model is bertkit's and identical between the two runs: the examples (and
the `--max-train-examples` subset), the WordPiece features (bertkit's tokenizer gives
BertTokenizerFast's ids exactly: tests/test_glue_tokenization.py), the batches and their order
(`epoch_batches` with the seed's generator), AdamW with the same parameter groups, warm-up and
decay, clipping, evaluation and the official metrics. The model is the `transformers.BertFor...`
class of the same name as bertkit's head, loaded from the same directory and handed to the
fine-tuning loop as its model factory, so a difference in the dev score or the time is a
difference between the two implementations (and their dropout and head-initialisation random
draws, which no recipe can make equal).

A benchmark, not part of bertkit: transformers is a test/bench dependency only.
"""

from __future__ import annotations

import argparse
import sys

import transformers

from bertkit.cli import finetune as finetune_cli
from bertkit.errors import UserError


def transformers_model(task, model_dir):
    """transformers' class of the task's head (bertkit's heads share its names), with the task's labels."""
    return getattr(transformers, task.head.__name__).from_pretrained(model_dir, **task.config_changes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf_finetune.py", description=__doc__.split("\n\n")[0])
    finetune_cli.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.feature_based:
        parser.error("--feature-based trains bertkit's own tagger; compare plain fine-tuning instead")
    print(f"transformers {transformers.__version__}: the model below is transformers', the recipe bertkit's")
    try:
        finetune_cli.check(args)
        return finetune_cli.run(args, new_model=transformers_model)
    except UserError as e:
        print(f"hf_finetune.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
