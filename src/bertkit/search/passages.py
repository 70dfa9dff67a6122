"""The documents of a search index: read from JSONL or text, kept in a file that can be seeked.

Input: a JSONL file with one object per line, its id in `_id` (BEIR's corpus.jsonl) or `id`, its
text in `text` and an optional `title` (BEIR's layout; the title is put before the text, as
sentence-transformers' BEIR examples do); or a text file (.txt/.gz/.xz) with one passage per
line, its id the line number (blank lines are skipped, so ids still name lines). Ids must be
unique; a line without text is refused with its file:line.

The store is `passages.jsonl` ({"id", "text"} per line, in index order) and `offsets.npy`
(N+1 byte offsets, int64), so a hit is read with one seek and a million passages never sit in
memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bertkit.errors import UserError
from bertkit.io import json_object

PASSAGES = "passages.jsonl"
OFFSETS = "offsets.npy"


def json_passage(line: str, path: Path, number: int) -> tuple[str, str] | None:
    """(id, text) of one JSONL line (None when blank); a UserError naming the file and line otherwise."""
    if not line.strip():
        return None
    row = json_object(line, path, number)
    key = "_id" if "_id" in row else "id"
    if key not in row or not isinstance(row.get("text"), str):
        raise UserError('expected an object with "_id" (or "id") and a "text" string', path, number)
    title = row.get("title") or ""
    text = f"{title} {row['text']}".strip() if isinstance(title, str) else row["text"].strip()
    if not text:
        raise UserError("passage has no text", path, number)
    return str(row[key]), text


def read_passages(path: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """Yield (id, text) for every passage of a JSONL or text file, streaming; ids must be unique."""
    from bertkit.io import read_lines

    path = Path(path)
    is_json = path.name.endswith((".jsonl", ".jsonl.gz", ".jsonl.xz"))
    seen: set[str] = set()
    for number, line in enumerate(read_lines(path), start=1):
        if is_json:
            found = json_passage(line, path, number)
        else:
            found = (str(number), line.strip()) if line.strip() else None
        if found is None:
            continue
        if found[0] in seen:
            raise UserError(f"id {found[0]!r} appears twice", path, number)
        seen.add(found[0])
        yield found


def write_store(passages: Iterator[tuple[str, str]], folder: Path) -> int:
    """Write passages.jsonl and offsets.npy into `folder`; returns how many passages there are."""
    offsets = [0]
    with open(folder / PASSAGES, "wb") as f:
        for pid, text in passages:
            f.write(json.dumps({"id": pid, "text": text}, ensure_ascii=False).encode("utf-8") + b"\n")
            offsets.append(f.tell())
    np.save(folder / OFFSETS, np.asarray(offsets, dtype=np.int64), allow_pickle=False)
    return len(offsets) - 1


class PassageStore:
    """Random access to an index's passages by position."""

    def __init__(self, folder: str | os.PathLike):
        folder = Path(folder)
        self.offsets = np.load(folder / OFFSETS, mmap_mode="r", allow_pickle=False)
        self._file = open(folder / PASSAGES, "rb")  # noqa: SIM115 - seeked by `get` until `close()`

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def get(self, position: int) -> dict:
        """{"id", "text"} of the passage at `position`."""
        start, end = int(self.offsets[position]), int(self.offsets[position + 1])
        self._file.seek(start)
        return json.loads(self._file.read(end - start))

    def batches(self, size: int) -> Iterator[tuple[list[str], list[str]]]:
        """(ids, texts) of consecutive passages, `size` at a time, in index order."""
        self._file.seek(0)
        ids, texts = [], []
        for raw in self._file:
            row = json.loads(raw)
            ids.append(row["id"])
            texts.append(row["text"])
            if len(ids) == size:
                yield ids, texts
                ids, texts = [], []
        if ids:
            yield ids, texts

    def close(self) -> None:
        self._file.close()
