"""`bertkit fill-mask --model DIR "text with [MASK]"`: the masked-LM head's guesses for each [MASK].

Every [MASK] is predicted from one forward pass over the whole text, independently of the
others (as in the paper's MLM objective). A "##" piece continues the word before it, so each
guess is shown with the text it makes, where pieces join their word.

The model directory must hold a trained masked-LM head (`cls.predictions.*`, as written by
BertForMaskedLM or BertForPreTraining); an encoder-only directory is refused rather than given
a random head. Every check that needs no model runs before torch is imported, so mistakes are
reported at once.
"""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.config import BertConfig
from bertkit.errors import UserError

MLM_PREFIX = "cls.predictions."


def add_arguments(parser) -> None:
    parser.add_argument("text", nargs="+", help='text(s) containing [MASK], e.g. "paris is the [MASK] of france."')
    parser.add_argument("--model", required=True, help="model directory with a masked-LM head and vocab.txt")
    parser.add_argument("--top-k", type=int, default=5, help="guesses shown per [MASK] (default 5)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _weight_keys(path: Path) -> list[str]:
    """The tensor names in a model directory, read without loading the tensors themselves."""
    weights = path / "model.safetensors"
    if weights.exists():
        from safetensors import safe_open

        try:
            with safe_open(str(weights), "np") as f:  # "np": listing names needs no torch
                return list(f.keys())
        except Exception as e:  # safetensors raises several types for a corrupt file
            raise UserError(f"cannot read weights: {e}", weights) from None
    from bertkit.hf import read_state_dict

    return list(read_state_dict(path))


def check_masked_lm_dir(path: Path):
    """The tokenizer of a model directory that has a trained MLM head; loads no weights."""
    from bertkit.tokenizer import Tokenizer

    BertConfig.load(path)  # a clear error for a missing directory or config.json comes first
    if not any(k.startswith(MLM_PREFIX) for k in _weight_keys(path)):
        raise UserError("model has no masked-LM head (no cls.predictions.* weights); "
                        "use a BertForMaskedLM or BertForPreTraining directory", path)
    return Tokenizer.from_pretrained(path)


def load_masked_lm(path: Path):
    """Tokenizer and BertForMaskedLM from a directory that has a trained MLM head."""
    from bertkit.heads import BertForMaskedLM

    tokenizer = check_masked_lm_dir(path)
    return tokenizer, BertForMaskedLM.from_pretrained(path).eval()


def _require_mask(tokenizer, text: str) -> None:
    if tokenizer.mask_id not in tokenizer.encode(text).ids:
        raise UserError(f"no [MASK] token in the text: {text[:60]!r}")


def predict(model, tokenizer, text: str, top_k: int) -> list[dict]:
    """For each [MASK] in `text`: its token position and the top_k guesses (token, id,
    probability, and the text with the guess filled in)."""
    import torch

    _require_mask(tokenizer, text)
    enc = tokenizer.encode(text, max_length=model.config.max_position_embeddings, truncation=True)
    mask_id = tokenizer.mask_id
    ids = torch.tensor([enc.ids])  # (1, T)
    positions = [i for i, t in enumerate(enc.ids) if t == mask_id]
    if not positions:
        raise UserError(f"no [MASK] token within the model's {len(enc.ids)} tokens: {text[:60]!r}")
    with torch.no_grad():
        logits = model(ids).logits[0, positions]  # (M, V)
    probs = logits.float().softmax(-1)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    body = enc.ids[1:-1]  # without [CLS] and [SEP]
    results = []
    for row, pos in enumerate(positions):
        guesses = []
        for p, i in zip(top.values[row].tolist(), top.indices[row].tolist()):
            filled = body.copy()
            filled[pos - 1] = i
            guesses.append({"token": tokenizer.convert_ids_to_tokens([i])[0], "id": i, "probability": p,
                            "text": tokenizer.decode(filled, skip_special_tokens=False)})
        results.append({"position": pos, "guesses": guesses})
    return results


def run(args) -> int:
    if args.top_k < 1:
        raise UserError(f"--top-k must be at least 1, not {args.top_k}")
    path = Path(args.model)
    tokenizer = check_masked_lm_dir(path)
    for text in args.text:
        _require_mask(tokenizer, text)
    from bertkit.heads import BertForMaskedLM

    model = BertForMaskedLM.from_pretrained(path).eval()
    report = [{"text": text, "masks": predict(model, tokenizer, text, args.top_k)} for text in args.text]
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    for item in report:
        print(item["text"])
        for n, mask in enumerate(item["masks"], 1):
            guesses = mask["guesses"]
            print(f"  [MASK] {n} (token {mask['position']})")
            width = max(len(g["token"]) for g in guesses)
            for g in guesses:
                print(f"    {g['token']:<{width}}  {g['probability']:.4f}  {g['text']}")
    return 0
