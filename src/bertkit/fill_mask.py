"""Fill-mask: the masked-LM head's guesses for each [MASK] of a text.

Every [MASK] is predicted from one forward pass over the whole text, independently of the
others (as in the paper's MLM objective). A "##" piece continues the word before it, so each
guess is shown with the text it makes, where pieces join their word.

A text longer than the model's positions is cut to them (a [MASK] past the cut is an error),
and each guess shows only the words around its [MASK] (`CONTEXT` pieces either side), so a long
input is never echoed once per guess; `fill_masks` says which texts were cut.

A model directory must hold a trained masked-LM head (written by BertForMaskedLM or
BertForPreTraining); an encoder-only directory is refused rather than given a random head.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.errors import UserError

CONTEXT = 16  # word pieces shown either side of a [MASK] in each guess's text


def check_masked_lm_dir(path: Path):
    """The tokenizer of a model directory that has a trained MLM head; loads no weights."""
    from bertkit.hf import heads_in, load_config, weight_shapes
    from bertkit.tokenizer import Tokenizer

    config = load_config(path)  # a clear error for a missing directory or config.json comes first
    if "masked-LM" not in heads_in(weight_shapes(path), config.model_type):
        raise UserError("model has no masked-LM head; use a BertForMaskedLM or BertForPreTraining directory",
                        path)
    return Tokenizer.from_pretrained(path)


def load_masked_lm(path: Path):
    """Tokenizer and BertForMaskedLM from a directory that has a trained MLM head."""
    from bertkit.heads import BertForMaskedLM

    tokenizer = check_masked_lm_dir(path)
    return tokenizer, BertForMaskedLM.from_pretrained(path).eval()


def require_mask(tokenizer, text: str) -> None:
    if tokenizer.mask_id not in tokenizer.encode(text).ids:
        mask = tokenizer.convert_ids_to_tokens([tokenizer.mask_id])[0]
        raise UserError(f"no {mask} token in the text: {text[:60]!r}")


def fill_mask(model, tokenizer, text: str, top_k: int = 5) -> list[dict]:
    """For each [MASK] in `text`: its token position and the top_k guesses (token, id,
    probability, and the words around the [MASK] with the guess filled in)."""
    return _fill(model, tokenizer, text, top_k)[0]


def fill_masks(model, tokenizer, texts: list[str], top_k: int = 5) -> list[dict]:
    """One report per text: {"text", "masks" (as `fill_mask`), "cut_to"}; "cut_to" is the
    model's token limit when the text was longer and was cut to it, else None."""
    reports = []
    for text in texts:
        masks, cut = _fill(model, tokenizer, text, top_k)
        reports.append({"text": text, "masks": masks, "cut_to": model.config.max_tokens if cut else None})
    return reports


def _excerpt(tokenizer, ids: list[int], at: int) -> str:
    """The text of the pieces around index `at`, starting at a word's first piece; "…" marks a cut."""
    lo, hi = max(0, at - CONTEXT), min(len(ids), at + CONTEXT + 1)
    while lo > 0 and tokenizer.continues_word(tokenizer.convert_ids_to_tokens([ids[lo]])[0]):
        lo -= 1
    while hi < len(ids) and tokenizer.continues_word(tokenizer.convert_ids_to_tokens([ids[hi]])[0]):
        hi += 1
    body = tokenizer.decode(ids[lo:hi], skip_special_tokens=False)
    return ("… " if lo > 0 else "") + body + (" …" if hi < len(ids) else "")


def _fill(model, tokenizer, text: str, top_k: int) -> tuple[list[dict], bool]:
    import torch

    require_mask(tokenizer, text)
    enc = tokenizer.encode(text, max_length=model.config.max_tokens, truncation=True)
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
                            "text": _excerpt(tokenizer, filled, pos - 1)})
        results.append({"position": pos, "guesses": guesses})
    return results, enc.truncated
