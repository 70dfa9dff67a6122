"""BERT's family and its descendants: one table row each (`FAMILIES`), one file each.

`FAMILIES` maps config.json's `model_type` to a `Family` (`bertkit.families.base`): how that kind of
Hugging Face directory names bertkit's encoder and heads, and its config.json's translation. The
encoder is always `bertkit.model`'s one forward, switched by the config the family reads.
"""

from __future__ import annotations

from bertkit.families.albert import ALBERT
from bertkit.families.base import Family, Summary
from bertkit.families.bert import BERT, ELECTRA
from bertkit.families.deberta import DEBERTA_V2
from bertkit.families.distilbert import DISTILBERT
from bertkit.families.modernbert import MODERNBERT
from bertkit.families.roberta import ROBERTA, XLM_ROBERTA

FAMILIES: dict[str, Family] = {f.name: f for f in (BERT, ELECTRA, ROBERTA, XLM_ROBERTA, DISTILBERT, ALBERT,
                                                   DEBERTA_V2, MODERNBERT)}

__all__ = ["FAMILIES", "Family", "Summary", "family_of"]


def family_of(model_type: str) -> Family:
    """The family of config.json's `model_type`; a ValueError naming the supported ones."""
    if model_type not in FAMILIES:
        raise ValueError(f"model_type {model_type!r} is not supported; bertkit reads {', '.join(FAMILIES)}")
    return FAMILIES[model_type]
