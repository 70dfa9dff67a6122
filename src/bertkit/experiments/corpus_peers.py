"""The `corpus` experiment's peers, run by this file's path with the peers' own Python (.venv-peers):
sentence-transformers (torch, and backend="onnx") and fastembed, on the same model and passages.

It imports nothing of bertkit, because that environment has none of it: sentence-transformers[onnx]
(optimum-onnx) pins a transformers, and fastembed a huggingface-hub, that bertkit's cannot hold.

    export: sentence-transformers' own ONNX export of the model (optimum) into MODELS/onnx, and
            fastembed's folder of that graph with the model's tokenizer, cut at 256 tokens too;
    encode: one contender on every passage, one thread, batches of 32, after a warm-up on the
            first 64; the seconds of `encode`/`embed` with the model loaded, the vectors as .npy.

Nothing is downloaded from a model hub (HF_HUB_OFFLINE=1 in the environment the parent gives).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from pathlib import Path


def export(model: Path, models: Path, max_length: int) -> dict:
    from sentence_transformers import SentenceTransformer

    onnx = models / "onnx"
    SentenceTransformer(str(model), backend="onnx", device="cpu").save_pretrained(str(onnx))
    fastembed = models / "fastembed"
    fastembed.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "special_tokens_map.json", "vocab.txt", "config.json"):
        shutil.copy(model / name, fastembed / name)
    shutil.copy(onnx / "onnx" / "model.onnx", fastembed / "model.onnx")
    config = json.loads((model / "tokenizer_config.json").read_text())
    (fastembed / "tokenizer_config.json").write_text(json.dumps({**config, "max_length": max_length}))
    return {"onnx": str(onnx), "fastembed": str(fastembed)}


def _encoder(contender: str, model_dir: Path, models: Path, batch: int, threads: int):
    import numpy as np

    if contender == "fastembed":
        from fastembed import TextEmbedding

        model = TextEmbedding("sentence-transformers/all-MiniLM-L6-v2", specific_model_path=str(models / "fastembed"),
                              threads=threads, cache_dir=str(models / "fastembed-cache"), local_files_only=True)
        return lambda texts: np.stack(list(model.embed(texts, batch_size=batch)))
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    kwargs, folder = {}, model_dir
    if contender.endswith("onnx"):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = threads
        kwargs = {"backend": "onnx", "model_kwargs": {"session_options": options, "provider": "CPUExecutionProvider"}}
        folder = models / "onnx"
    model = SentenceTransformer(str(folder), device="cpu", **kwargs)
    return lambda texts: model.encode(texts, batch_size=batch, normalize_embeddings=True)


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("sentence-transformers", "torch", "onnxruntime", "fastembed", "transformers"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def encode(args) -> dict:
    import numpy as np

    texts = Path(args.input).read_text(encoding="utf-8").splitlines()
    run = _encoder(args.contender, Path(args.model), Path(args.models), args.batch_size, args.threads)
    run(texts[:64])  # warm-up
    started = time.perf_counter()
    vectors = run(texts)
    seconds = time.perf_counter() - started
    np.save(args.out, np.asarray(vectors, dtype=np.float32))
    return {"seconds": seconds, "versions": _versions(), "precision": "fp32"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the corpus experiment's peers")
    p.add_argument("kind", choices=("export", "encode"))
    p.add_argument("--models", required=True, help="export: where the exports go; encode: where they are")
    p.add_argument("--model", required=True, help="the model folder")
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--contender")
    p.add_argument("--input")
    p.add_argument("--out")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--result", required=True)
    args = p.parse_args(argv)
    if args.kind == "export":
        out = export(Path(args.model), Path(args.models), args.max_length)
    else:
        out = encode(args)
    tmp = Path(args.result + ".tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n")
    tmp.replace(args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
