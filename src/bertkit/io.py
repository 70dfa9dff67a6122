"""Reading text files of any compression, and writing outputs atomically.

Readers stream line by line so corpora larger than memory work, and turn decoding failures into
a `UserError` that names the file and line. Writers go through a temporary file (or folder) in
the destination's directory and an `os.replace`, so a crash never leaves a half-written output.

What counts as text is one rule for every reader (`check_text`, applied by `read_lines`, and by
`text_files` before `prepare` or `tokenizer train` start): judged from a file's first 64 KiB
(after decompression), it is not text when they are not UTF-8, hold a NUL byte, or more than
5% of their characters are control characters other than tab, line and page breaks. A file of
NUL bytes is valid UTF-8 but no one's text; as `git` and `file` do, we judge from the head
rather than read a whole corpus twice.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import lzma
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bertkit.errors import UserError

TEXT_SUFFIXES = (".txt", ".gz", ".xz", ".jsonl", ".tsv", ".csv")
SNIFF_BYTES = 64 * 1024  # the head of a file that `check_text` judges
CONTROL_SHARE = 0.05  # more control characters than this share of the head: not text
# C0 and C1 control characters except tab, line feed, vertical tab, form feed and carriage return
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _open_binary(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    if path.suffix == ".xz":
        return lzma.open(path, "rb")
    return open(path, "rb")


def check_text(path: str | os.PathLike) -> None:
    """A UserError naming the file (and line) unless its head reads as text (the module's rule)."""
    path = Path(path)
    if not path.exists():
        raise UserError("no such file", path)
    if path.is_dir():
        raise UserError("is a directory, expected a file", path)
    if path.stat().st_size == 0:
        return
    try:
        with _open_binary(path) as f:
            head = f.read(SNIFF_BYTES)
    except (OSError, EOFError, lzma.LZMAError) as e:
        raise UserError(f"cannot read: {e}", path) from None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        cut = len(head) == SNIFF_BYTES and e.start >= len(head) - 3 and e.reason == "unexpected end of data"
        if not cut:  # a multi-byte character cut off by the end of the head is no error
            line_start = head.rfind(b"\n", 0, e.start) + 1
            raise UserError(f"not valid UTF-8 (byte {e.start - line_start})", path,
                            head.count(b"\n", 0, e.start) + 1) from None
        text = head[: e.start].decode("utf-8")
    nul = text.find("\0")
    if nul >= 0:
        raise UserError("not text: holds NUL bytes (a binary file?)", path, text.count("\n", 0, nul) + 1)
    controls = len(_CONTROL.findall(text))
    if controls > CONTROL_SHARE * len(text):
        raise UserError(f"not text: {controls:,} of its first {len(text):,} characters are control characters",
                        path)


def text_files(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """(the files of `paths` that are text, why each other one is not), checked by `check_text`
    before any work starts, so a command can warn and leave those out. When none is left, the
    first one's error is raised (one line). Empty files are left out silently, and refused when
    every file is empty."""
    kept, skipped = [], []
    for p in paths:
        try:
            check_text(p)
        except UserError as e:
            skipped.append(e)
            continue
        if p.stat().st_size > 0:
            kept.append(p)
    if not kept:
        if skipped:
            raise skipped[0]
        raise UserError("empty file: no text to read" if len(paths) == 1 else
                        f"all {len(paths)} input files are empty", paths[0] if len(paths) == 1 else None)
    return kept, [f"{e}; skipped this file" for e in skipped]


def read_lines(path: str | os.PathLike, errors: str = "strict") -> Iterator[str]:
    """Yield the lines of a `.txt`/`.gz`/`.xz` file as str without the line ending.

    errors="strict" raises a UserError naming the file and line on bad UTF-8, or on a file that
    is not text (`check_text`); errors="replace" substitutes U+FFFD for bad UTF-8 instead.
    """
    path = Path(path)
    if errors == "strict":
        check_text(path)
    elif not path.exists():
        raise UserError("no such file", path)
    elif path.is_dir():
        raise UserError("is a directory, expected a file", path)
    if path.stat().st_size == 0:
        return  # no lines; lzma would call a zero-byte .xz a truncated stream
    try:
        with _open_binary(path) as f:
            for number, raw in enumerate(f, start=1):
                try:
                    text = raw.decode("utf-8", errors=errors)
                except UnicodeDecodeError as e:
                    raise UserError(f"not valid UTF-8 (byte {e.start})", path, number) from None
                yield text.rstrip("\r\n")
    except (OSError, EOFError, lzma.LZMAError) as e:
        if isinstance(e, UserError):
            raise
        raise UserError(f"cannot read: {e}", path) from None


def expand_inputs(paths, suffixes=(".txt", ".gz", ".xz", ".jsonl")) -> list[Path]:
    """Files named directly, plus files with a known suffix found under named folders (sorted)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file() and q.name.endswith(suffixes))
            if not found:
                raise UserError(f"folder holds no {'/'.join(suffixes)} files", p)
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise UserError("no such file or folder", p)
    return files


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `dest`; on success it replaces `dest` in one rename."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual permissions
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_json(path: str | os.PathLike, what: str = "a JSON object"):
    """The content of a JSON file that should hold `what`: a UserError naming the file when it
    is missing, not UTF-8 JSON, or not a JSON object."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no such file (expected {what})", path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"not valid JSON ({e})", path) from None
    if not isinstance(value, dict):
        raise UserError(f"expected {what}, found a JSON {type(value).__name__}", path)
    return value


def json_object(line: str, path: str | os.PathLike, number: int) -> dict:
    """One JSONL line as a dict, or a UserError naming the file and line."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"not valid JSON ({e.msg})", path, number) from None
    if not isinstance(value, dict):
        raise UserError(f"expected a JSON object per line, found a {type(value).__name__}", path, number)
    return value


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line of a JSONL file (plain, .gz or .xz)."""
    for number, line in enumerate(read_lines(path), start=1):
        if line.strip():
            yield number, json_object(line, path, number)


def write_text(dest: str | os.PathLike, text: str) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(dest: str | os.PathLike, obj) -> None:
    write_text(dest, json.dumps(obj, indent=2, sort_keys=False) + "\n")


@contextlib.contextmanager
def atomic_dir(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside `dest`; on success it becomes `dest`.

    An existing `dest` is moved aside first and deleted only after the new folder is in place,
    so at every instant either the old or the new complete folder exists.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
    try:
        yield tmp
        old = None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(dest, old)
        os.replace(tmp, dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
