"""Raw text -> documents -> paragraphs -> sentences, streamed one file at a time.

Files are `.txt`, `.gz`, `.xz` (text) or `.jsonl` (one JSON object per line with a `text` field;
each object is one document). How a text file is cut into documents is decided per file from
its first 1000 non-blank lines (`file_layout`):

- hard-wrapped (at most 5% of those lines are over 100 characters, as Gutenberg books wrapped at
  ~70 columns): the whole file is one document, each blank-line-separated block is a paragraph
  and its lines are joined with a space;
- one paragraph per line, blocks of several lines (as the Wikipedia shards: an article per
  block): each block is a document and each line a paragraph;
- one paragraph per line, blocks of one line (as the inaugural addresses: a blank line between
  paragraphs): the whole file is one document, each line a paragraph.

Sentences are cut by a rule-based splitter (no nltk): after `.`, `!` or `?` (plus closing
quotes or brackets) followed by white space and an upper-case letter, digit or opening quote,
except after known abbreviations (Mr., Dr., e.g., ...) and initials or dotted acronyms (J.,
U.S.). Decimals never split because no white space follows their point. A missed split only
makes one sentence longer, so the rules err towards not splitting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import read_lines

SAMPLE_LINES = 1000  # non-blank lines looked at to decide a file's layout
WRAP_WIDTH = 100  # a hard-wrapped line is at most this long
WRAP_TOLERANCE = 0.05  # fraction of longer lines still allowed in a hard-wrapped file

ABBREVIATIONS = frozenset("""
mr mrs ms messrs dr prof st jr sr rev hon gen col capt lt sgt maj cmdr adm gov sen rep pres supt
mt ave blvd cf vs viz approx dept inc ltd co corp bros e.g i.e a.d b.c ca al
jan feb mar apr jun jul aug sep sept oct nov dec
""".split())
NUMBER_ABBREVIATIONS = frozenset("no nos vol vols fig figs p pp art ch sec".split())  # only before a digit

_BOUNDARY = re.compile(r"(?P<word>\S*?)(?P<end>[.!?]+[\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]*[A-Z0-9])")
_DOTTED = re.compile(r"(?:[A-Za-z]\.)*[A-Za-z]")  # J, U.S, J.R.R: initials and acronyms
_LEADING_PUNCT = re.compile(r"^[\"'\u201c\u2018(\[]+")


def split_sentences(paragraph: str) -> list[str]:
    """Cut a paragraph into sentences (see the module docstring for the rules)."""
    sentences, start = [], 0
    for m in _BOUNDARY.finditer(paragraph):
        if m.group("end").startswith(".") and not m.group("end").startswith(".."):
            word = _LEADING_PUNCT.sub("", m.group("word"))
            if _is_abbreviation(word, paragraph[m.end()]):
                continue
        cut = m.start("end") + len(m.group("end"))
        sentence = paragraph[start:cut].strip()
        if sentence:
            sentences.append(sentence)
        start = m.end()
    rest = paragraph[start:].strip()
    if rest:
        sentences.append(rest)
    return sentences


def _is_abbreviation(word: str, next_char: str) -> bool:
    """Whether `word.` is an abbreviation or initial rather than a sentence end."""
    lower = word.lower()
    if lower in ABBREVIATIONS or (next_char.isdigit() and lower in NUMBER_ABBREVIATIONS):
        return True
    return word != "I" and _DOTTED.fullmatch(word) is not None  # "said I." ends a sentence


def _blocks(lines: Iterable[str]) -> Iterator[list[str]]:
    """Blank-line-separated blocks of stripped, non-blank lines."""
    block: list[str] = []
    for line in lines:
        line = line.strip()
        if line:
            block.append(line)
        elif block:
            yield block
            block = []
    if block:
        yield block


def file_layout(lines: list[str]) -> str:
    """How a file's blank-line-separated blocks read, judged from a sample of its lines:

    "wrapped": hard-wrapped text (almost no line over WRAP_WIDTH characters); a block is a
    paragraph whose lines are joined, and the file is one document;
    "paragraphs": long lines, blocks mostly of one line; a block is a paragraph, the file one document;
    "documents": long lines in blocks of several lines; a block is a document, a line a paragraph.
    """
    nonblank = [line for line in lines if line.strip()]
    long_lines = sum(len(line) > WRAP_WIDTH for line in nonblank)
    if long_lines <= WRAP_TOLERANCE * len(nonblank):
        return "wrapped"
    blocks = list(_blocks(lines))
    single = sum(len(block) == 1 for block in blocks)
    return "paragraphs" if single >= 0.8 * len(blocks) else "documents"


def documents_from_lines(lines: Iterable[str]) -> Iterator[list[str]]:
    """Documents (lists of paragraphs) of one text file's lines, layout decided per file."""
    lines = iter(lines)
    head: list[str] = []
    nonblank = 0
    for line in lines:
        head.append(line)
        nonblank += bool(line.strip())
        if nonblank >= SAMPLE_LINES:
            break
    layout = file_layout(head)
    blocks = _blocks(_chain(head, lines))
    if layout == "documents":
        yield from blocks
        return
    document = [" ".join(block) for block in blocks]
    if document:
        yield document


def _chain(head: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from head
    yield from rest


def _jsonl_documents(path: Path) -> Iterator[list[str]]:
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)["text"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise UserError("expected a JSON object with a string `text` field", path, number) from None
        if not isinstance(text, str):
            raise UserError("the `text` field is not a string", path, number)
        paragraphs = [p for doc in documents_from_lines(text.split("\n")) for p in doc]
        if paragraphs:
            yield paragraphs


def read_documents(path: str | Path) -> Iterator[list[str]]:
    """The documents of one file, each as its list of sentences (paragraph breaks dropped).

    Raises UserError (file and line) on bad UTF-8 or a malformed JSONL line.
    """
    path = Path(path)
    if path.name.endswith((".jsonl", ".jsonl.gz", ".jsonl.xz")):
        documents = _jsonl_documents(path)
    else:
        documents = documents_from_lines(read_lines(path))
    for paragraphs in documents:
        sentences = [s for p in paragraphs for s in split_sentences(p)]
        if sentences:
            yield sentences
