"""bertkit: the whole BERT system (Devlin et al., 2018) in PyTorch, in Hugging Face's formats."""

from bertkit.config import PRESETS, BertConfig
from bertkit.errors import UserError
from bertkit.heads import (
    BertForMaskedLM,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertkit.model import BertModel
from bertkit.tokenizer import Encoding, Tokenizer

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "BertConfig",
    "BertForMaskedLM",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "Encoding",
    "Tokenizer",
    "UserError",
]
