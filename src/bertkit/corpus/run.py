"""`bertkit embed --shards --out DIR` as one call: a corpus embedded shard by shard, resumable, in-process or on Ray.

`embed_corpus` plans the corpus (`sources`), writes the manifest, keeps every shard an earlier run
finished intact (`shards.check_shard`), hands the rest to an engine, and writes each shard as its
vectors arrive; the manifest is completed with every shard's checksum once all are written. The
engines differ only in where the vectors are computed: "local" runs an `Embedder` in this process,
"ray" a pool of them as Ray actors (`ray_engine`). Both read the corpus in one pass per file and
give each shard's texts to the same `Embedder.embed`, so their shards hold the same vectors.

A rerun with the same settings on an unchanged corpus reuses the manifest's plan (no counting
pass) and redoes only the shards that are missing, unfinished or fail their checksum. A rerun
with other settings, or on a changed corpus, is refused unless `overwrite`, which deletes the
earlier run's files (and only those) first.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bertkit.corpus.embedder import EmbedSettings
from bertkit.corpus.shards import (
    DEFAULT_FORMAT,
    FORMAT,
    MANIFEST,
    check_shard,
    our_files,
    read_manifest,
    specs_of,
    write_manifest,
    write_shard,
)
from bertkit.corpus.sources import (
    ShardSpec,
    Source,
    current_fingerprint,
    expand_corpus,
    make_sources,
    plan_shards,
    shard_passages,
)
from bertkit.errors import UserError

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class Engine:
    """How the work is spread; none of it changes a vector."""

    name: str = "local"  # local or ray
    batch_size: int = 32  # texts per forward pass
    device: str = "cpu"  # local only
    threads: int = 1  # torch threads per worker (ray: each actor's CPUs)
    workers: int | None = None  # ray: model actors (None: the cluster's CPUs / threads)
    address: str | None = None  # ray: the cluster to join (None: a local Ray started for this run)


def _say(line: str) -> None:
    print(f"bertkit embed: {line}", file=sys.stderr, flush=True)


def _identity(settings: EmbedSettings, shard_size: int, fmt: str) -> dict:
    return {"settings": settings.as_dict(), "shard_size": shard_size, "shard_format": fmt}


def _earlier_run(out: Path, identity: dict, files: list[Path]) -> dict | None:
    """The manifest of an earlier run in `out` to continue, None when there is none; a UserError
    when there is one that may not be continued."""
    if not (out / MANIFEST).is_file():
        return None
    manifest = read_manifest(out)
    why = _why_not_continue(manifest, identity, files)
    if why is not None:
        raise UserError(f"holds shards {why}; pass --overwrite to embed again, or choose another --out", out)
    return manifest


def _why_not_continue(manifest: dict, identity: dict, files: list[Path]) -> str | None:
    """What keeps an earlier run's shards from being continued, None when nothing does."""
    if (manifest.get("shard_size"), manifest.get("shard_format")) != (identity["shard_size"], identity["shard_format"]):
        return (f"of {manifest.get('shard_size')} passages in {manifest.get('shard_format')} (not "
                f"{identity['shard_size']} in {identity['shard_format']})")
    try:
        earlier = EmbedSettings.from_dict(manifest["settings"])
        sources = [Source(**s) for s in manifest["sources"]]
        specs_of(manifest)
    except (KeyError, TypeError, ValueError):
        return "described by a manifest this version of bertkit does not read"
    differ = EmbedSettings.from_dict(identity["settings"]).differences(earlier)
    if differ:
        return f"made with other settings ({', '.join(differ)})"
    if [s.path for s in sources] != [str(f) for f in files]:
        return "of other corpus files"
    changed = [s.path for s in sources if current_fingerprint(s) != s.fingerprint()]
    if changed:
        return f"of a corpus that has changed since ({changed[0]})"
    return None


def _plan(out: Path, identity: dict, files: list[Path], shard_size: int, progress: bool) -> dict:
    """A new run's manifest, written once the corpus is counted; an earlier run's files are deleted
    then (--overwrite), so a mistake found while counting leaves them as they were."""
    sources = make_sources(files, progress)
    shards = plan_shards(sources, shard_size)
    manifest = {"format": FORMAT, "version": 1, **identity, "complete": False,
                "count": sum(s.records for s in sources), "sources": [s.as_dict() for s in sources],
                "shards": [s.as_dict() for s in shards]}
    out.mkdir(parents=True, exist_ok=True)
    for path in our_files(out):
        path.unlink()
    write_manifest(out, manifest)
    return manifest


def _clear_leftovers(out: Path) -> None:
    """The temporary files a stopped run left in `out` (`io.remove_leftovers`, per shard file named)."""
    import re

    from bertkit.io import remove_leftovers

    pattern = re.compile(r"\.(shard-\d+\.[a-z.]+?|manifest\.json)\.\d+\.\w{8}\.tmp")
    names = {m.group(1) for p in out.iterdir() if (m := pattern.fullmatch(p.name))}
    for name in sorted(names):
        remove_leftovers(out / name)


