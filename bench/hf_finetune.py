"""The `bertkit finetune` recipe with transformers' model in place of bertkit's.

    python bench/hf_finetune.py --model DIR --task sst2 --train ... --dev ... --out OUT [same flags]

Everything but the model is bertkit's and identical between the two runs: the examples (and
the `--max-train-examples` subset), the WordPiece features (bertkit's tokenizer gives
BertTokenizerFast's ids exactly: tests/test_glue_tokenization.py), the batches and their order
(`epoch_batches` with the seed's generator), AdamW with the same parameter groups, warm-up and
decay, clipping, evaluation and the official metrics. The model is the `transformers.BertFor...`
class of the same name as bertkit's head, loaded from the same directory, so a difference in
the dev score or the time is a difference between the two implementations (and their dropout
and head-initialisation random draws, which no recipe can make equal).

A benchmark, not part of bertkit: transformers is a test/bench dependency only.
"""

from __future__ import annotations

import argparse
import sys

import transformers

from bertkit.cli import finetune as finetune_cli
from bertkit.errors import UserError
from bertkit.train import finetune_tasks


def _new_model(self, model_dir):
    # The head classes share their names with transformers' (BertForSequenceClassification, ...).
    cls = getattr(transformers, self.head.__name__)
    return cls.from_pretrained(model_dir, **self.config_changes())


def _save_model(self, model, out, tokenizer) -> None:
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf_finetune.py", description=__doc__.split("\n\n")[0])
    finetune_cli.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.feature_based:
        parser.error("--feature-based trains bertkit's own tagger; compare plain fine-tuning instead")
    task_class = finetune_tasks.HeadTask
    originals = task_class.new_model, task_class.save_model
    task_class.new_model, task_class.save_model = _new_model, _save_model
    print(f"transformers {transformers.__version__}: the model below is transformers', the recipe bertkit's")
    try:
        return finetune_cli.run(args)
    except UserError as e:
        print(f"hf_finetune.py: error: {e}", file=sys.stderr)
        return 2
    finally:
        task_class.new_model, task_class.save_model = originals


if __name__ == "__main__":
    sys.exit(main())
