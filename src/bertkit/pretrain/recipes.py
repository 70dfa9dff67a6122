"""Named pretraining recipes: the optimisation settings a run takes unless its flags say otherwise.

"paper" is BERT's (Devlin et al. 2018, section A.2; at the small scale this project runs by
default): MLM + NSP on sentence pairs, batch 32, peak lr 1e-4, 1% warm-up then linear decay,
weight decay 0.01, dropout 0.1 (the model config's own), fp32. It is what `bertkit pretrain` did
before recipes existed, to the bit.

"budget" applies what later work learned about pretraining on little compute, at the values
measured on the demo's BBC News corpus (README, "Pretraining recipes"):
- no NSP, MLM on packed full-length sequences (RoBERTa, Liu et al. 2019: NSP does not help,
  and packing wastes no position on padding);
- no dropout while pretraining (cramming, Geiping & Goldstein 2022: one pass over the data
  cannot overfit, and dropout only slows learning); the saved model keeps its config's 0.1 so
  fine-tuning regularises as BERT's does;
- a peak learning rate 30x the paper's (3e-3) with a short warm-up, and AdamW's beta2 at 0.98
  (RoBERTa, cramming: a shorter second-moment memory keeps a high learning rate stable);
- weights drawn at the model's width scale, N(0, 1/sqrt(hidden)), with a sinusoidal position
  table (`bertkit.pretrain.init`, init "scaled"): BERT's 0.02 suits hidden 768-1024; a narrow model
  drawn at 0.02 sits on the masked-LM plateau (frequent tokens at [MASK], copies elsewhere) for
  thousands of steps. Measured on the demo's data: README, "Pretraining recipes";
- with `minutes`, a schedule over wall-clock time that reaches 0 exactly when the budget ends
  (Izsak et al. 2021, "How to train BERT with an academic budget"; cramming), rather than over
  a step count guessed up front;
- bf16 autocast where the hardware has bf16 arithmetic (precision "auto": a recent GPU, or a CPU
  with AVX512-BF16 or AMX), the weights and optimizer staying fp32 (cramming; MosaicBERT): on the
  demo's CPU it takes 1.4-2x the steps in the same minutes at the same accuracy per step;
- the sparse MLM head (logits only at the masked positions) is always on in bertkit.

A recipe fills only the fields a caller left unset (None): `TrainConfig(recipe="budget",
lr=5e-4)` takes the budget recipe with that learning rate; the CLI's flags work the same way.
This module imports no torch (`set_dropout` imports it when called), so `bertkit pretrain --help`
shows the table's values at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

# The fields a recipe sets, each with its value per recipe (dropout None: the model config's own).
RECIPES: dict[str, dict] = {
    "paper": {"objective": "mlm+nsp", "batch_size": 32, "lr": 1e-4, "warmup": 0.01, "weight_decay": 0.01,
              "dropout": None, "precision": "fp32", "adam_beta2": 0.999, "init": "bert"},
    "budget": {"objective": "mlm", "batch_size": 32, "lr": 3e-3, "warmup": 0.05, "weight_decay": 0.01,
               "dropout": 0.0, "precision": "auto", "adam_beta2": 0.98, "init": "scaled"},
}
RECIPE_FIELDS = tuple(RECIPES["paper"])


def fill(recipe: str, given: dict) -> dict:
    """`given` (field -> value) with the recipe's value in every recipe field it leaves None or out."""
    return {**given, **{name: value for name, value in RECIPES[recipe].items() if given.get(name) is None}}


def set_dropout(model: nn.Module, p: float) -> None:
    """Every dropout of `model`, attention probabilities included, to `p` for this run only:
    the model's config (and so the saved config.json) keeps its own rates."""
    from torch import nn

    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = p
        if hasattr(module, "attn_dropout"):  # bertkit.model's attention passes it to SDPA
            module.attn_dropout = p
