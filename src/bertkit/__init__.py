"""bertkit: the whole BERT system (Devlin et al., 2018) in PyTorch, in Hugging Face's formats.

Public names are imported on first use, so `bertkit` commands that need no model (score,
tokenize, prepare) start without importing torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "PRESETS": "bertkit.config",
    "BertConfig": "bertkit.config",
    "UserError": "bertkit.errors",
    "BertModel": "bertkit.model",
    "BertForMaskedLM": "bertkit.heads",
    "BertForPreTraining": "bertkit.heads",
    "BertForQuestionAnswering": "bertkit.heads",
    "BertForSequenceClassification": "bertkit.heads",
    "BertForTokenClassification": "bertkit.heads",
    "Encoding": "bertkit.tokenizer",
    "Tokenizer": "bertkit.tokenizer",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bertkit' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
