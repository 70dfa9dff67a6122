"""A corpus as files of passages, and its division into shards.

Inputs are files, folders (every `.txt`, `.gz`, `.xz`, `.jsonl` and `.parquet` file under them,
sorted) or glob patterns, in the order given. A text file holds one passage per line (blank lines
skipped, so ids still name lines); a JSONL file one object per line with its text in `text` (and
a `title` put before it, as BEIR's corpus.jsonl), its id in `_id` or `id`; a Parquet file a `text`
column (with `title`, `_id` or `id` read the same way). A passage without an id of its own is
named by its line (or row) number, prefixed by its file's path under the corpus's common folder
when the corpus has several files, so ids stay unique. Ids given are kept as they are.

The plan counts every file's passages once (checking every JSONL row and Parquet text on the
way, so a bad row stops the command before any work) and cuts each file into shards of
`shard_size` passages; a shard never spans two files. A file's fingerprint (size, modification
time) says whether a rerun may keep the shards made from it.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from bertkit.errors import UserError

CORPUS_SUFFIXES = (".txt", ".gz", ".xz", ".jsonl", ".parquet")
_GLOB = set("*?[")
PARQUET_BATCH = 4096  # rows read from a Parquet file at a time


def kind_of(path: Path) -> str:
    """"parquet", "jsonl" or "text", by the file's name."""
    name = path.name
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".jsonl", ".jsonl.gz", ".jsonl.xz")):
        return "jsonl"
    return "text"


def expand_corpus(paths: list[str]) -> list[Path]:
    """The corpus files `paths` name (files, folders, glob patterns), each once, in the order given."""
    from bertkit.io import expand_inputs

    files: list[Path] = []
    for text in paths:
        if not Path(text).exists() and _GLOB & set(text):
            found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
            if not found:
                raise UserError("matches no file", text)
            files += found
        else:
            files += expand_inputs([text], CORPUS_SUFFIXES)
    unique = list(dict.fromkeys(p.resolve() for p in files))
    return unique


@dataclass(frozen=True)
class Source:
    """One corpus file: where it is, its name in ids, how it reads, its fingerprint and size."""

    path: str  # absolute
    name: str  # relative to the corpus's common folder
    kind: str  # "text", "jsonl" or "parquet"
    bytes: int
    mtime_ns: int
    records: int  # passages in it

    def fingerprint(self) -> tuple:
        return self.path, self.bytes, self.mtime_ns

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ShardSpec:
    """Shard `index`: passages `first` .. `first + count - 1` (0-based, in reading order) of source `source`."""

    index: int
    source: int
    first: int
    count: int

    def as_dict(self) -> dict:
        return {"shard": self.index, "source": self.source, "first": self.first, "count": self.count}

    @classmethod
    def from_dict(cls, d: dict) -> ShardSpec:
        return cls(d["shard"], d["source"], d["first"], d["count"])


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def current_fingerprint(source: Source) -> tuple:
    """The file's fingerprint as it is now (size and modification time), to compare with `source`'s."""
    path = Path(source.path)
    if not path.is_file():
        return source.path, None, None
    return (source.path, *_stat(path))


def make_sources(files: list[Path], progress: bool = True) -> list[Source]:
    """Every file read once: its passages counted and checked (a UserError names a bad row)."""
    from tqdm import tqdm

    root = Path(os.path.commonpath([str(f.parent) for f in files]))
    out = []
    for path in tqdm(files, unit="file", desc="reading the corpus", disable=not progress or len(files) < 2):
        size, mtime = _stat(path)
        count = sum(1 for _ in records(path, kind_of(path), ""))
        out.append(Source(str(path), str(path.relative_to(root)), kind_of(path), size, mtime, count))
    if not sum(s.records for s in out):
        raise UserError("no passages to embed" if len(out) == 1 else f"no passages in any of its {len(out)} files",
                        out[0].path if len(out) == 1 else None)
    return out


def plan_shards(sources: list[Source], shard_size: int) -> list[ShardSpec]:
    """Each file cut into shards of `shard_size` passages (its last one smaller), in corpus order."""
    shards: list[ShardSpec] = []
    for i, source in enumerate(sources):
        for first in range(0, source.records, shard_size):
            shards.append(ShardSpec(len(shards), i, first, min(shard_size, source.records - first)))
    return shards


def records(path: Path, kind: str, prefix: str) -> Iterator[tuple[str, str]]:
    """(id, text) of every passage of one file, in order; `prefix` goes before line-number ids."""
    if kind == "parquet":
        yield from _parquet_records(path, prefix)
        return
    from bertkit.io import read_lines
    from bertkit.search.passages import json_passage

    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        if kind == "jsonl":
            yield json_passage(line, path, number)
        else:
            yield f"{prefix}{number}", line.strip()


def _parquet_records(path: Path, prefix: str) -> Iterator[tuple[str, str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError("reading Parquet needs pyarrow: pip install 'bertkit[parquet]'", path) from None
    try:
        table = pq.ParquetFile(path)
    except Exception as e:  # pyarrow's own errors: not a Parquet file, a truncated one
        raise UserError(f"not a readable Parquet file ({e})", path) from None
    names = set(table.schema_arrow.names)
    if "text" not in names:
        raise UserError(f"expected a \"text\" column; the file has {', '.join(sorted(names)) or 'none'}", path)
    key = "_id" if "_id" in names else "id" if "id" in names else None
    columns = ["text"] + (["title"] if "title" in names else []) + ([key] if key else [])
    row = 0
    for batch in table.iter_batches(batch_size=PARQUET_BATCH, columns=columns):
        data = batch.to_pydict()
        for i, text in enumerate(data["text"]):
            row += 1
            title = data["title"][i] if "title" in data else None
            if isinstance(text, str) and isinstance(title, str) and title:
                text = f"{title} {text}"
            if not isinstance(text, str) or not text.strip():
                raise UserError(f"row {row}: passage has no text", path)
            yield (str(data[key][i]) if key else f"{prefix}{row}"), text.strip()


def shard_passages(source: Source, specs: list[ShardSpec], several: bool) -> Iterator[tuple[ShardSpec, list, list]]:
    """(spec, ids, texts) of each of `specs` (shards of `source`, in order), reading the file once."""
    wanted = {s.first: s for s in specs}
    end = max(s.first + s.count for s in specs)
    prefix = f"{source.name}:" if several else ""
    spec, ids, texts = None, [], []
    for position, (pid, text) in enumerate(records(Path(source.path), source.kind, prefix)):
        if spec is None and position in wanted:
            spec = wanted[position]
        if spec is None:
            continue
        ids.append(pid)
        texts.append(text)
        if len(ids) == spec.count:
            yield spec, ids, texts
            spec, ids, texts = None, [], []
            if position + 1 == end:
                return
    if spec is not None:
        raise UserError(f"has fewer passages than when the corpus was planned ({position + 1})", source.path)
