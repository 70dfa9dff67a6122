"""`bertkit info DIR`: what a model directory holds."""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.config import BertConfig
from bertkit.errors import UserError


def add_arguments(parser) -> None:
    parser.add_argument("model", help="model directory (config.json + model.safetensors)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _heads(keys: list[str]) -> list[str]:
    heads = []
    if any(k.startswith("cls.predictions.") for k in keys):
        heads.append("masked-LM")
    if any(k.startswith("cls.seq_relationship.") for k in keys):
        heads.append("next-sentence")
    if any("pooler.dense." in k for k in keys):
        heads.append("pooler")
    if any(k.startswith("classifier.") for k in keys):
        heads.append("classifier")
    if any(k.startswith("qa_outputs.") for k in keys):
        heads.append("question-answering")
    return heads


def run(args) -> int:
    path = Path(args.model)
    config = BertConfig.load(path)
    weights = path / "model.safetensors"
    if weights.exists():
        from safetensors import safe_open

        try:
            with safe_open(str(weights), "np") as f:  # "np": reading shapes needs no torch
                keys = list(f.keys())
                shapes = {k: f.get_slice(k).get_shape() for k in keys}
        except Exception as e:
            raise UserError(f"cannot read weights: {e}", weights) from None
    else:
        from bertkit.hf import read_state_dict

        state = read_state_dict(path)
        keys, shapes = list(state), {k: list(v.shape) for k, v in state.items()}
    # Buffers and tied copies (old checkpoints store the MLM decoder, a copy of the word
    # embeddings and of cls.predictions.bias) are not parameters of their own.
    n_params = sum(_numel(s) for k, s in shapes.items()
                   if not k.endswith("position_ids") and not k.startswith("cls.predictions.decoder."))
    arch = json.loads((path / "config.json").read_text(encoding="utf-8")).get("architectures")
    info = {
        "path": str(path),
        "architectures": arch,
        "parameters": n_params,
        "heads": _heads(keys),
        "tokenizer": (path / "vocab.txt").exists(),
        "config": config.to_dict(),
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    c = config
    print(f"{path}")
    print(f"  architecture   {', '.join(arch) if arch else 'unknown'}")
    print(f"  parameters     {n_params:,}")
    print(f"  shape          {c.num_hidden_layers} layers, hidden {c.hidden_size}, {c.num_attention_heads} heads, "
          f"intermediate {c.intermediate_size}, vocabulary {c.vocab_size}, max length {c.max_position_embeddings}")
    print(f"  attention      {c.attention}, activation {c.hidden_act}")
    print(f"  heads          {', '.join(info['heads']) or 'none'}")
    if c.id2label:
        print(f"  labels         {', '.join(c.id2label[i] for i in sorted(c.id2label))}")
    print(f"  tokenizer      {'vocab.txt present' if info['tokenizer'] else 'none in this directory'}")
    return 0


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
