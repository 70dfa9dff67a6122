"""Tokenizer directories laid out as each BERT descendant's, built offline for
tests/test_tokenizer_families.py: tiny vocabularies learned by the tokenizers library from
SST-2 sentences, wrapped in the normalizer, pre-tokenizer, post-processor and decoder that the
family's real tokenizer.json holds (and that transformers' class for it rebuilds), beside a
tokenizer_config.json naming that class. SentencePiece's precompiled character map (the
`Precompiled` normalizer of XLM-R's, ALBERT's and DeBERTa-v3's files) needs sentencepiece to
build, so it is left out; transformers' classes then leave it out too.

Also two hand-made vocabularies small enough to check by hand: `hand_bpe` (byte-level BPE,
RoBERTa's layout) and `hand_unigram` (XLM-R's layout).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import Tokenizer as HFTokenizer

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
FAMILIES = ("roberta", "modernbert", "xlmr", "albert", "deberta", "distilbert")
KIND = {"roberta": "bpe", "modernbert": "bpe", "xlmr": "unigram", "albert": "unigram", "deberta": "unigram",
        "distilbert": "wordpiece"}
# each family's tokenizer_config.json: its class and its special tokens
CONFIGS = {
    "roberta": {"tokenizer_class": "RobertaTokenizer", "add_prefix_space": False, "trim_offsets": True,
                "bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>", "sep_token": "</s>",
                "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"},
    "modernbert": {"tokenizer_class": "PreTrainedTokenizerFast", "cls_token": "[CLS]", "sep_token": "[SEP]",
                   "unk_token": "[UNK]", "pad_token": "[PAD]", "mask_token": "[MASK]"},
    "xlmr": {"tokenizer_class": "XLMRobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
             "cls_token": "<s>", "sep_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
             "mask_token": "<mask>"},
    "albert": {"tokenizer_class": "AlbertTokenizer", "do_lower_case": True, "keep_accents": False,
               "bos_token": "[CLS]", "eos_token": "[SEP]", "cls_token": "[CLS]", "sep_token": "[SEP]",
               "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "[MASK]"},
    "deberta": {"tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": False, "split_by_punct": False,
                "bos_token": "[CLS]", "eos_token": "[SEP]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                "unk_token": "[UNK]", "pad_token": "[PAD]", "mask_token": "[MASK]"},
    "distilbert": {"tokenizer_class": "DistilBertTokenizer", "do_lower_case": True,
                   "cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]", "pad_token": "[PAD]",
                   "mask_token": "[MASK]"},
}


def _bpe(lines: list[str], specials: list[str], specials_last: bool = False) -> HFTokenizer:
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, special_tokens=[] if specials_last else specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    if specials_last:  # as ModernBERT's, whose specials follow the whole vocabulary
        tok.add_special_tokens(specials)
    return tok


def _unigram(lines: list[str], specials: list[str], unk: str, normalizer, pre_tokenizer) -> HFTokenizer:
    tok = HFTokenizer(models.Unigram())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(lines, trainers.UnigramTrainer(vocab_size=700, special_tokens=specials, unk_token=unk,
                                                            show_progress=False))
    return tok


def _wordpiece(lines: list[str]) -> HFTokenizer:
    tok = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(
        vocab_size=700, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    return tok


def _template(tok: HFTokenizer, cls: str, sep: str, pair_tail: str) -> None:
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} {pair_tail}",
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])


def build(family: str, lines: list[str]) -> HFTokenizer:
    """The family's tokenizer pipeline with a vocabulary learned from `lines`."""
    white_meta = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    if family == "roberta":
        tok = _bpe(lines, ROBERTA_SPECIALS)
        tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                          add_prefix_space=False)
    elif family == "modernbert":
        tok = _bpe(lines, ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"], specials_last=True)
        _template(tok, "[CLS]", "[SEP]", "$B:1 [SEP]:1")
    elif family == "xlmr":
        tok = _unigram(lines, ROBERTA_SPECIALS, "<unk>", None, white_meta)
        _template(tok, "<s>", "</s>", "</s> $B </s>")
    elif family == "albert":
        tok = _unigram(lines, ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], "<unk>", normalizers.Sequence([
            normalizers.Replace("``", '"'), normalizers.Replace("''", '"'), normalizers.NFKD(),
            normalizers.StripAccents(), normalizers.Lowercase()]), white_meta)
        _template(tok, "[CLS]", "[SEP]", "$B:1 [SEP]:1")
    elif family == "deberta":  # v3: [MASK] after the pieces
        tok = _unigram(lines, ["[PAD]", "[CLS]", "[SEP]", "[UNK]"], "[UNK]", normalizers.Sequence([
            normalizers.Replace(Regex(r"\s{2,}|[\n\r\t]"), " "), normalizers.NFC(),
            normalizers.Strip(left=False, right=True)]), pre_tokenizers.Sequence([pre_tokenizers.Metaspace()]))
        tok.add_special_tokens(["[MASK]"])
        _template(tok, "[CLS]", "[SEP]", "$B:1 [SEP]:1")
    else:
        tok = _wordpiece(lines)
        _template(tok, "[CLS]", "[SEP]", "$B:1 [SEP]:1")
    return tok


def save(tok: HFTokenizer, folder: Path, config: dict) -> Path:
    """A directory as the family's model directory holds its tokenizer: tokenizer.json and
    tokenizer_config.json (no vocab.txt, merges.txt or sentencepiece model)."""
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 512}), encoding="utf-8")
    return folder


def hand_bpe() -> HFTokenizer:
    """RoBERTa's byte-level BPE on a vocabulary of the specials, the 256 byte characters and eight merges."""
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("c", "a"), ("Ġ", "ca"), ("Ġca", "t"), ("Ã", "©"), ("Ġ", "n")]
    tokens = [*ROBERTA_SPECIALS, *sorted(pre_tokenizers.ByteLevel.alphabet()), *(a + b for a, b in merges)]
    tok = HFTokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=False)
    tok.add_special_tokens(ROBERTA_SPECIALS)
    return tok


HAND_PIECES = [("▁", -2.0), ("▁the", -3.0), ("▁cat", -4.0), ("s", -3.5), ("▁c", -5.0), ("a", -4.5), ("t", -4.5),
               ("c", -5.5), ("f", -6.0), ("é", -6.0), ("▁caf", -6.0), ("北", -7.0), ("京", -7.0), (",", -4.0),
               ("!", -4.0), ("x", -5.0)]


def hand_unigram() -> HFTokenizer:
    """XLM-R's layout on a 21-entry Unigram vocabulary: <s> <pad> </s> <unk>, HAND_PIECES, <mask>."""
    pieces = [(t, 0.0) for t in ROBERTA_SPECIALS[:4]] + HAND_PIECES + [("<mask>", 0.0)]
    tok = HFTokenizer(models.Unigram(pieces, unk_id=3, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    tok.decoder = decoders.Metaspace()
    _template(tok, "<s>", "</s>", "</s> $B </s>")
    tok.add_special_tokens(ROBERTA_SPECIALS)
    return tok
