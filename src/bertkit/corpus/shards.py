"""A folder of embedding shards: what each file holds, how it is checked, and how it is read back.

    OUT/manifest.json          the settings the vectors were made with, the corpus files (path, size,
                               modification time, passages) and the shards: what each covers (file,
                               first passage, count) and, once the run is complete, its files' SHA-256
    OUT/shard-000000.npy       the (n, dim) float32 array, in corpus order (the default: numpy alone)
         + shard-000000.ids.json    and the JSON list of its ids
    OUT/shard-000000.parquet   or (--format parquet, pyarrow) `id` (string) and `vector` (fixed-size
                               list of float32)
    OUT/shard-000000.json      the shard's record: what it covers, rows, width, each file's SHA-256

Every file is written under a temporary name and renamed; a shard's record is written after its
files, so a record means they were whole. A shard is kept by a rerun only when its record covers
what the plan says and every file still has the checksum the record gives: a shard cut short, a
bit flipped on disk or a file from another run is redone, never kept.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from bertkit.corpus.sources import ShardSpec
from bertkit.errors import UserError
from bertkit.io import atomic_path, read_json, write_json

FORMAT = "bertkit-embeddings"
MANIFEST = "manifest.json"
FORMATS = ("npy", "parquet")
DEFAULT_FORMAT = "npy"  # the base install writes and reads it; Parquet needs pyarrow
_HASH_BLOCK = 1 << 20


def stem(index: int) -> str:
    return f"shard-{index:06d}"


def shard_files(index: int, fmt: str) -> list[str]:
    """The data files of shard `index` (its record, `stem.json`, not included)."""
    if fmt == "parquet":
        return [f"{stem(index)}.parquet"]
    return [f"{stem(index)}.npy", f"{stem(index)}.ids.json"]


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _write_parquet(path: Path, ids: list[str], vectors: np.ndarray) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1), type=pa.float32())
    table = pa.table({"id": pa.array(ids, type=pa.string()),
                      "vector": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])})
    pq.write_table(table, path, compression={"id": "zstd", "vector": "none"})  # float noise does not compress


def write_shard(folder: Path, spec: ShardSpec, ids: list[str], vectors: np.ndarray, fmt: str) -> dict:
    """Write shard `spec` (its files, then its record) atomically; returns the record."""
    if len(ids) != spec.count or len(vectors) != spec.count:
        raise ValueError(f"shard {spec.index} covers {spec.count} passages, got {len(ids)} ids, {len(vectors)} vectors")
    digests = {}
    for name in shard_files(spec.index, fmt):
        with atomic_path(folder / name) as tmp:
            if name.endswith(".parquet"):
                _write_parquet(tmp, ids, vectors)
            elif name.endswith(".npy"):
                with open(tmp, "wb") as f:
                    np.save(f, np.ascontiguousarray(vectors, dtype=np.float32))
            else:
                tmp.write_text(json.dumps(ids, ensure_ascii=False), encoding="utf-8")
            digests[name] = sha256(tmp)
    record = {**spec.as_dict(), "rows": len(ids), "dim": int(vectors.shape[1]), "sha256": digests}
    write_json(folder / f"{stem(spec.index)}.json", record)
    return record


def check_shard(folder: Path, spec: ShardSpec, fmt: str) -> tuple[dict | None, str]:
    """(its record, "ok") for an intact shard, else (None, why it must be redone: "missing",
    "unfinished", "checksum")."""
    path = folder / f"{stem(spec.index)}.json"
    names = shard_files(spec.index, fmt)
    if not path.is_file():
        return None, "unfinished" if any((folder / n).exists() for n in names) else "missing"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, "checksum"
    covers = isinstance(record, dict) and {k: record.get(k) for k in spec.as_dict()} == spec.as_dict()
    if not covers or set(record.get("sha256") or ()) != set(names):
        return None, "checksum"
    if not all((folder / name).is_file() for name in names):
        return None, "missing"
    if any(sha256(folder / name) != record["sha256"][name] for name in names):
        return None, "checksum"
    return record, "ok"


def read_shard(folder: Path, record: dict, fmt: str) -> tuple[list[str], np.ndarray]:
    """(ids, (n, dim) float32 vectors) of one shard whose files `check_shard` found intact."""
    names = shard_files(record["shard"], fmt)
    if fmt == "parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError("reading Parquet shards needs pyarrow: pip install 'bertkit[parquet]'", folder) from None
        table = pq.read_table(folder / names[0])
        vectors = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        return table.column("id").to_pylist(), vectors.reshape(table.num_rows, -1).astype(np.float32, copy=False)
    vectors = np.load(folder / names[0], allow_pickle=False)
    return json.loads((folder / names[1]).read_text(encoding="utf-8")), vectors


def read_manifest(folder: str | os.PathLike) -> dict:
    """A shard folder's manifest.json, checked: a UserError naming the folder when it holds none."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise UserError(f"not a folder of embedding shards (no {MANIFEST}); make one with `bertkit embed --shards`",
                        folder)
    manifest = read_json(folder / MANIFEST, "an embedding manifest")
    if manifest.get("format") != FORMAT:
        raise UserError(f"not a bertkit embedding manifest (format {manifest.get('format')!r})", folder / MANIFEST)
    return manifest


def write_manifest(folder: Path, manifest: dict) -> None:
    write_json(folder / MANIFEST, manifest)


def specs_of(manifest: dict) -> list[ShardSpec]:
    return [ShardSpec.from_dict(s) for s in manifest["shards"]]


def our_files(folder: Path) -> list[Path]:
    """Every file of `folder` a run wrote: the manifest, and the shards' files and records by their names."""
    import re

    ours = re.compile(r"shard-\d{6,}\.(parquet|npy|ids\.json|json)|" + re.escape(MANIFEST))
    return sorted(p for p in folder.iterdir() if p.is_file() and ours.fullmatch(p.name))
