"""What a shard's vectors are made with, and the one object that makes them in either engine.

`EmbedSettings` holds every setting that decides a vector's values, with the model's fingerprint
(its config and weight files): a rerun keeps earlier shards only while all of them are equal.
How the work is spread (engine, workers, threads, batch size) is not part of it: Ray and the
in-process engine give the same vectors. `Embedder` loads the model once (in the process, or in
each Ray actor) and embeds a shard's texts through `embed.embed_texts`, a fixed number of texts
at a time, so both engines batch a shard the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

PIECE = 1024  # texts embedded per call: the progress bar moves this often, and batches are drawn from these
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx")


def model_fingerprint(folder: str) -> dict:
    """The model folder's config.json checksum and each weight file's size and modification time."""
    path = Path(folder)
    config = path / "config.json"
    weights = {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(path.iterdir())
               if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)}
    digest = hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None
    return {"config_sha256": digest, "weights": weights}


@dataclass(frozen=True)
class EmbedSettings:
    """Everything that decides the vectors' values (see `bertkit embed --help` for each)."""

    model: str  # the model folder, absolute
    pooling: str  # cls, mean or max
    normalize: bool  # unit-length vectors
    max_length: int  # tokens per text (or window), special tokens included
    precision: str = "fp32"  # resolved: fp32 or bf16 (autocast)
    layers: tuple[int, ...] = (-1,)  # hidden layers pooled (0 the embeddings, -1 the last)
    combine: str = "concat"  # how several layers join
    long_inputs: str = "truncate"  # a text over max_length: cut, or read in windows
    window_stride: int | None = None  # windows: tokens between window starts (None: half a window)
    backend: str = "torch"  # torch, or onnx (a `bertkit export` folder)
    int8: bool = False  # int8 weights (torch) or the export's int8 graph (onnx)
    fingerprint: dict = field(default_factory=dict)  # `model_fingerprint(model)`

    def as_dict(self) -> dict:
        out = asdict(self)
        out["layers"] = list(self.layers)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> EmbedSettings:
        return cls(**{**d, "layers": tuple(d["layers"])})

    def differences(self, other: EmbedSettings) -> list[str]:
        """The names of the settings that differ from `other`'s ("model weights" for the fingerprint)."""
        mine, theirs = self.as_dict(), other.as_dict()
        names = [k for k in mine if mine[k] != theirs.get(k) and k != "fingerprint"]
        return names + (["model weights"] if self.fingerprint != other.fingerprint else [])


class Embedder:
    """A loaded model that turns a shard's texts into its (n, width) float32 vectors."""

    def __init__(self, settings: EmbedSettings, batch_size: int = 32, device: str = "cpu"):
        from bertkit.export.backend import load_encoder_for

        self.settings, self.batch_size, self.device = settings, batch_size, device
        self.model, self.tokenizer = load_encoder_for(settings.model, settings.backend, settings.int8)

    def embed(self, texts: list[str], tick=None) -> tuple[np.ndarray, dict]:
        """(vectors, the long-input report) of `texts`; `tick(n)` after every `PIECE` texts."""
        from bertkit.embed import embed_texts
        from bertkit.long_inputs import LongReport, Policy, merge_reports

        s = self.settings
        pieces, reports = [], []
        for start in range(0, len(texts), PIECE):
            report: dict = {}
            pieces.append(embed_texts(self.model, self.tokenizer, texts[start:start + PIECE], pooling=s.pooling,
                                      layers=s.layers, combine=s.combine, normalize=s.normalize,
                                      batch_size=self.batch_size, max_length=s.max_length, device=self.device,
                                      progress=False, report=report, precision=s.precision,
                                      policy=Policy(s.long_inputs, s.window_stride)))
            reports.append(LongReport.from_dict(report))
            if tick is not None:
                tick(len(pieces[-1]))
        total = merge_reports(reports, s.long_inputs, reports[0].limit)
        return np.concatenate(pieces).astype(np.float32, copy=False), total.as_dict()
