"""The tokenizers of BERT's descendants, read from a model directory's tokenizer.json, and learned.

RoBERTa and ModernBERT use byte-level BPE; XLM-R, ALBERT and DeBERTa-v2/v3 use SentencePiece
(Unigram on Metaspace); DistilBERT uses BERT's WordPiece (bertkit.tokenizer builds that one
itself). A directory's tokenizer.json runs through the tokenizers library as it stands, with its
own normalizer, pre-tokenizer, post-processor and decoder, so ids, type ids, offsets and word ids
are the ones transformers' fast tokenizer gives for the directory. What the pipeline does not say,
this module reads (`describe`): which token plays which part ([CLS] or <s>, ...: tokenizer_config.json,
else special_tokens_map.json, else the usual names), where a word starts (for whole-word
masking), and the settings a saved copy writes so that `transformers.AutoTokenizer` loads it.

Pre-split words (NER) with byte-level BPE are encoded as RobertaTokenizerFast(add_prefix_space=True)
encodes them (`words_pipeline`): each word with the space (Ġ) it has inside a sentence. ModernBERT's
generic fast tokenizer would encode them without it, as if each word began a text.

Training (`train_bpe`, `train_unigram`) uses the tokenizers library's trainers. Its byte-level BPE
trainer gives the same vocabulary on every run: all 256 byte characters are the alphabet, numbered
in code-point order, and equal pair counts go to the pair of lower ids. Its Unigram trainer does
not: it sums the EM's expected counts over the words in hash-map order and orders the pieces by
those sums, so the order (the ids) changed from run to run and the scores in their last digits
(the characters it adds at the end get 1e-4 steps of a penalty in hash-set order too). The pieces
themselves were the same in every run we tried (five at each of three sizes), so `train_unigram`
numbers them in code-point order after the specials: the same vocabulary on every run, with
scores that may still differ slightly (`fingerprint` leaves scores out for that reason).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertkit.errors import UserError

MODEL_KINDS = {"WordPiece": "wordpiece", "BPE": "bpe", "Unigram": "unigram"}  # tokenizer.json's model.type
ROLES = ("cls", "sep", "pad", "mask", "unk")
USUAL_NAMES = {"cls": ("[CLS]", "<s>"), "sep": ("[SEP]", "</s>"), "pad": ("[PAD]", "<pad>"),
               "mask": ("[MASK]", "<mask>"), "unk": ("[UNK]", "<unk>")}
# what `train_bpe` and `train_unigram` put first, in this order: RoBERTa's four, then the mask
TRAINED_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
MIN_BPE_VOCAB = 256 + len(TRAINED_SPECIALS)  # the byte alphabet and the specials
BYTE_SPACE = "Ġ"  # ByteLevel's stand-in for the space byte that starts a word


@dataclass(frozen=True)
class Layout:
    """What bertkit needs to know about a tokenizer beyond its pipeline."""

    kind: str  # "wordpiece", "bpe" or "unigram"
    names: dict[str, str]  # role ("cls", "sep", "pad", "mask", "unk") -> its token; a role may be absent
    special_ids: tuple[int, ...]  # every special added token and every role's token, sorted
    marker: tuple[str, str] | None  # ("continues", "##") or ("starts", "Ġ" or "▁"); None: words unmarked
    settings: dict  # tokenizer_config.json of a saved copy, less model_max_length's default


def read_spec(path: Path) -> tuple[dict, str]:
    """(tokenizer.json as a dict, its kind); one UserError line naming the file when it is not JSON or
    its model is none of WordPiece, BPE, Unigram."""
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"not valid JSON ({e})", path) from None
    model = spec.get("model") if isinstance(spec, dict) else None
    found = model.get("type") if isinstance(model, dict) else None
    if found not in MODEL_KINDS:
        raise UserError(f"not a WordPiece tokenizer (BERT's), nor a BPE or Unigram one: its model type is {found!r}",
                        path)
    return spec, MODEL_KINDS[found]


def load_pipeline(spec: dict, path: Path) -> _HFTokenizer:
    """The tokenizers library's pipeline of a BPE or Unigram tokenizer.json. A Unigram model is
    rebuilt from the scores as Python reads them: the library's own JSON reader (serde's fast float
    parsing) reads some a unit in the last place off, which flips segmentations that tie
    (transformers' SentencePiece classes build the model from Python's values too)."""
    try:
        pipeline = _HFTokenizer.from_str(json.dumps(spec))
        if spec["model"]["type"] == "Unigram":
            pipeline.model = unigram_model(spec["model"])
    except Exception as e:  # the library raises a bare Exception with serde's message
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"not a WordPiece tokenizer (BERT's), nor a BPE or Unigram one the tokenizers "
                        f"library reads ({reason})", path) from None
    pipeline.no_truncation()  # a file may carry its writer's truncation or padding; each call sets its own
    pipeline.no_padding()
    ids = sorted(pipeline.get_vocab(with_added_tokens=True).values())
    if ids != list(range(len(ids))):
        raise UserError("vocabulary ids are not 0..n-1 without gaps", path)
    return pipeline


def unigram_model(model: dict) -> models.Unigram:
    """tokenizer.json's Unigram model with its scores exactly as written."""
    return models.Unigram([(piece, float(score)) for piece, score in model["vocab"]], model.get("unk_id"),
                          model.get("byte_fallback", False))


