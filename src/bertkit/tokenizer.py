"""Tokenization through the `tokenizers` library: BERT's WordPiece, and its descendants' tokenizers.

BERT (and DistilBERT): normalizer (clean control characters, split CJK characters, lower-case and
strip accents when uncased) -> pre-tokenizer (white space and punctuation) -> WordPiece (greedy
longest match, "##" continuations, [UNK] for words over 100 characters) -> [CLS] A [SEP] (B [SEP]).
That pipeline is built from `vocab.txt` and `do_lower_case`, so any BERT vocabulary gives the same
ids, type ids and offsets as transformers' BertTokenizerFast. A trained vocabulary puts the five
special tokens first: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4. Training is our own
(bertkit.wordpiece) rather than the tokenizers library's trainer, which breaks ties in hash
order, so that the same text always gives the same vocab.txt.

RoBERTa, XLM-R, ALBERT, DeBERTa-v2/v3, ModernBERT (byte-level BPE or Unigram): the directory's
tokenizer.json runs as it stands, and its special tokens' parts ([CLS] or <s>, ...) come from
tokenizer_config.json (bertkit.subword, which also learns such vocabularies). Their `cls_id`,
`sep_id`, ... are the family's equivalents, and a pair may add more than BERT's three special
tokens (RoBERTa's <s> A </s></s> B </s> adds four): `template` says where each goes.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from bertkit import subword
from bertkit.errors import UserError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
BERT_NAMES = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
MAX_WORD_CHARS = 100
KINDS = ("wordpiece", "bpe", "unigram")


@dataclass
class Encoding:
    ids: list[int]
    type_ids: list[int]
    attention_mask: list[int]
    offsets: list[tuple[int, int]]  # character span of each token in its own input text
    word_ids: list[int | None]  # index of the word each token came from; None for specials
    tokens: list[str]
    sequence_ids: list[int | None]  # 0 for text, 1 for pair, None for specials and padding
    truncated: bool = False  # tokens were cut off to fit max_length

    def __len__(self) -> int:
        return len(self.ids)


def _check_specials(vocab: dict[str, int], path: Path) -> None:
    for tok in ("[UNK]", "[CLS]", "[SEP]"):
        if tok not in vocab:
            raise UserError(f"vocabulary has no {tok} token", path)


def _wordpiece_spec(spec: dict, path: Path) -> tuple[dict[str, int], bool]:
    """(vocabulary, lowercase) of a BERT tokenizer.json: its WordPiece model's vocab and its
    BertNormalizer's `lowercase` (a Lowercase step in a Sequence counts too)."""
    model = spec["model"]
    if not isinstance(model.get("vocab"), dict):
        raise UserError("not a WordPiece tokenizer (BERT's): bertkit reads model.vocab of type WordPiece", path)
    vocab = {str(t): int(i) for t, i in model["vocab"].items()}
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise UserError("vocabulary ids are not 0..n-1 without gaps", path)
    _check_specials(vocab, path)
    norm = spec.get("normalizer") or {}
    steps = norm.get("normalizers", [norm]) if norm.get("type") == "Sequence" else [norm]
    lowercase = any((s.get("type") == "BertNormalizer" and s.get("lowercase", True)) or s.get("type") == "Lowercase"
                    for s in steps if isinstance(s, dict))
    return vocab, lowercase


def _read_vocab(path: Path) -> dict[str, int]:
    vocab: dict[str, int] = {}
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise UserError(f"vocabulary is not valid UTF-8 ({e})", path) from None
    if lines and lines[-1] == "":
        lines.pop()
    for i, token in enumerate(lines):
        token = token.rstrip("\r")
        if token in vocab:
            raise UserError(f"duplicate vocabulary entry {token!r}", path, i + 1)
        vocab[token] = i
    _check_specials(vocab, path)
    return vocab


def _pipeline(vocab: dict[str, int], lowercase: bool) -> _HFTokenizer:
    tok = _HFTokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=MAX_WORD_CHARS))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    specials = [t for t in SPECIAL_TOKENS if t in vocab]
    tok.add_special_tokens(specials)
    return tok


