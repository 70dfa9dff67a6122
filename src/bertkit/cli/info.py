"""`bertkit info DIR`: what a model directory holds (BERT's layout or ELECTRA's)."""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.cli.args import model_dir


def add_arguments(parser) -> None:
    parser.add_argument("model", type=model_dir, help="model directory (config.json + model.safetensors)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args) -> int:
    from bertkit.hf import config_to_dict, heads_in, load_config, parameter_count, weight_shapes

    path = Path(args.model)
    config = load_config(path)
    shapes = weight_shapes(path)
    n_params = parameter_count(shapes, config.model_type)
    saved = json.loads((path / "config.json").read_text(encoding="utf-8"))
    arch = saved.get("architectures")
    info = {
        "path": str(path),
        "architectures": arch,
        "parameters": n_params,
        "family": config.model_type,
        "heads": heads_in(shapes, config.model_type),
        "tokenizer": (path / "vocab.txt").exists() or (path / "tokenizer.json").exists(),
        "config": config_to_dict(config, saved.get("model_type", "bert")),
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    c = config
    print(f"{path}")
    print(f"  family         {c.model_type}")
    print(f"  architecture   {', '.join(arch) if arch else 'unknown'}")
    print(f"  parameters     {n_params:,}")
    print(f"  shape          {c.num_hidden_layers} layers, hidden {c.hidden_size}, {c.num_attention_heads} heads, "
          f"intermediate {c.intermediate_size}, vocabulary {c.vocab_size}, max length {c.max_tokens}"
          + (f", embeddings {c.embedding_size} wide (projected to the hidden size)" if c.embedding_size else ""))
    print(f"  attention      {c.attention}, activation {c.hidden_act}")
    print(f"  heads          {', '.join(info['heads']) or 'none'}")
    if c.id2label:
        print(f"  labels         {', '.join(c.id2label[i] for i in sorted(c.id2label))}")
    print(f"  tokenizer      {'present' if info['tokenizer'] else 'none in this directory'}")
    return 0
