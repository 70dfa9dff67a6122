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

A write the machine refuses (a full disk or quota, a file over the size limit, a read-only or
failing disk, an output folder deleted under a running command) becomes a `WriteError`: an
`OSError` naming the path, which a long command completes with what it kept, so the CLI says it
in one line with the command that continues. Temporary names carry the writer's process id
(`.NAME.PID.XXXXXXXX.tmp`), so the next run on an output path can tell what a dead process left
(`remove_leftovers`) from what a live one is writing.
"""

from __future__ import annotations

import contextlib
import errno
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
    """Yield a temporary path beside `dest`; on success it replaces `dest` in one rename. A refused
    write (a full disk, ...) is a `WriteError` naming `dest`; `dest` is then as it was."""
    dest = Path(dest)
    with writing(dest):
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(dest), suffix=".tmp", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual permissions
    try:
        with writing(dest):
            yield tmp
            if not tmp.exists():
                raise WriteError(errno.ENOENT, "its folder was deleted while it was written", dest)
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
    so at every instant either the old or the new complete folder exists. A refused write is a
    `WriteError` naming its place under `dest` (not the temporary name).
    """
    dest = Path(dest)
    with writing(dest):
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(dest), suffix=".tmp", dir=dest.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
    try:
        with writing(dest, tmp):
            yield tmp
        publish_dir(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def publish_dir(folder: Path, dest: Path) -> None:
    """Rename the complete `folder` to `dest`, replacing a previous `dest` only once the new one is
    in place (moved aside to .NAME.old, then deleted)."""
    if not folder.is_dir():
        raise WriteError(errno.ENOENT, "the folder being written was deleted before it was complete", dest)
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(dest, old)
    os.replace(folder, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ---- writes the machine refuses, and what a stopped run left behind ----
# A full disk or quota, a file over RLIMIT_FSIZE, an I/O error, a read-only file system.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})
_OS_CODE = re.compile(r"os error (\d+)")  # safetensors' (Rust) errors: "... (os error 28)"


class WriteError(OSError):
    """A write the machine refused (`DISK_ERRNOS`), or one into a folder deleted under the run:
    `filename` the path, `strerror` the reason, `kept` what the command keeps (its own words, set
    where that is known), for the one line the CLI prints with the command that continues."""

    def __init__(self, code: int, reason: str, path: str | os.PathLike, kept: str | None = None):
        super().__init__(code, reason, str(path))
        self.kept = kept


def write_error(e: BaseException, path: str | os.PathLike) -> WriteError | None:
    """`e` as a WriteError (naming its own file, else `path`) when it is a refused write; else None."""
    if isinstance(e, WriteError):
        return e
    if isinstance(e, OSError):
        code = e.errno
    else:  # safetensors raises its own type, whose message carries the OS's code
        found = _OS_CODE.search(str(e))
        code = int(found.group(1)) if found else None
    if code not in DISK_ERRNOS:
        return None
    return WriteError(code, os.strerror(code).lower(), getattr(e, "filename", None) or path)


@contextlib.contextmanager
def writing(path: str | os.PathLike, temporary: Path | None = None) -> Iterator[None]:
    """A refused write inside becomes a `WriteError` naming `path`, or its own file; a file under
    `temporary` (the folder being built for `path`) is named by its place under `path`."""
    try:
        yield
    except Exception as e:
        error = write_error(e, path)
        if error is None:
            raise
        if temporary is not None and Path(error.filename).is_relative_to(temporary):
            error.filename = str(Path(path) / Path(error.filename).relative_to(temporary))
        if error is e:
            raise
        raise error from None


def partial_dir(out: str | os.PathLike) -> Path:
    """Where a resumable command keeps its unfinished output: `.NAME.partial` beside NAME, renamed to
    NAME when complete (never one of `remove_leftovers`' names: it is kept for --resume)."""
    out = Path(out)
    return out.with_name(f".{out.name}.partial")


def _temp_prefix(dest: Path) -> str:
    """`.NAME.PID.`: what `remove_leftovers` recognises, and whose writer it can ask after."""
    return f".{dest.name}.{os.getpid()}."


def alive(pid: int) -> bool:
    """Whether process `pid` is running (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_leftovers(dest: str | os.PathLike) -> list[str]:
    """Clear what a stopped bertkit process left beside `dest` while writing it, and say what: its
    hidden temporary files and folders (`.NAME.PID.XXXXXXXX.tmp`, or without the PID as older
    versions named them; never a live process's), and a previous result a crash left moved aside
    mid-swap (`.NAME.old`: put back when NAME is missing, else deleted). Nothing else is touched."""
    dest = Path(dest)
    if not dest.parent.is_dir():
        return []
    ours = re.compile(rf"\.{re.escape(dest.name)}\.(?:(?P<pid>\d+)\.)?(?P<random>[a-z0-9_]{{8}}\.)?tmp")
    done = []
    for entry in sorted(dest.parent.iterdir()):
        found = ours.fullmatch(entry.name)
        if not found or not (found["pid"] or found["random"]):
            continue
        if found["pid"] and (int(found["pid"]) == os.getpid() or alive(int(found["pid"]))):
            continue
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        done.append(f"removed {entry.name}, which a stopped run left behind")
    old = dest.with_name(f".{dest.name}.old")
    if old.is_dir() and not dest.exists():
        os.replace(old, dest)
        done.append(f"put back {dest.name}, which a run stopped while replacing it had moved to {old.name}")
    elif old.is_dir():
        shutil.rmtree(old)
        done.append(f"removed {old.name}, the previous result a stopped run had replaced")
    return done


def size_text(n: float) -> str:
    """Bytes as a person reads them: 950 B, 3.0 MB, 1.2 GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def check_free_space(path: str | os.PathLike, needed: int, what: str, flag: str = "--out") -> None:
    """Refuse, before any work, an output whose file system has less than `needed` bytes free; the
    UserError names the path and gives both numbers (`what`: how `needed` was counted)."""
    path = Path(path)
    probe = path if path.exists() else path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise UserError(f"needs about {size_text(needed)} free for {what}, and {probe} has {size_text(free)} free: "
                        f"free some space or choose another {flag}", path)
