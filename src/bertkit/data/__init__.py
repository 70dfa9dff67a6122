"""Data: corpus reading and preparation, instance shards, MLM masking, task readers, batching.

Pretraining: corpus.py (documents and sentences), prepare.py (raw text -> shards), manifest.py,
shards.py (token store, instance shards, the training dataset), instances.py (NSP pairs and
packed sequences), masking.py (80/10/10). Fine-tuning: glue.py (GLUE and your own tables),
squad.py (SQuAD windows), ner.py (CoNLL and first-piece labels). batching.py pads for both.
"""

from bertkit.data.corpus import read_documents, split_sentences
from bertkit.data.manifest import check_tokenizer, read_manifest
from bertkit.data.masking import Masker, MaskingConfig, continuation_table
from bertkit.data.shards import PretrainingDataset

__all__ = [
    "Masker",
    "MaskingConfig",
    "PretrainingDataset",
    "check_tokenizer",
    "continuation_table",
    "read_documents",
    "read_manifest",
    "split_sentences",
]
