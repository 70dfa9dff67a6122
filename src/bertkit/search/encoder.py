"""The bi-encoder of a search index: a model directory with the pooling its own files ask for.

The pooling and longest input come from the directory's sentence-transformers files
(`bertkit.st.model_pooling`: mean and 256 tokens for a plain BERT directory). Search always
normalises the vectors, so the inner product is the cosine whatever the model says. A text longer
than the limit meets the encoder's long-input `policy` (`bertkit.long_inputs`): cut, or read in
windows whose vectors are pooled into one (`encode`) or kept one per chunk (`encode_chunks`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from bertkit.long_inputs import Policy
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
    policy: Policy = field(default_factory=Policy)  # a text longer than max_length: cut, or read in windows
    dimensions: int | None = None  # Matryoshka: each vector's first d components, renormalised (None: all)
    prompt: str = ""  # put before every text (sentence-transformers' prompts: `bertkit.prompts`)

    @classmethod
    def load(cls, model_dir: str | os.PathLike, pooling: str | None = None, max_length: int | None = None,
             batch_size: int = 32, device: str = "cpu", backend: str = "torch", int8: bool = False,
             precision: str = "fp32", policy: Policy | None = None, dimensions: int | None = None,
             prompt: str = "") -> Encoder:
        """`backend` "onnx": a `bertkit export` folder in ONNX Runtime; `int8`: its int8 graph, or
        for torch the weights quantized (`bertkit.quantize`). `dimensions` more than the model's
        width is a UserError."""
        from bertkit.export.backend import load_encoder_for
        from bertkit.matryoshka import check_dimensions

        own_pooling, own_length = model_pooling(model_dir)
        model, tokenizer = load_encoder_for(model_dir, backend, int8)
        check_dimensions(dimensions, model.config.hidden_size)
        return cls(str(model_dir), model, tokenizer, pooling or own_pooling, max_length or own_length, batch_size,
                   device, precision, policy or Policy(), dimensions, prompt)

    @property
    def width(self) -> int:
        """The length of the vectors `encode` gives."""
        return self.dimensions or self.model.config.hidden_size

    def encode(self, texts: list[str], progress: bool = False, report: dict | None = None,
               chunks: bool = False):
        """(N, C) unit vectors, one per text (a long text's chunks pooled); with `chunks`,
        ((R, C) one per chunk, (R,) the text of each). C is `width`; the prompt goes first."""
        from bertkit.embed import embed_texts
        from bertkit.prompts import with_prompt

        return embed_texts(self.model, self.tokenizer, with_prompt(self.prompt, texts), pooling=self.pooling,
                           normalize=True, dimensions=self.dimensions,
                           batch_size=self.batch_size, max_length=self.max_length, device=self.device,
                           progress=progress, report=report, precision=self.precision, policy=self.policy,
                           chunks=chunks)

    def count_chunks(self, texts: list[str]) -> np.ndarray:
        """(N,) the rows `encode(texts, chunks=True)` will give each text (its windows)."""
        from bertkit.embed import text_plan
        from bertkit.prompts import with_prompt

        limit = min(self.max_length, self.model.config.max_tokens)
        return np.bincount(text_plan(self.tokenizer, with_prompt(self.prompt, texts), limit, self.policy).owner,
                           minlength=len(texts))
