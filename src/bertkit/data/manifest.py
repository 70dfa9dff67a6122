"""manifest.json of a prepared data folder: written by `prepare_corpus`, read by training.

It records how the data was made (format, sequence length, seed, the tokenizer's fingerprint
and special ids) and what it holds (documents, sentences, tokens, instance shards per split),
so a run can refuse data prepared with another tokenizer and rebuild nothing from flags.
"""

from __future__ import annotations

import time
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import read_json, write_json

MANIFEST_VERSION = 1
REQUIRED_KEYS = ("format", "max_seq_len", "tokenizer_fingerprint", "vocab_size", "token_dtype", "pad_id",
                 "cls_id", "sep_id", "mask_id", "special_ids", "splits")


def read_manifest(data_dir: str | Path) -> dict:
    """manifest.json of a prepared data folder, checked for the keys training relies on."""
    path = Path(data_dir) / "manifest.json"
    if not path.exists():
        raise UserError("no manifest.json: not a folder made by `bertkit prepare`", data_dir)
    manifest = read_json(path, "a prepared data folder's manifest")
    missing = [k for k in REQUIRED_KEYS if k not in manifest]
    if missing:
        raise UserError(f"manifest lacks {', '.join(missing)}", path)
    if manifest.get("version", MANIFEST_VERSION) > MANIFEST_VERSION:
        raise UserError(f"manifest version {manifest['version']} is newer than this bertkit reads", path)
    if manifest["format"] not in ("nsp", "packed", "sop"):
        raise UserError(f"unknown format {manifest['format']!r} (expected nsp, packed or sop)", path)
    return manifest


def check_tokenizer(data_dir: str | Path, tokenizer) -> None:
    """UserError unless `tokenizer` is the one the data in `data_dir` was prepared with."""
    manifest = read_manifest(data_dir)
    if manifest["tokenizer_fingerprint"] != tokenizer.fingerprint:
        raise UserError(
            f"data was prepared with tokenizer {manifest['tokenizer_fingerprint']} but the model's tokenizer is "
            f"{tokenizer.fingerprint}: prepare the data again with this tokenizer, or train with "
            f"{Path(data_dir) / 'tokenizer'}", data_dir,
        )


def write_manifest(out: Path, tokenizer, options: dict, corpus: dict, splits: dict) -> dict:
    """Write out/manifest.json for data prepared with `options` (prepare_corpus's arguments)."""
    from bertkit import __version__

    manifest = {
        "version": MANIFEST_VERSION, "format": options["format"], "max_seq_len": options["max_seq_len"],
        "tokenizer_fingerprint": tokenizer.fingerprint, "vocab_size": len(tokenizer),
        "lowercase": tokenizer.lowercase, "token_dtype": corpus.pop("token_dtype"),
        "pad_id": tokenizer.pad_id, "cls_id": tokenizer.cls_id, "sep_id": tokenizer.sep_id,
        "mask_id": tokenizer.mask_id, "unk_id": tokenizer.unk_id, "special_ids": tokenizer.special_ids,
        "seed": options["seed"], "short_seq_prob": options["short_seq_prob"],
        "dupe_factor": options["dupe_factor"], "val_fraction": options["val_fraction"],
        "corpus": corpus, "splits": splits, "args": options,
        "bertkit_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(out / "manifest.json", manifest)
    return manifest