class Tokenizer:
    """A tokenizer of BERT or one of its descendants. Build with `from_pretrained(dir)` or
    `train(files)`; `Tokenizer(vocab, lowercase)` is BERT's WordPiece on a vocabulary."""

    def __init__(self, vocab: dict[str, int], lowercase: bool = True):
        special_ids = tuple(sorted(vocab[t] for t in SPECIAL_TOKENS if t in vocab))
        layout = subword.Layout("wordpiece", BERT_NAMES, special_ids, ("continues", "##"), {})
        self._adopt(_pipeline(vocab, lowercase), layout, vocab, lowercase)

    def _adopt(self, pipeline: _HFTokenizer, layout: subword.Layout, vocab: dict[str, int], lowercase: bool) -> None:
        self._tok = pipeline
        self._layout = layout
        self.vocab = vocab
        self.lowercase = lowercase
        self.inv_vocab = {i: t for t, i in vocab.items()}
        self._words_tok: _HFTokenizer | None = None  # encode_words' pipeline, made on first use
        self._fingerprint: str | None = None
        self._template: subword.Template | None = None
        self._special_tokens = frozenset(self.inv_vocab[i] for i in layout.special_ids)

    @classmethod
    def _from_pipeline(cls, pipeline: _HFTokenizer, layout: subword.Layout) -> Tokenizer:
        """A BPE or Unigram tokenizer: its vocabulary and casing read off the pipeline."""
        self = cls.__new__(cls)
        lowercase = pipeline.normalizer is not None and pipeline.normalizer.normalize_str("A") == "a"
        self._adopt(pipeline, layout, pipeline.get_vocab(with_added_tokens=True), lowercase)
        return self

    # ---- special tokens ----
    def _role_id(self, role: str) -> int:
        token = self._layout.names.get(role)
        if token not in self.vocab:
            raise UserError(f"this vocabulary has no {token or role} token")
        return self.vocab[token]

    @property
    def pad_id(self) -> int:
        """The padding token's id (BERT's [PAD], RoBERTa's <pad>, ...); 0 when there is none."""
        return self.vocab.get(self._layout.names.get("pad"), 0)

    @property
    def unk_id(self) -> int:
        return self._role_id("unk")

    @property
    def cls_id(self) -> int:
        """The id of the token that starts every input: BERT's [CLS], RoBERTa's <s>."""
        return self._role_id("cls")

    @property
    def sep_id(self) -> int:
        """The id of the token that ends each text: BERT's [SEP], RoBERTa's </s>."""
        return self._role_id("sep")

    @property
    def mask_id(self) -> int:
        return self._role_id("mask")

    @property
    def special_ids(self) -> list[int]:
        """Every special token's id, sorted."""
        return list(self._layout.special_ids)

    @property
    def kind(self) -> str:
        """The subword model: "wordpiece", "bpe" (byte-level BPE) or "unigram" (SentencePiece)."""
        return self._layout.kind

    @property
    def template(self) -> subword.Template:
        """Where the post-processor puts special tokens around one text and a pair, with their
        type ids, and the second text's type id (BERT's 1, RoBERTa's 0): what code that lays out
        windows by hand (SQuAD, long inputs) follows, so every family's pairs come out as its own
        tokenizer would make them."""
        if self._template is None:
            self._configure(self._tok, None, False, False)
            one = self._tok.encode("a", add_special_tokens=True)
            two = self._tok.encode("a", "b", add_special_tokens=True)
            self._template = subword.Template.read(one, two)
        return self._template

    def without_special_tokens(self) -> Tokenizer:
        """A copy that puts no special tokens around a text or a pair: a static model's, whose
        vector is the mean of its text's own tokens (sentence-transformers' StaticEmbedding)."""
        other = copy.copy(self)
        other._tok = _HFTokenizer.from_str(self._tok.to_str())
        other._tok.post_processor = None
        other._template, other._words_tok = None, None
        return other

    def continues_word(self, token: str) -> bool:
        """Whether `token` continues the word of the token before it (whole-word masking): a
        WordPiece "##" piece; for byte-level BPE and SentencePiece, a piece that does not start with
        the word-start mark (Ġ, ▁). Special tokens never do; nor does any token of a pipeline that
        marks no word starts (each token is then a word of its own)."""
        marker = self._layout.marker
        if marker is None or token in self._special_tokens:
            return False
        how, mark = marker
        return token.startswith(mark) if how == "continues" else not token.startswith(mark)

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def fingerprint(self) -> str:
        """A short hash of the vocabulary and casing (BPE, Unigram: of the whole pipeline that
        decides the ids): data prepared with one tokenizer is refused by a model using another."""
        if self._fingerprint is None:
            self._fingerprint = _bert_fingerprint(self.vocab, self.lowercase) if self.kind == "wordpiece" else \
                subword.fingerprint(self._tok, self.kind)
        return self._fingerprint

    # ---- loading and saving ----
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> Tokenizer:
        """From a model directory's vocab.txt (with tokenizer_config.json's casing), or, where a
        directory has only tokenizer.json (as sentence-transformers >= 6 saves, and RoBERTa, XLM-R,
        ALBERT, DeBERTa and ModernBERT directories hold), that file: a WordPiece vocabulary with its
        normalizer's casing, or any BPE or Unigram pipeline as it stands."""
        path = Path(path)
        vocab_file = path / "vocab.txt" if path.is_dir() else path
        if path.is_dir() and not vocab_file.exists() and (path / "tokenizer.json").is_file():
            spec, kind = subword.read_spec(path / "tokenizer.json")
            if kind == "wordpiece":
                return cls(*_wordpiece_spec(spec, path / "tokenizer.json"))
            pipeline = subword.load_pipeline(spec, path / "tokenizer.json")
            layout = subword.describe(pipeline, spec, kind, subword.read_settings(path), path / "tokenizer.json")
            return cls._from_pipeline(pipeline, layout)
        if not vocab_file.exists():
            if path.is_dir() and any(path.glob("*.model")):  # DeBERTa-v3's spm.model, XLM-R's sentencepiece.bpe.model
                raise UserError("no vocab.txt or tokenizer.json: bertkit reads a SentencePiece model through "
                                "tokenizer.json (transformers.AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR) "
                                "writes one)", path)
            raise UserError("no vocab.txt or tokenizer.json (need a model directory or a folder with vocab.txt)", path)
        lowercase = True
        config = vocab_file.parent / "tokenizer_config.json"
        if config.exists():
            try:
                lowercase = bool(json.loads(config.read_text(encoding="utf-8")).get("do_lower_case", True))
            except json.JSONDecodeError as e:
                raise UserError(f"not valid JSON ({e})", config) from None
        return cls(_read_vocab(vocab_file), lowercase)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """tokenizer.json and tokenizer_config.json (WordPiece: vocab.txt too), which both
        `from_pretrained` and transformers' AutoTokenizer read back to the same ids."""
        from bertkit.io import atomic_path, write_json, write_text

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.kind == "wordpiece":
            ordered = sorted(self.vocab, key=self.vocab.get)
            write_text(path / "vocab.txt", "".join(t + "\n" for t in ordered))
        self._configure(self._tok, None, False, False)  # no call's truncation or padding in the file
        with atomic_path(path / "tokenizer.json") as tmp:
            self._tok.save(str(tmp))
        write_json(path / "tokenizer_config.json", self._settings())

    def _settings(self) -> dict:
        if self.kind != "wordpiece":
            return {**self._layout.settings, "model_max_length": self._layout.settings.get("model_max_length", 512)}
        return {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.lowercase,
            "tokenize_chinese_chars": True,
            "strip_accents": None,
            "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
            "cls_token": "[CLS]", "mask_token": "[MASK]",
            "model_max_length": 512,
        }

    @classmethod
    def train(cls, files: Iterable[str | os.PathLike], vocab_size: int = 30522, lowercase: bool = True,
              min_frequency: int = 2, limit_alphabet: int = 1000, show_progress: bool = True,
              kind: str = "wordpiece") -> Tokenizer:
        """Learn a vocabulary from UTF-8 text files (.txt, .gz, .xz), streamed line by line:
        "wordpiece" (BERT's, bertkit.wordpiece), "bpe" (RoBERTa's byte-level BPE) or "unigram"
        (XLM-R's SentencePiece); the last two with the tokenizers library's trainers
        (bertkit.subword), which ignore `limit_alphabet`; Unigram ignores `min_frequency` too.

        The same files and options give the same vocabulary on every run and machine. A file that
        is not text (bertkit.io.check_text: not UTF-8, NUL bytes, control characters) is left out
        with a warning, as `bertkit prepare` leaves it out; when that leaves no file, a UserError names it."""
        import sys

        from bertkit.io import expand_inputs, text_files

        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        paths, skipped = text_files(expand_inputs(files, suffixes=(".txt", ".gz", ".xz")))
        for warning in skipped:
            print(f"warning: {warning}", file=sys.stderr, flush=True)
        if kind == "wordpiece":
            return cls._train_wordpiece(paths, vocab_size, lowercase, min_frequency, limit_alphabet, show_progress)
        if kind == "bpe":
            pipeline, settings = subword.train_bpe(paths, vocab_size, lowercase, min_frequency, show_progress)
        else:
            pipeline, settings = subword.train_unigram(paths, vocab_size, lowercase, show_progress)
        spec = json.loads(pipeline.to_str())
        return cls._from_pipeline(pipeline, subword.describe(pipeline, spec, kind, settings, paths[0]))

    @classmethod
    def _train_wordpiece(cls, paths: list[Path], vocab_size: int, lowercase: bool, min_frequency: int,
                         limit_alphabet: int, show_progress: bool) -> Tokenizer:
        from bertkit.wordpiece import learn_vocabulary, read_pieces, words_from_pieces

        pipeline = _pipeline({t: i for i, t in enumerate(SPECIAL_TOKENS)}, lowercase)
        words = words_from_pieces(read_pieces(paths, show_progress), pipeline.normalizer, pipeline.pre_tokenizer)
        if not words:
            raise UserError("no text to learn a vocabulary from", paths[0] if len(paths) == 1 else None)
        tokens = learn_vocabulary(words, vocab_size, SPECIAL_TOKENS, min_frequency=min_frequency,
                                  limit_alphabet=limit_alphabet, max_word_chars=MAX_WORD_CHARS,
                                  status=show_progress)
        return cls({t: i for i, t in enumerate(tokens)}, lowercase)

    # ---- encoding ----
    def _configure(self, tok: _HFTokenizer, max_length, truncation, padding, pad_to_multiple_of=None):
        if truncation and max_length:
            tok.enable_truncation(max_length, strategy="longest_first")
        else:
            tok.no_truncation()
        pad_token = self._layout.names.get("pad", "[PAD]")
        if padding in ("max_length",) and max_length:
            tok.enable_padding(pad_id=self.pad_id, pad_token=pad_token, length=max_length)
        elif padding in (True, "longest"):
            tok.enable_padding(pad_id=self.pad_id, pad_token=pad_token, pad_to_multiple_of=pad_to_multiple_of)
        else:
            tok.no_padding()

    def encode(self, text: str, pair: str | None = None, max_length: int | None = None,
               truncation: bool = True, padding: bool | str = False,
               add_special_tokens: bool = True) -> Encoding:
        """Tokenize one text (or a pair: [CLS] A [SEP] B [SEP] or the family's template,
        longest-first truncation)."""
        self._configure(self._tok, max_length, truncation, padding)
        return _wrap(self._tok.encode(text, pair, add_special_tokens=add_special_tokens))

    def encode_batch(self, texts: list[str], pairs: list[str] | None = None, max_length: int | None = None,
                     truncation: bool = True, padding: bool | str = False,
                     add_special_tokens: bool = True) -> list[Encoding]:
        """Tokenize many texts in parallel (the tokenizers library's thread pool)."""
        self._configure(self._tok, max_length, truncation, padding)
        inputs = list(zip(texts, pairs)) if pairs is not None else list(texts)
        return [_wrap(e) for e in self._tok.encode_batch(inputs, add_special_tokens=add_special_tokens)]

    def encode_ids_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids only, no specials, no truncation: corpus preparation's fast path (skips the
        offsets and word ids that `encode_batch` builds, about 1.7x faster)."""
        self._configure(self._tok, None, False, False)
        return [e.ids for e in self._tok.encode_batch_fast(texts, add_special_tokens=False)]

    def encode_words(self, words: list[str], max_length: int | None = None) -> Encoding:
        """Tokenize pre-split words (NER): [CLS] pieces [SEP], word_ids index into `words`. Byte-level
        BPE gives each word its leading space (Ġ), as RobertaTokenizerFast(add_prefix_space=True)
        with is_split_into_words=True does."""
        if self._words_tok is None:
            self._words_tok = subword.words_pipeline(self._tok) if self.kind == "bpe" else self._tok
        self._configure(self._words_tok, max_length, True, False)
        return _wrap(self._words_tok.encode(words, is_pretokenized=True))

    def tokenize(self, text: str) -> list[str]:
        return self._tok.encode(text, add_special_tokens=False).tokens

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        unknown = self._layout.names.get("unk", "[UNK]")
        return [self.inv_vocab.get(int(i), unknown) for i in ids]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(map(int, ids)), skip_special_tokens=skip_special_tokens)


def _bert_fingerprint(vocab: dict[str, int], lowercase: bool) -> str:
    import hashlib

    h = hashlib.sha256(("lower" if lowercase else "cased").encode())
    for token in sorted(vocab, key=vocab.get):
        h.update(token.encode() + b"\n")
    return h.hexdigest()[:16]


def _wrap(e) -> Encoding:
    return Encoding(
        ids=e.ids, type_ids=e.type_ids, attention_mask=e.attention_mask,
        offsets=[tuple(o) for o in e.offsets], word_ids=e.word_ids, tokens=e.tokens,
        sequence_ids=e.sequence_ids, truncated=bool(e.overflowing),
    )
