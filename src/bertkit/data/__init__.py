"""Data for pretraining: corpus reading, the token store and instance shards, MLM masking."""

from bertkit.data.corpus import read_documents, split_sentences
from bertkit.data.masking import Masker, MaskingConfig, continuation_table
from bertkit.data.shards import PretrainingDataset, check_tokenizer, read_manifest

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
