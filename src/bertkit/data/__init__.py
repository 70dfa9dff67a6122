"""Data: corpus reading and preparation, instance shards, MLM masking, task readers, batching.

Pretraining: corpus.py (documents and sentences), prepare.py (raw text -> shards), manifest.py,
shards.py (token store, instance shards, the training dataset), instances.py (NSP pairs and
packed sequences), masking.py (80/10/10). Fine-tuning: glue.py (GLUE and your own tables),
squad.py (SQuAD windows), ner.py (CoNLL and first-piece labels), pairs.py (text pairs for
bi-encoders and cross-encoders). batching.py pads for both. Retrieval: beir.py (BEIR's layout,
and a BEIR set built from SQuAD).
"""

from bertkit.lazy import lazy_exports

# Imported on first use, so a command that needs only the readers (or only checks its flags)
# does not import torch through masking.
_EXPORTS = {
    "read_documents": "bertkit.data.corpus",
    "split_sentences": "bertkit.data.corpus",
    "check_tokenizer": "bertkit.data.manifest",
    "read_manifest": "bertkit.data.manifest",
    "Masker": "bertkit.data.masking",
    "MaskingConfig": "bertkit.data.masking",
    "continuation_table": "bertkit.data.masking",
    "PretrainingDataset": "bertkit.data.shards",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