def read_settings(folder: Path) -> dict:
    """tokenizer_config.json, with special_tokens_map.json's entries over it unless it lists its
    added tokens itself (as transformers reads them); {} when neither is there."""
    settings = _json_object(folder / "tokenizer_config.json")
    if "added_tokens_decoder" not in settings:
        settings.update(_json_object(folder / "special_tokens_map.json"))
    return settings


def _json_object(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"not valid JSON ({e})", path) from None
    if not isinstance(value, dict):
        raise UserError("expected a JSON object", path)
    return value


def _token_name(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def role_names(pipeline: _HFTokenizer, settings: dict, path: Path) -> dict[str, str]:
    """role -> token: the one the settings name, else the first usual name among the added tokens,
    else in the vocabulary. [CLS] and [SEP] (or their stand-ins) are required."""
    added = {t.content for t in pipeline.get_added_tokens_decoder().values()}
    names = {}
    for role in ROLES:
        named = _token_name(settings.get(f"{role}_token"))
        if named is not None and pipeline.token_to_id(named) is None:
            raise UserError(f"{role}_token {named!r} is not in tokenizer.json's vocabulary", path)
        usual = [t for t in USUAL_NAMES[role] if t in added] or \
                [t for t in USUAL_NAMES[role] if pipeline.token_to_id(t) is not None]
        if named is not None or usual:
            names[role] = named if named is not None else usual[0]
    for role in ("cls", "sep"):
        if role not in names:
            raise UserError(f"no {role} token: tokenizer_config.json names no {role}_token and tokenizer.json "
                            f"holds none of {' '.join(USUAL_NAMES[role])}", path)
    return names


def word_marker(spec: dict, kind: str) -> tuple[str, str] | None:
    """How a token shows a word boundary: WordPiece marks the pieces that continue a word ("##"),
    ByteLevel and Metaspace mark the ones that start one (Ġ, ▁); None when the pipeline marks neither."""
    if kind == "wordpiece":
        return ("continues", spec["model"].get("continuing_subword_prefix") or "##")
    steps = _pre_tokenizer_steps(spec.get("pre_tokenizer"))
    for step in steps:
        if step.get("type") == "ByteLevel":
            return ("starts", BYTE_SPACE)
    for step in steps:
        if step.get("type") == "Metaspace":
            return ("starts", step.get("replacement") or "▁")
    return None


def _pre_tokenizer_steps(part) -> list[dict]:
    """A pre-tokenizer and, for a Sequence, its members (one level, as the families write them)."""
    if not isinstance(part, dict):
        return []
    return [part, *(m for m in part.get("pretokenizers") or [] if isinstance(m, dict))]


def describe(pipeline: _HFTokenizer, spec: dict, kind: str, settings: dict, path: Path) -> Layout:
    """The Layout of a directory's BPE or Unigram tokenizer; `settings` as read_settings gives them
    (a saved copy keeps them, so transformers rebuilds the same tokenizer from it)."""
    names = role_names(pipeline, settings, path)
    vocab = pipeline.get_vocab(with_added_tokens=True)
    special = {i for i, t in pipeline.get_added_tokens_decoder().items() if t.special}
    special |= {vocab[t] for t in names.values()}
    saved = {key: value for key, value in settings.items() if key not in ("tokenizer_file", "name_or_path")}
    saved.setdefault("tokenizer_class", "PreTrainedTokenizerFast")  # reads tokenizer.json as it stands
    for role, token in names.items():
        saved.setdefault(f"{role}_token", token)
    return Layout(kind, names, tuple(sorted(special)), word_marker(spec, kind), saved)


def words_pipeline(pipeline: _HFTokenizer) -> _HFTokenizer:
    """The pipeline for pre-split words: byte-level steps with add_prefix_space on (every word gets
    its Ġ, as RobertaTokenizerFast(add_prefix_space=True) gives), else `pipeline` itself."""
    spec = json.loads(pipeline.to_str())
    changed = {**spec, **{key: _prefix_spaces(spec.get(key)) for key in ("pre_tokenizer", "post_processor")}}
    return _HFTokenizer.from_str(json.dumps(changed)) if changed != spec else pipeline


def _prefix_spaces(part):
    if isinstance(part, list):
        return [_prefix_spaces(p) for p in part]
    if not isinstance(part, dict):
        return part
    if part.get("type") in ("ByteLevel", "RobertaProcessing") and "add_prefix_space" in part:
        part = {**part, "add_prefix_space": True}
    return {key: _prefix_spaces(value) for key, value in part.items()}


def fingerprint(pipeline: _HFTokenizer, kind: str) -> str:
    """A short hash of what an id means: the vocabulary (tokens in id order), and the normalizer and
    pre-tokenizer that decide what text meets it. Not merges or scores: they choose among ways to
    cut a word, not what an id stands for (two Unigram trainings give one vocabulary whose scores
    differ in their last digits)."""
    spec = json.loads(pipeline.to_str())
    h = hashlib.sha256(kind.encode() + b"\n")
    for part in ("normalizer", "pre_tokenizer"):
        h.update(json.dumps(spec.get(part), sort_keys=True, ensure_ascii=False).encode() + b"\n")
    vocab = pipeline.get_vocab(with_added_tokens=True)
    for token in sorted(vocab, key=vocab.get):
        h.update(token.encode() + b"\n")
    return h.hexdigest()[:16]


# ---- learning a vocabulary ----

def _uncased() -> normalizers.Normalizer:
    """BERT's uncased: accents stripped, then lower case."""
    return normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()])