def _todo(out: Path, manifest: dict) -> tuple[dict[int, dict], list[ShardSpec], int]:
    """(records of the intact shards, the shards to embed, how many of those failed their checksum)."""
    kept, todo, corrupt = {}, [], 0
    for spec in specs_of(manifest):
        record, state = check_shard(out, spec, manifest["shard_format"])
        if record is not None:
            kept[spec.index] = record
        else:
            todo.append(spec)
            corrupt += state == "checksum"
    return kept, todo, corrupt


def embed_corpus(inputs: list[str], out: str | Path, settings: EmbedSettings, shard_size: int = 10_000,
                 fmt: str = DEFAULT_FORMAT, engine: Engine = Engine(), overwrite: bool = False,
                 progress: bool = True) -> dict:
    """Embed every passage of the files `inputs` name into shards in `out`, keeping the intact shards of an
    earlier run with the same settings (`overwrite`: embedding them again); returns the complete manifest."""
    out, start = Path(out), time.perf_counter()
    files = [f for f in expand_corpus(inputs) if not f.is_relative_to(out.resolve())]  # never its own shards
    if not files:
        raise UserError("the corpus holds no file outside --out", inputs[0])
    identity = _identity(settings, shard_size, fmt)
    manifest = None if overwrite else _earlier_run(out, identity, files)
    manifest = manifest or _plan(out, identity, files, shard_size, progress)
    _clear_leftovers(out)
    kept, todo, corrupt = _todo(out, manifest)
    passages = sum(r["rows"] for r in kept.values())
    if kept and not todo:
        _say(f"all {len(kept):,} shards ({passages:,} passages) are complete and intact (SHA-256 checked): "
             "nothing to embed")
    elif kept:
        redo = f" ({corrupt} failed {'its' if corrupt == 1 else 'their'} checksum)" if corrupt else ""
        _say(f"kept {len(kept):,} of {len(manifest['shards']):,} shards ({passages:,} passages) from an earlier run; "
             f"embedding {len(todo):,}{redo}")
    records, reports = dict(kept), []
    if todo:
        _run_engine(manifest, todo, settings, engine, out, records, reports, progress)
    return _complete(out, manifest, records, reports, time.perf_counter() - start, engine)


def _run_engine(manifest: dict, todo: list[ShardSpec], settings: EmbedSettings, engine: Engine, out: Path,
                records: dict, reports: list, progress: bool) -> None:
    from tqdm import tqdm

    sources = [Source(**s) for s in manifest["sources"]]
    total = sum(s.count for s in todo)
    with tqdm(total=total, unit="passage", desc="embedding", disable=not progress, smoothing=0.1,
              dynamic_ncols=True) as bar:
        def done(spec: ShardSpec, ids: list, vectors, report: dict, counted: bool = False) -> None:
            records[spec.index] = write_shard(out, spec, ids, vectors, manifest["shard_format"])
            reports.append(report)
            if not counted:
                bar.update(spec.count)

        if engine.name == "ray":
            from bertkit.corpus.ray_engine import run_ray

            run_ray(sources, todo, settings, engine, done)
        else:
            _run_local(sources, todo, settings, engine, done, bar.update)


def _run_local(sources: list[Source], todo: list[ShardSpec], settings: EmbedSettings, engine: Engine, done,
               tick) -> None:
    from bertkit.corpus.embedder import Embedder

    embedder = Embedder(settings, engine.batch_size, engine.device)
    for i, source in enumerate(sources):
        specs = [s for s in todo if s.source == i]
        if specs:
            for spec, ids, texts in shard_passages(source, specs, len(sources) > 1):
                vectors, report = embedder.embed(texts, tick)
                done(spec, ids, vectors, report, counted=True)


def _complete(out: Path, manifest: dict, records: dict, reports: list, seconds: float, engine: Engine) -> dict:
    """The manifest with every shard's rows, width and checksums, marked complete."""
    from bertkit.long_inputs import LongReport, merge_reports

    shards = [{**s, "files": sorted(records[s["shard"]]["sha256"]), "sha256": records[s["shard"]]["sha256"]}
              for s in manifest["shards"]]
    this_run = [LongReport.from_dict(r) for r in reports]
    policy = manifest["settings"]["long_inputs"]
    long = merge_reports(this_run, policy, this_run[0].limit).as_dict() if reports else None
    manifest = {**manifest, "complete": True, "dim": next(iter(records.values()))["dim"], "shards": shards,
                "last_run": {"engine": engine.name, "shards": len(reports), "seconds": round(seconds, 3),
                             "passages": sum(r["inputs"] for r in reports), "long_inputs_report": long}}
    write_manifest(out, manifest)
    return manifest
