"""The ONNX Runtime backend: an exported folder called the way bertkit's torch models are.

`OnnxModel.load(folder, int8=False)` opens `model.onnx` (or `model_int8.onnx`) on the CPU and is
called like the torch model it was exported from, `model(input_ids, attention_mask=...,
token_type_ids=...)` with (B, T) tensors, returning the same output classes: an `EncoderOutput`
for an embedding graph (its last hidden state, with the graph's own pooled vector alongside), a
`HeadOutput` with `logits`, or a `QAOutput` with `start_logits` / `end_logits`. So
`embed.embed_texts`, the fine-tuning tasks' `predict` and the server run it unchanged. The
torch-only parts (`.to`, `.eval`, `.train`) are no-ops; it never trains.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from bertkit.errors import UserError
from bertkit.export import META_FILE, check_backend


@dataclass
class OnnxModel:
    folder: Path
    meta: dict
    session: object
    config: object
    int8: bool = False
    training: bool = False

    @classmethod
    def load(cls, folder: str | os.PathLike, int8: bool = False, threads: int | None = None) -> OnnxModel:
        """The folder's fp32 graph, or its int8 one; `threads`: ONNX Runtime's intra-op threads
        (default: torch's thread count, which OMP_NUM_THREADS sets)."""
        from bertkit.hf import load_config
        from bertkit.io import read_json

        folder = Path(folder)
        check_backend(folder, "onnx")
        meta = read_json(folder / META_FILE, "an ONNX export's description")
        name = meta.get("files", {}).get("int8" if int8 else "fp32")
        if name is None:
            raise UserError("exported without --int8: no int8 graph (export again with --int8)", folder)
        try:
            import onnxruntime as ort
        except ImportError:
            raise UserError("the ONNX backend needs onnxruntime: pip install 'bertkit[export]'") from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(folder / name), options, providers=["CPUExecutionProvider"])
        return cls(folder, meta, session, load_config(folder), int8)

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    # torch.nn.Module's calls that the inference paths make
    def to(self, device) -> OnnxModel:
        if torch.device(device).type != "cpu":
            raise UserError("the ONNX backend runs on the CPU: add --device cpu")
        return self

    def eval(self) -> OnnxModel:
        return self

    def train(self, mode: bool = True) -> OnnxModel:
        if mode:
            raise UserError("an ONNX export is for inference only")
        return self

    def run(self, input_ids, attention_mask=None, token_type_ids=None) -> dict[str, np.ndarray]:
        """The graph's outputs by name, for (B, T) ids (tensors or arrays); masks default to all
        ones, segments to zeros."""
        ids = np.asarray(input_ids.cpu() if isinstance(input_ids, Tensor) else input_ids, dtype=np.int64)
        feed = {"input_ids": ids}
        for name, value in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if value is None:
                value = np.ones_like(ids) if name == "attention_mask" else np.zeros_like(ids)
            feed[name] = np.asarray(value.cpu() if isinstance(value, Tensor) else value, dtype=np.int64)
        names = self.meta["outputs"]
        return dict(zip(names, self.session.run(names, graph_feed(self.session, feed))))

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, output_hidden_states=False, **_):
        from bertkit.heads import HeadOutput, PreTrainingOutput, QAOutput
        from bertkit.model import EncoderOutput

        if output_hidden_states:
            raise UserError("an ONNX export gives the last layer only: use the torch backend for other layers")
        out = {k: torch.from_numpy(v) for k, v in self.run(input_ids, attention_mask, token_type_ids).items()}
        if self.kind == "embedding":
            result = EncoderOutput(out["token_embeddings"])
            result.sentence_embedding = out["sentence_embedding"]  # pooled as meta["pooling"] says
            return result
        if self.kind == "BertForQuestionAnswering":
            return QAOutput(start_logits=out["start_logits"], end_logits=out["end_logits"])
        if self.kind == "BertForPreTraining":
            return PreTrainingOutput(logits=out["logits"], seq_relationship_logits=out["seq_relationship_logits"])
        return HeadOutput(out["logits"])

    def pooled(self, pooling: str, normalize: bool) -> bool:
        """Whether the graph's `sentence_embedding` is this pooling, normalised or not as asked."""
        return (self.kind == "embedding" and self.meta.get("pooling") == pooling
                and bool(self.meta.get("normalize")) == normalize)



def load_encoder_for(folder: str | os.PathLike, backend: str = "torch", int8: bool = False):
    """(encoder, tokenizer) for `embed.embed_texts`: torch weights (int8-quantised when asked) or
    the folder's ONNX graph (its int8 one when asked)."""
    from bertkit.embed import load_encoder
    from bertkit.tokenizer import Tokenizer

    check_backend(folder, backend)
    if backend == "onnx":
        return OnnxModel.load(folder, int8), Tokenizer.from_pretrained(folder)
    from bertkit.static import is_static, load_static

    if is_static(folder):  # a table, not layers: nothing to quantize
        return load_static(folder)
    from bertkit.quantize import maybe_int8

    model, tokenizer = load_encoder(folder)
    return maybe_int8(model, int8), tokenizer


def load_onnx_head(folder: str | os.PathLike, head: type, labels: list[str] | None, int8: bool = False) -> OnnxModel:
    """A fine-tuned `head` model's ONNX graph for inference (as `Task.load_model` for torch);
    refused when the graph is another head's or was exported with other labels."""
    model = OnnxModel.load(folder, int8)
    if model.kind != head.__name__:
        raise UserError(f"the exported graph is a {model.kind}, not a {head.__name__}", folder)
    from bertkit.finetune.task import check_labels

    check_labels(model.config, labels, folder)
    return model


def graph_feed(session, feed: dict) -> dict:
    """The inputs of `feed` the graph takes: an input no output depends on (DistilBERT's and
    ModernBERT's token type ids) is not in the traced graph."""
    names = {i.name for i in session.get_inputs()}
    return {k: v for k, v in feed.items() if k in names}
