"""A static embedding model: one vector per vocabulary token; a text's vector is the mean of its
tokens' rows (Model2Vec, sentence-transformers' StaticEmbedding), normalised when the directory's
modules end in Normalize.

The directory is sentence-transformers' layout, so `SentenceTransformer(DIR)` loads it as it is:
`modules.json` (StaticEmbedding in `0_StaticEmbedding/`, then `1_Normalize`),
`0_StaticEmbedding/model.safetensors` (one tensor, `embedding.weight`, (V, C) float32) and its
`tokenizer.json` (no truncation, no padding), `config_sentence_transformers.json`. The module
folder also holds the teacher's vocab.txt and tokenizer_config.json, which bertkit's tokenizer
reads; sentence-transformers reads tokenizer.json alone. sentence-transformers 6 writes the module
at the top of the folder (path ""); `st.static_module` finds it either way.

`StaticEncoder` is called like `model.BertModel` (ids and a mask in, an `EncoderOutput` out, its
last hidden state each token's row), and its tokenizer adds no special tokens (StaticEmbedding
tokenizes with add_special_tokens=False), so `embed.pool`'s mean over the mask is StaticEmbedding's
EmbeddingBag mean, and `embed`, `index`, `search`, `serve` and the STS evaluation run it unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor, nn

from bertkit.errors import UserError
from bertkit.st import STATIC_MAX_TOKENS, static_module

MODULE_DIR = "0_StaticEmbedding"
WEIGHT_KEY = "embedding.weight"  # StaticEmbedding's state_dict: its nn.EmbeddingBag
MODULE_TYPES = {"static": "sentence_transformers.models.StaticEmbedding",
                "normalize": "sentence_transformers.models.Normalize"}


@dataclass(frozen=True)
class StaticConfig:
    """What the commands read of a model's config (`BertConfig`'s names), for a static model."""

    vocab_size: int  # rows of the table
    hidden_size: int  # width of a vector
    num_hidden_layers: int = 0  # no layers: the table is the model
    max_tokens: int = STATIC_MAX_TOKENS  # every token of a text is read
    model_type: str = "static"
    num_labels: int = 0
    id2label: dict | None = None
    problem_type: str | None = None


class StaticEncoder(nn.Module):
    """A (V, C) table called like `BertModel`: (B, T) ids -> (B, T, C) rows, B texts, T tokens,
    C the width. `bags` is StaticEmbedding's own forward (EmbeddingBag mean over each text)."""

    def __init__(self, weight: Tensor):
        super().__init__()
        self.embedding = nn.EmbeddingBag.from_pretrained(weight.float(), freeze=False, mode="mean")
        self.config = StaticConfig(*weight.shape)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                output_hidden_states: bool = False, **_):
        from bertkit.model import EncoderOutput

        rows = nn.functional.embedding(input_ids, self.embedding.weight)  # (B, T, C)
        return EncoderOutput(rows, hidden_states=(rows,) if output_hidden_states else None)

    def bags(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """(N,) every text's ids laid end to end and (B,) where each starts -> (B, C) their means."""
        return self.embedding(ids, offsets)


def is_static(model_dir: str | os.PathLike) -> bool:
    return static_module(model_dir) is not None


def load_static(model_dir: str | os.PathLike) -> tuple[StaticEncoder, object]:
    """(the model, its tokenizer without special tokens) of a static model directory."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from bertkit.tokenizer import Tokenizer

    folder = static_module(model_dir)
    if folder is None:
        raise UserError("no StaticEmbedding module in modules.json: not a static embedding model", model_dir)
    path = folder / "model.safetensors"
    if not path.is_file():
        raise UserError("no model.safetensors in the StaticEmbedding module", folder)
    try:
        weights = load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise UserError(f"cannot read the table ({e})", path) from None
    if set(weights) != {WEIGHT_KEY} or weights[WEIGHT_KEY].dim() != 2:
        raise UserError(f"expected one 2-d tensor {WEIGHT_KEY!r}, found {sorted(weights)}", path)
    tokenizer = Tokenizer.from_pretrained(folder).without_special_tokens()
    table = weights[WEIGHT_KEY]
    if len(tokenizer) > table.shape[0]:
        raise UserError(f"the tokenizer has {len(tokenizer)} entries but the table {table.shape[0]} rows", folder)
    return StaticEncoder(table).eval(), tokenizer


def save_static(model_dir: str | os.PathLike, table: Tensor, tokenizer, normalize: bool = True,
                info: dict | None = None) -> None:
    """Write `table` (V, C) and `tokenizer` as a static model directory into `model_dir` (which
    the caller publishes atomically); `info` goes into static.json beside them."""
    from safetensors.torch import save_file

    from bertkit.io import atomic_path, write_json

    model_dir = Path(model_dir)
    module = model_dir / MODULE_DIR
    tokenizer.save_pretrained(module)  # tokenizer.json without truncation or padding, and the vocabulary
    with atomic_path(module / "model.safetensors") as tmp:
        save_file({WEIGHT_KEY: table.detach().float().contiguous().cpu()}, str(tmp))
    modules = [(MODULE_DIR, "static")] + ([("1_Normalize", "normalize")] if normalize else [])
    write_json(model_dir / "modules.json", [{"idx": i, "name": str(i), "path": path, "type": MODULE_TYPES[kind]}
                                            for i, (path, kind) in enumerate(modules)])
    if normalize:
        (model_dir / "1_Normalize").mkdir(exist_ok=True)
    write_json(model_dir / "config_sentence_transformers.json",
               {"similarity_fn_name": "cosine", "prompts": {}, "default_prompt_name": None})
    if info is not None:
        write_json(model_dir / "static.json", info)