def train_bpe(paths: list[Path], vocab_size: int, lowercase: bool, min_frequency: int,
              show_progress: bool) -> tuple[_HFTokenizer, dict]:
    """RoBERTa's byte-level BPE learned from `paths`: <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4, then
    the 256 byte characters, then merges. Returns (pipeline, settings for tokenizer_config.json)."""
    tok = _HFTokenizer(models.BPE())
    if lowercase:
        tok.normalizer = _uncased()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(TRAINED_SPECIALS), show_progress=show_progress,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    _learn(tok, trainer, paths)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=False)
    # RobertaTokenizer rebuilds this pipeline less any normalizer: an uncased one is read as it stands
    family = {"tokenizer_class": "RobertaTokenizer", "add_prefix_space": False, "trim_offsets": True}
    return tok, _trained_settings(family, lowercase)


def train_unigram(paths: list[Path], vocab_size: int, lowercase: bool,
                  show_progress: bool) -> tuple[_HFTokenizer, dict]:
    """XLM-R's SentencePiece Unigram learned from `paths`: white-space split, ▁ before every word,
    <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4, then the pieces in code-point order (module docstring)."""
    tok = _HFTokenizer(models.Unigram())
    if lowercase:
        tok.normalizer = _uncased()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=list(TRAINED_SPECIALS), unk_token="<unk>",
                                      show_progress=show_progress)
    _learn(tok, trainer, paths)
    tok = _in_code_point_order(tok, len(TRAINED_SPECIALS))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    family = {"tokenizer_class": "XLMRobertaTokenizer", "add_prefix_space": True}
    return tok, _trained_settings(family, lowercase)


