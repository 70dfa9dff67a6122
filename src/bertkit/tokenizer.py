"""WordPiece tokenization on the `tokenizers` library's BERT pipeline.

normalizer (clean control characters, split CJK characters, lower-case and strip accents when
uncased) -> pre-tokenizer (white space and punctuation) -> WordPiece (greedy longest match,
"##" continuations, [UNK] for words over 100 characters) -> [CLS] A [SEP] (B [SEP]).

The pipeline is built from `vocab.txt` and `do_lower_case`, so any BERT vocabulary gives the same
ids, type ids and offsets as transformers' BertTokenizerFast. A trained vocabulary puts the five
special tokens first: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4. Training is our own
(bertkit.wordpiece) rather than the tokenizers library's trainer, which breaks ties in hash
order, so that the same text always gives the same vocab.txt.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from bertkit.errors import UserError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_WORD_CHARS = 100


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


def _read_tokenizer_json(path: Path) -> tuple[dict[str, int], bool]:
    """(vocabulary, lowercase) of a BERT tokenizer.json: its WordPiece model's vocab and its
    BertNormalizer's `lowercase` (a Lowercase step in a Sequence counts too)."""
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"not valid JSON ({e})", path) from None
    model = spec.get("model") if isinstance(spec, dict) else None
    if not isinstance(model, dict) or model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
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
    """BERT's WordPiece tokenizer. Build with `from_pretrained(dir)` or `train(files)`."""

    def __init__(self, vocab: dict[str, int], lowercase: bool = True):
        self.vocab = vocab
        self.lowercase = lowercase
        self._tok = _pipeline(vocab, lowercase)
        self.inv_vocab = {i: t for t, i in vocab.items()}

    # ---- special tokens ----
    @property
    def pad_id(self) -> int:
        return self.vocab.get("[PAD]", 0)

    @property
    def unk_id(self) -> int:
        return self.vocab["[UNK]"]

    @property
    def cls_id(self) -> int:
        return self.vocab["[CLS]"]

    @property
    def sep_id(self) -> int:
        return self.vocab["[SEP]"]

    @property
    def mask_id(self) -> int:
        if "[MASK]" not in self.vocab:
            raise UserError("this vocabulary has no [MASK] token")
        return self.vocab["[MASK]"]

    @property
    def special_ids(self) -> list[int]:
        return sorted(self.vocab[t] for t in SPECIAL_TOKENS if t in self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def fingerprint(self) -> str:
        """A short hash of the vocabulary and casing: data prepared with one tokenizer is
        refused by a model using another."""
        import hashlib

        h = hashlib.sha256(("lower" if self.lowercase else "cased").encode())
        for token in sorted(self.vocab, key=self.vocab.get):
            h.update(token.encode() + b"\n")
        return h.hexdigest()[:16]

    # ---- loading and saving ----
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> Tokenizer:
        """From a model directory's vocab.txt (with tokenizer_config.json's casing), or, where a
        directory has only tokenizer.json (as sentence-transformers >= 6 saves), its WordPiece
        vocabulary and its normalizer's casing."""
        path = Path(path)
        vocab_file = path / "vocab.txt" if path.is_dir() else path
        if path.is_dir() and not vocab_file.exists() and (path / "tokenizer.json").is_file():
            return cls(*_read_tokenizer_json(path / "tokenizer.json"))
        if not vocab_file.exists():
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
        from bertkit.io import atomic_path, write_json, write_text

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        ordered = sorted(self.vocab, key=self.vocab.get)
        write_text(path / "vocab.txt", "".join(t + "\n" for t in ordered))
        with atomic_path(path / "tokenizer.json") as tmp:
            self._tok.save(str(tmp))
        write_json(path / "tokenizer_config.json", {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.lowercase,
            "tokenize_chinese_chars": True,
            "strip_accents": None,
            "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
            "cls_token": "[CLS]", "mask_token": "[MASK]",
            "model_max_length": 512,
        })

    @classmethod
    def train(cls, files: Iterable[str | os.PathLike], vocab_size: int = 30522, lowercase: bool = True,
              min_frequency: int = 2, limit_alphabet: int = 1000, show_progress: bool = True) -> Tokenizer:
        """Learn a WordPiece vocabulary from UTF-8 text files (.txt, .gz, .xz), streamed line by line.

        The same files and options give the same vocabulary on every run and machine
        (bertkit.wordpiece breaks every tie in a defined order). A file that is not text
        (bertkit.io.check_text: not UTF-8, NUL bytes, control characters) is left out with a
        warning, as `bertkit prepare` leaves it out; when that leaves no file, a UserError names it."""
        import sys

        from bertkit.io import expand_inputs, text_files
        from bertkit.wordpiece import learn_vocabulary, words_from_pieces

        paths, skipped = text_files(expand_inputs(files, suffixes=(".txt", ".gz", ".xz")))
        for warning in skipped:
            print(f"warning: {warning}", file=sys.stderr, flush=True)
        pipeline = _pipeline({t: i for i, t in enumerate(SPECIAL_TOKENS)}, lowercase)
        words = words_from_pieces(_read_pieces(paths, show_progress), pipeline.normalizer, pipeline.pre_tokenizer)
        if not words:
            raise UserError("no text to learn a vocabulary from", paths[0] if len(paths) == 1 else None)
        tokens = learn_vocabulary(words, vocab_size, SPECIAL_TOKENS, min_frequency=min_frequency,
                                  limit_alphabet=limit_alphabet, max_word_chars=MAX_WORD_CHARS,
                                  status=show_progress)
        return cls({t: i for i, t in enumerate(tokens)}, lowercase)

    # ---- encoding ----
    def _configure(self, max_length, truncation, padding, pad_to_multiple_of=None):
        tok = self._tok
        if truncation and max_length:
            tok.enable_truncation(max_length, strategy="longest_first")
        else:
            tok.no_truncation()
        if padding in ("max_length",) and max_length:
            tok.enable_padding(pad_id=self.pad_id, pad_token="[PAD]", length=max_length)
        elif padding in (True, "longest"):
            tok.enable_padding(pad_id=self.pad_id, pad_token="[PAD]", pad_to_multiple_of=pad_to_multiple_of)
        else:
            tok.no_padding()

    def encode(self, text: str, pair: str | None = None, max_length: int | None = None,
               truncation: bool = True, padding: bool | str = False,
               add_special_tokens: bool = True) -> Encoding:
        """Tokenize one text (or a pair: [CLS] A [SEP] B [SEP], longest-first truncation)."""
        self._configure(max_length, truncation, padding)
        return _wrap(self._tok.encode(text, pair, add_special_tokens=add_special_tokens))

    def encode_batch(self, texts: list[str], pairs: list[str] | None = None, max_length: int | None = None,
                     truncation: bool = True, padding: bool | str = False,
                     add_special_tokens: bool = True) -> list[Encoding]:
        """Tokenize many texts in parallel (the tokenizers library's thread pool)."""
        self._configure(max_length, truncation, padding)
        inputs = list(zip(texts, pairs)) if pairs is not None else list(texts)
        return [_wrap(e) for e in self._tok.encode_batch(inputs, add_special_tokens=add_special_tokens)]

    def encode_ids_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids only, no specials, no truncation: corpus preparation's fast path (skips the
        offsets and word ids that `encode_batch` builds, about 1.7x faster)."""
        self._configure(None, False, False)
        return [e.ids for e in self._tok.encode_batch_fast(texts, add_special_tokens=False)]

    def encode_words(self, words: list[str], max_length: int | None = None) -> Encoding:
        """Tokenize pre-split words (NER): [CLS] pieces [SEP], word_ids index into `words`."""
        self._configure(max_length, True, False)
        return _wrap(self._tok.encode(words, is_pretokenized=True))

    def tokenize(self, text: str) -> list[str]:
        return self._tok.encode(text, add_special_tokens=False).tokens

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.inv_vocab.get(int(i), "[UNK]") for i in ids]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(map(int, ids)), skip_special_tokens=skip_special_tokens)


def _wrap(e) -> Encoding:
    return Encoding(
        ids=e.ids, type_ids=e.type_ids, attention_mask=e.attention_mask,
        offsets=[tuple(o) for o in e.offsets], word_ids=e.word_ids, tokens=e.tokens,
        sequence_ids=e.sequence_ids, truncated=bool(e.overflowing),
    )


def _read_pieces(paths: list[Path], status: bool = False, every_s: float = 15.0) -> Counter:
    """The space-separated pieces of every file, counted (bertkit.wordpiece.count_pieces).

    A file `read_lines` refuses (not valid UTF-8, as a binary file is, or a broken .gz/.xz) is
    skipped whole with a warning on stderr naming file and line, as `bertkit prepare` skips it,
    so the vocabulary comes from the text prepare will use. When no file is left, the error
    itself is raised: one line.
    With `status`, a line on stderr every `every_s` seconds says how far reading has got."""
    import sys
    import time

    from bertkit.io import read_lines
    from bertkit.wordpiece import count_pieces

    pieces: Counter = Counter()
    skipped: list[UserError] = []
    chars = 0

    def tally(lines: Iterator[str]) -> Iterator[str]:
        nonlocal chars
        for line in lines:
            chars += len(line) + 1
            yield line

    start = last = time.perf_counter()
    for n, p in enumerate(paths, start=1):
        try:
            # added only once read whole: a skipped file leaves nothing behind, as in prepare
            pieces.update(count_pieces(tally(read_lines(p))))
        except UserError as e:
            skipped.append(e)
        now = time.perf_counter()
        # a closing total too, once reading has been long enough to need status lines
        if status and (now - last >= every_s or (n == len(paths) and now - start >= every_s)):
            last = now
            print(f"read {n}/{len(paths)} files, {chars / 1e6:.1f} M characters, "
                  f"{chars / 1e6 / (now - start):.2f} M/s", file=sys.stderr, flush=True)
    if skipped and not pieces:
        if len(skipped) == 1:
            raise skipped[0]
        raise UserError(f"no text to learn a vocabulary from: {len(skipped)} files skipped, the first {skipped[0]}")
    for e in skipped:
        print(f"warning: {e}; skipped this file", file=sys.stderr, flush=True)
    return pieces
