"""bertkit: the whole BERT system (Devlin et al., 2018) in PyTorch, in Hugging Face's formats.

Public names are imported on first use, so `bertkit` commands that need no model (score,
tokenize, prepare) start without importing torch.
"""

from __future__ import annotations

from bertkit.lazy import lazy_exports

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
    "ElectraForPreTraining": "bertkit.electra",
    "Encoding": "bertkit.tokenizer",
    "Tokenizer": "bertkit.tokenizer",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
