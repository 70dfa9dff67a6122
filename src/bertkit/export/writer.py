"""`bertkit export` as one call: trace, check against PyTorch, quantise, write a self-describing folder.

The folder holds `model.onnx` (fp32), with `--int8` also `model_int8.onnx` (ONNX Runtime's
dynamic quantisation: int8 weights, one scale per output channel, activations quantised per
batch), `onnx.json` (kind, inputs, outputs, pooling, the differences measured at export), the
source directory's config, tokenizer and sentence-transformers files, so `bertkit embed`,
`evaluate` and `serve` can read it without the torch weights, and a model card (README.md: the
command, the differences as its metrics, how to run it in bertkit and ONNX Runtime).

Validation runs both graphs in ONNX Runtime on a few random batches of different sizes with
padding, against the torch model on the same inputs; the export is refused (nothing written)
when the fp32 graph differs by more than `tolerance`. int8 differs by its rounding: its
difference is reported, and its `sentence_embedding` cosine to fp32 for an embedding graph.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch

from bertkit.errors import UserError
from bertkit.export import META_FILE
from bertkit.export.backend import graph_feed
from bertkit.export.graph import INPUTS, build_graph, graph_kind
from bertkit.st import model_normalizes

ONNX_FILE, INT8_FILE = "model.onnx", "model_int8.onnx"
OPSET = 17
# What travels with the graph: config, tokenizer, sentence-transformers and fine-tuning settings.
COPIED = ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
          "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "finetune.json")


def sample_inputs(config, batches=((2, 16), (3, 7), (1, 33)), seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random int64 batches (B, T) with right padding in all but the first row, both segments used."""
    rng = np.random.default_rng(seed)
    out = []
    for B, T in batches:
        T = min(T, config.max_tokens)
        ids = rng.integers(5, config.vocab_size, size=(B, T), dtype=np.int64)
        mask = np.ones((B, T), dtype=np.int64)
        types = np.zeros((B, T), dtype=np.int64)
        for row in range(1, B):
            length = int(rng.integers(2, T + 1))
            mask[row, length:] = 0
            ids[row, length:] = config.pad_token_id or 0
            types[row, length // 2:length] = 1 if config.type_vocab_size > 1 else 0
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    return out


def _trace(module, names: tuple[str, ...], path: Path, config) -> None:
    example = tuple(torch.from_numpy(v) for v in sample_inputs(config)[0].values())
    axes = {n: {0: "batch", 1: "sequence"} for n in INPUTS}
    axes.update({n: {0: "batch"} if n in ("sentence_embedding", "seq_relationship_logits") else
                 {0: "batch", 1: "sequence"} for n in names})
    if module.__class__.__name__ == "HeadGraph" and module.kind == "BertForSequenceClassification":
        axes["logits"] = {0: "batch"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer notes
        torch.onnx.export(module, example, str(path), input_names=list(INPUTS), output_names=list(names),
                          dynamic_axes=axes, opset_version=OPSET, dynamo=False)
    module.eval()  # export restores the wrapper's mode, which may flip it back to training


def _session(path: Path, threads: int = 1):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def compare(module, names, path: Path, config) -> dict[str, float]:
    """Max |ONNX Runtime - torch| per output over the sample batches (padding positions skipped)."""
    session = _session(path)
    worst = dict.fromkeys(names, 0.0)
    for feed in sample_inputs(config, seed=1):
        got = session.run(list(names), graph_feed(session, feed))
        with torch.no_grad():
            want = module(*(torch.from_numpy(v) for v in feed.values()))
        want = want if isinstance(want, tuple) else (want,)
        keep = feed["attention_mask"].astype(bool)
        for name, g, w in zip(names, got, want):
            w = w.float().numpy()
            diff = np.abs(g - w)
            if diff.ndim >= 2 and diff.shape[:2] == keep.shape:
                diff = diff[keep]  # per-token outputs: padding rows are don't-care
            worst[name] = max(worst[name], float(diff.max()) if diff.size else 0.0)
    return worst


def quantize(src: Path, dest: Path, per_channel: bool = True) -> None:
    """ONNX Runtime's dynamic int8 quantisation of every MatMul/Gemm (and fused Attention)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(str(src), str(dest), weight_type=QuantType.QInt8, per_channel=per_channel)


def _int8_report(module, names, path: Path, config, kind: str) -> dict:
    report = {"max_abs_diff": compare(module, names, path, config)}
    if kind == "embedding":
        session, cosines = _session(path), []
        for feed in sample_inputs(config, seed=2):
            got = session.run(["sentence_embedding"], graph_feed(session, feed))[0]
            with torch.no_grad():
                want = module(*(torch.from_numpy(v) for v in feed.values()))[1].numpy()
            cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1) + 1e-12)
            cosines.extend(cos.tolist())
        report["min_cosine_to_fp32"] = float(min(cosines))
    return report


def export_onnx(model_dir: str | os.PathLike, out: str | os.PathLike, *, int8: bool = False, graph: str = "auto",
                pooling: str | None = None, normalize: bool | None = None, fused_attention: bool = True,
                tolerance: float = 1e-4, log=print) -> dict:
    """Export `model_dir` to `out` (written atomically, replacing what is there); returns onnx.json."""
    from bertkit import __version__
    from bertkit.finetune.registry import saved_settings
    from bertkit.hf import load_config
    from bertkit.io import atomic_dir, write_json
    from bertkit.model_card import command_line, export_card, write_card
    from bertkit.st import model_pooling

    model_dir, out = Path(model_dir), Path(out)
    config = load_config(model_dir)
    kind = graph_kind(model_dir, graph)
    own_pooling, max_length = model_pooling(model_dir)
    pooling = pooling or own_pooling
    normalize = model_normalizes(model_dir) if normalize is None else normalize
    module, names = build_graph(model_dir, kind, pooling, normalize, fused_attention)
    meta = {"format": "onnx", "kind": kind, "inputs": list(INPUTS), "outputs": list(names), "opset": OPSET,
            "attention": "fused" if fused_attention else "plain", "bertkit_version": __version__,
            "files": {"fp32": ONNX_FILE}, "source": str(model_dir)}
    if kind == "embedding":
        meta.update(pooling=pooling, normalize=normalize, max_length=max_length)
    with atomic_dir(out) as tmp:
        _trace(module, names, tmp / ONNX_FILE, config)
        diff = compare(module, names, tmp / ONNX_FILE, config)
        worst = max(diff.values())
        log(f"fp32 graph vs PyTorch: max abs difference {worst:.2e} "
            f"({', '.join(f'{n} {d:.1e}' for n, d in diff.items())})")
        if not worst <= tolerance:
            raise UserError(f"the exported graph differs from PyTorch by {worst:.2e}, more than the tolerance "
                            f"{tolerance:g}; nothing written", out)
        meta["max_abs_diff"] = diff
        if int8:
            quantize(tmp / ONNX_FILE, tmp / INT8_FILE)
            meta["files"]["int8"] = INT8_FILE
            meta["int8"] = {"method": "onnxruntime.quantization.quantize_dynamic", "weights": "int8 per channel",
                            **_int8_report(module, names, tmp / INT8_FILE, config, kind)}
            cosine = meta["int8"].get("min_cosine_to_fp32")
            log(f"int8 graph vs PyTorch fp32: max abs difference {max(meta['int8']['max_abs_diff'].values()):.2e}"
                + (f", min cosine {cosine:.4f}" if cosine is not None else ""))
        _copy_side_files(model_dir, tmp)
        write_json(tmp / META_FILE, meta)
        flags = {"model": model_dir, "format": "onnx", "out": out, "int8": int8, "graph": graph,
                 "pooling": meta.get("pooling"), "normalize": None if kind != "embedding" else
                 "yes" if normalize else "no", "attention": meta["attention"], "tolerance": tolerance}
        card = export_card(meta, model_dir, command_line("export", flags), saved_settings(model_dir).get("task"))
        write_card(tmp, card)
    return meta


def _copy_side_files(model_dir: Path, dest: Path) -> None:
    for name in COPIED:
        if (model_dir / name).is_file():
            shutil.copyfile(model_dir / name, dest / name)
    for folder in model_dir.glob("1_*"):  # sentence-transformers' pooling module folder
        if folder.is_dir() and (folder / "config.json").is_file():
            (dest / folder.name).mkdir()
            shutil.copyfile(folder / "config.json", dest / folder.name / "config.json")
