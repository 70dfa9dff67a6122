"""The bi-encoder of a search index: a model directory with the pooling its own files ask for.

The pooling and longest input come from the directory's sentence-transformers files
(`bertkit.st.model_pooling`: mean and 256 tokens for a plain BERT directory). Search always
normalises the vectors, so the inner product is the cosine whatever the model says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from bertkit.st import model_pooling


@dataclass
class Encoder:
    """A loaded encoder with its tokenizer and pooling; `encode` gives unit-length float32 rows."""

    model_dir: str
    model: object
    tokenizer: object
    pooling: str
    max_length: int
    batch_size: int = 32
    device: str = "cpu"
    precision: str = "fp32"  # "bf16": the forward pass under bf16 autocast

    @classmethod
    def load(cls, model_dir: str | os.PathLike, pooling: str | None = None, max_length: int | None = None,
             batch_size: int = 32, device: str = "cpu", backend: str = "torch", int8: bool = False,
             precision: str = "fp32") -> Encoder:
        """`backend` "onnx": a `bertkit export` folder in ONNX Runtime; `int8`: its int8 graph, or
        for torch the weights quantized (`bertkit.quantize`)."""
        from bertkit.export.backend import load_encoder_for

        own_pooling, own_length = model_pooling(model_dir)
        model, tokenizer = load_encoder_for(model_dir, backend, int8)
        return cls(str(model_dir), model, tokenizer, pooling or own_pooling, max_length or own_length, batch_size,
                   device, precision)

    def encode(self, texts: list[str], progress: bool = False, report: dict | None = None) -> np.ndarray:
        from bertkit.embed import embed_texts

        return embed_texts(self.model, self.tokenizer, texts, pooling=self.pooling, normalize=True,
                           batch_size=self.batch_size, max_length=self.max_length, device=self.device,
                           progress=progress, report=report, precision=self.precision)