def _in_code_point_order(tok: _HFTokenizer, n_specials: int) -> _HFTokenizer:
    """The Unigram model with its pieces after the first `n_specials` sorted by their strings."""
    model = json.loads(tok.to_str())["model"]
    pieces = model["vocab"]
    tok.model = unigram_model({**model, "vocab": pieces[:n_specials] + sorted(pieces[n_specials:], key=lambda p: p[0])})
    return tok


def _trained_settings(family: dict, lowercase: bool) -> dict:
    names = dict(zip(("bos", "pad", "eos", "unk", "mask"), TRAINED_SPECIALS))
    names |= {"cls": names["bos"], "sep": names["eos"]}
    # the family's class rebuilds its own pipeline and would drop the uncased normalizer
    settings = family if not lowercase else {"tokenizer_class": "PreTrainedTokenizerFast"}
    return {**settings, **{f"{role}_token": token for role, token in names.items()}}


def usable_files(paths: list[Path]) -> list[Path]:
    """The files `read_lines` reads to the end. Each other one (not UTF-8 past the head `check_text`
    saw, or a broken .gz/.xz) is left out with a warning naming file and line, as `bertkit prepare`
    leaves it out; when none is left, the first one's error (one line)."""
    from bertkit.io import read_lines

    kept, skipped = [], []
    for path in paths:
        try:
            for _ in read_lines(path):
                pass
            kept.append(path)
        except UserError as e:
            skipped.append(e)
    if not kept:
        raise skipped[0]
    for e in skipped:
        print(f"warning: {e}; skipped this file", file=sys.stderr, flush=True)
    return kept


def _learn(tok: _HFTokenizer, trainer, paths: list[Path]) -> None:
    """`tok` trained on the lines of `paths`, streamed; a UserError when they hold no word."""
    from bertkit.io import read_lines

    seen = False

    def lines() -> Iterator[str]:
        nonlocal seen
        for path in usable_files(paths):
            for line in read_lines(path):
                seen = seen or bool(line.strip())  # strips only until the first word
                yield line

    tok.train_from_iterator(lines(), trainer)
    if not seen:
        raise UserError("no text to learn a vocabulary from", paths[0] if len(paths) == 1 else None)


@dataclass(frozen=True)
class Template:
    """Special tokens (id, type id) before a text, and before, between and after a pair's texts;
    `second_type`: the type id of the pair's second text."""

    single: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]  # (before, after)
    pair: tuple[tuple[tuple[int, int], ...], ...]  # (before, middle, after)
    second_type: int

    @classmethod
    def read(cls, one, two) -> Template:
        def parts(e, segments: int):
            cuts, current = [[] for _ in range(segments + 1)], 0
            for token, seq, type_id in zip(e.ids, e.sequence_ids, e.type_ids):
                if seq is None:
                    cuts[current].append((token, type_id))
                else:
                    current = seq + 1
            return tuple(tuple(c) for c in cuts)

        second = next((t for t, s in zip(two.type_ids, two.sequence_ids) if s == 1), 0)
        return cls(parts(one, 1), parts(two, 2), second)

    @property
    def single_count(self) -> int:
        return sum(map(len, self.single))

    @property
    def pair_count(self) -> int:
        return sum(map(len, self.pair))

    def wrap(self, a: list[int], b: list[int] | None = None) -> tuple[list[int], list[int]]:
        """(ids, type ids) of one text's ids, or a pair's, with the special tokens in place."""
        if b is None:
            before, after = self.single
            return ([t for t, _ in before] + list(a) + [t for t, _ in after],
                    [k for _, k in before] + [0] * len(a) + [k for _, k in after])
        before, middle, after = self.pair
        ids = [t for t, _ in before] + list(a) + [t for t, _ in middle] + list(b) + [t for t, _ in after]
        types = ([k for _, k in before] + [0] * len(a) + [k for _, k in middle] + [self.second_type] * len(b)
                 + [k for _, k in after])
        return ids, types

    def second_offset(self, first: int) -> int:
        """Position of the second text's first token, after a first text of `first` tokens."""
        return len(self.pair[0]) + first + len(self.pair[1])
