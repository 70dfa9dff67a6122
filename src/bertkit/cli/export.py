"""`bertkit export --model DIR --format onnx [--int8] --out DIR`: one ONNX graph of a model directory.

The graph takes input_ids, attention_mask and token_type_ids (batch and sequence axes dynamic)
and gives the head's outputs (classifier, token-classifier or MLM `logits`, QA `start_logits` /
`end_logits`), or for an embedding model the token vectors and the sentence vector, pooled and
normalised as the directory's sentence-transformers files say. It is checked against PyTorch on
export (the max abs difference is printed; above --tolerance nothing is written). `--int8` adds
ONNX Runtime's dynamic int8 quantisation of it. The folder also gets the config and tokenizer
files, so `bertkit embed / evaluate --backend onnx --model OUT` run it as they run the model.
"""

from __future__ import annotations

from bertkit.cli.args import add_overwrite, check_output_dir, float_in, model_dir
from bertkit.errors import UserError


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("--model", required=True, type=model_dir, help="model directory (config.json, weights, vocab.txt)")
    a("--format", required=True, choices=("onnx",), help="the graph format")
    a("--out", required=True, help="output folder: model.onnx (+ model_int8.onnx), onnx.json, config, tokenizer")
    add_overwrite(parser, "export")
    a("--int8", action="store_true",
      help="also write model_int8.onnx: ONNX Runtime dynamic quantisation, int8 per-channel weights")
    a("--graph", choices=("auto", "embedding", "head"), default="auto",
      help="auto: the directory's head (config.json's architectures), or the embedding graph for a bare "
           "encoder or a sentence-transformers directory; embedding: always pool the last layer")
    a("--pooling", choices=("cls", "mean", "max"), default=None,
      help="embedding graph: how the sentence vector pools (default: the directory's own, else mean)")
    a("--normalize", choices=("auto", "yes", "no"), default="auto",
      help="embedding graph: unit-length sentence vectors (auto: when the directory lists a Normalize module)")
    a("--attention", choices=("fused", "plain"), default="fused",
      help="fused: each layer's attention is one ONNX Runtime Attention operator; plain: standard ONNX ops only")
    a("--tolerance", type=float_in(0.0, 1.0, low_open=True), default=1e-4,
      help="refuse the export when the fp32 graph differs from PyTorch by more than this")


def check(args) -> None:
    from bertkit.export.writer import META_FILE

    if args.graph == "head" and (args.pooling or args.normalize != "auto"):
        raise UserError("--pooling and --normalize apply to the embedding graph, not --graph head")
    check_output_dir(args.out, "--out", args.overwrite, markers=(META_FILE,), what="export")
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        raise UserError("export needs onnx and onnxruntime: pip install 'bertkit[export]'") from None


def run(args) -> int:
    import logging

    from bertkit.export.writer import export_onnx

    logging.getLogger().setLevel(logging.ERROR)  # onnxruntime.quantization's advice on the root logger
    normalize = {"auto": None, "yes": True, "no": False}[args.normalize]
    meta = export_onnx(args.model, args.out, int8=args.int8, graph=args.graph,
                       pooling=args.pooling, normalize=normalize, fused_attention=args.attention == "fused",
                       tolerance=args.tolerance)
    what = meta["kind"] if meta["kind"] != "embedding" else f"embedding ({meta['pooling']} pooling" + (
        ", normalised)" if meta["normalize"] else ")")
    files = ", ".join(meta["files"].values())
    print(f"wrote {files} ({what}; outputs {', '.join(meta['outputs'])}) to {args.out}")
    return 0
