"""ELECTRA (Clark et al. 2020): replaced-token detection, with a small masked-LM generator beside it.

A generator (a `BertForMaskedLM` of the discriminator's depth and a fraction of its width) fills
the masked positions with tokens sampled from its softmax; the discriminator learns, at every
real token, whether its input there is the original token or a replacement. Only the
discriminator is kept for fine-tuning; the generator is a masked LM in its own right.
- `ElectraForPreTraining`: the discriminator: the encoder and the replaced-token detection (RTD)
  head (dense C -> C, activation, dense C -> 1), one logit per token, > 0 for "replaced"; the
  same model and loss as transformers' ElectraForPreTraining (BCE over attention_mask == 1). A
  family whose head is its own (`Family.rtd_context`, DeBERTa-v3's) first normalises each token's
  state plus the first token's, LN(h_t + h_0), as DeBERTa's code does;
- `ElectraPretraining`: what `bertkit pretrain --objective electra` trains: both models, sharing
  one embeddings module (token, position and segment tables and their LayerNorm: one set of
  tensors, as ELECTRA ties them); the generator's embeddings are therefore as wide as the
  discriminator's, projected to its own width (`BertConfig.embedding_size`);
- `generator_config`, `sample_tokens`, `replace_tokens`, `rtd_loss`: the steps of the objective.

Where this differs from ELECTRA's code, none of it in the model or the loss:
- the masked positions and their [MASK] / random / kept rule are the run's masking options
  (80/10/10 by default; ELECTRA's is 85/0/15, `--mask-rule 85/0/15`);
- sampling is by inverse CDF with one uniform per position, drawn with the masking (ELECTRA adds
  Gumbel noise to every logit): the same distribution, from N numbers rather than N x V, and a
  sample that depends only on its own row, so a step draws the same tokens however its rows are
  split over processes;
- the discriminator has no pooler while it trains (ELECTRA has none, and a parameter without a
  gradient would stall DDP); the run's BERT directory gets one at BERT's initialisation
  (`with_pooler`), as fine-tuning would give it.

Shape legend: B batch, T tokens, C hidden, V vocabulary, N masked positions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.config import IGNORE_INDEX, BertConfig
from bertkit.errors import UserError
from bertkit.families import family_of
from bertkit.heads import BertForMaskedLM, Head, HeadOutput
from bertkit.model import ACTIVATIONS, BertModel

GENERATOR = "generator"  # the generator's folder inside a saved `ElectraPretraining` (a checkpoint)
_SHARED = ("encoder.embeddings.",)  # the generator's parameters that are the discriminator's
DELTA = "embedding_delta.safetensors"  # gradient-disentangled sharing: the discriminator's own token table


def default_width(hidden_size: int) -> float:
    """The generator's default fraction of the discriminator's width: 1/4 (ELECTRA-Small), 1/3 from
    hidden 768 (ELECTRA-Base and -Large)."""
    return 1 / 3 if hidden_size >= 768 else 1 / 4


def generator_config(config: BertConfig, width: float, layers: int | None = None) -> BertConfig:
    """The generator's shape: `layers` deep (default: the discriminator's depth; DeBERTaV3's is
    half of it), `width` times its heads (at least one), hidden size (a whole number of heads, each
    as wide as width allows around the discriminator's head size) and intermediate size; its
    embeddings are the discriminator's (E wide: C unless the discriminator projects its own, as
    ELECTRA-Small's)."""
    heads = max(1, round(config.num_attention_heads * width))
    hidden = heads * max(1, round(config.hidden_size * width / heads))
    depth = layers or config.num_hidden_layers
    if hidden >= config.hidden_size and depth >= config.num_hidden_layers:
        raise UserError(f"a generator of width {width:g} would be as wide as the discriminator "
                        f"({config.hidden_size}) and as deep: give a smaller --generator-width or --generator-layers")
    return config.replace(hidden_size=hidden, num_attention_heads=heads, embedding_size=config.embedding_width,
                          intermediate_size=max(1, round(config.intermediate_size * width)), id2label=None,
                          problem_type=None, num_hidden_layers=layers or config.num_hidden_layers,
                          num_hidden_groups=None)


def sample_tokens(logits: Tensor, uniforms: Tensor) -> Tensor:
    """One token per row of (N, V) logits, drawn from their softmax with the row's uniform u in
    [0, 1) (N,): the first id whose cumulative probability exceeds u. (N,)"""
    cdf = logits.float().softmax(-1).cumsum(-1)  # (N, V)
    u = uniforms.to(cdf.dtype)[:, None] * cdf[:, -1:]  # (N, 1): u times the total, ~1 after rounding
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=logits.shape[-1] - 1)


def replace_tokens(input_ids: Tensor, labels: Tensor, samples: Tensor) -> tuple[Tensor, Tensor]:
    """(the discriminator's input: the original tokens with `samples` at the masked positions,
    row-major; its labels: 1 where that input differs from the original, else 0), (B, T) each.
    A position where the generator sampled the original token is labelled original, as ELECTRA's.
    `input_ids` are the masked tokens, `labels` the originals at the masked positions (else -100)."""
    masked = labels != IGNORE_INDEX  # (B, T)
    original = torch.where(masked, labels, input_ids)
    corrupted = original.masked_scatter(masked, samples)
    return corrupted, (corrupted != original).long()


def rtd_loss(logits: Tensor, labels: Tensor, attention_mask: Tensor | None, reduction: str = "mean") -> Tensor:
    """Binary cross-entropy of (B, T) logits against 0/1 labels at the real tokens (attention_mask
    == 1, special tokens included; every position without a mask), as ELECTRA and transformers."""
    logits, labels = logits.float(), labels.float()
    if attention_mask is not None:
        real = attention_mask.bool()
        logits, labels = logits[real], labels[real]  # (N_real,)
    return F.binary_cross_entropy_with_logits(logits, labels, reduction=reduction)


class ReplacedTokenHead(nn.Module):
    """dense C -> C, activation (hidden_act), dense C -> 1: a logit per token, > 0 for "replaced";
    in a family with `rtd_context` (DeBERTa-v3) after LayerNorm(h_t + h_0), the first token's state
    added to every token's."""

    def __init__(self, config: BertConfig):
        super().__init__()
        C = config.hidden_size
        context = family_of(config.model_type).rtd_context
        self.norm = nn.LayerNorm(C, eps=config.layer_norm_eps) if context else None
        self.dense = nn.Linear(C, C)
        self.act = ACTIVATIONS[config.hidden_act]
        self.prediction = nn.Linear(C, 1)

    def forward(self, h: Tensor) -> Tensor:  # (B, T, C) -> (B, T)
        if self.norm is not None:
            h = self.norm(h + h[:, :1])  # (B, T, C) + (B, 1, C)
        return self.prediction(self.act(self.dense(h))).squeeze(-1)


class ElectraForPreTraining(Head):
    """The discriminator: the encoder (no pooler, as ELECTRA's) and the RTD head. `logits` (B, T);
    with `labels` (1 replaced, 0 original), the BCE over real tokens, averaged or summed."""

    hf_layout = "electra"  # saved as transformers' ElectraForPreTraining

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.encoder = BertModel(config, add_pooling_layer=False)
        self.rtd = ReplacedTokenHead(config)
        self._init_new(self.rtd)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False, reduction: str = "mean") -> HeadOutput:
        enc = self.encode(input_ids, attention_mask, token_type_ids, output_hidden_states)
        logits = self.rtd(enc.last_hidden_state)  # (B, T)
        loss = rtd_loss(logits, labels, attention_mask, reduction) if labels is not None else None
        return HeadOutput(logits, loss, enc.hidden_states)


@dataclass
class ElectraOutput:
    mlm_loss: Tensor  # the generator's cross-entropy at the masked positions (mean or sum)
    rtd_loss: Tensor  # the discriminator's BCE at the real tokens (mean or sum)
    mlm_logits: Tensor  # (N, V) at the masked positions, row-major
    rtd_logits: Tensor  # (B, T)
    replaced: Tensor  # (B, T) the discriminator's labels: 1 where its input is not the original


class DisentangledEmbeddings(nn.Module):
    """The discriminator's embeddings under gradient-disentangled sharing (He et al. 2023,
    DeBERTaV3): its token table is the generator's, stopped from receiving the discriminator's
    gradient, plus a table of its own that starts at zero, E_D = sg(E_G) + E_delta; positions,
    segments and the LayerNorm stay shared as ELECTRA shares them. The replaced-token loss then
    moves only E_delta, and the generator's masked-LM loss alone shapes E_G: no tug-of-war."""

    def __init__(self, shared: nn.Module):
        super().__init__()
        object.__setattr__(self, "shared", shared)  # not a submodule: the generator owns it, and saves it
        self.delta = nn.Parameter(torch.zeros_like(shared.word.weight))

    def table(self) -> Tensor:
        return self.shared.word.weight.detach() + self.delta  # (V_padded, E)

    def forward(self, input_ids: Tensor, positions: Tensor, token_type_ids: Tensor | None) -> Tensor:
        s = self.shared
        x = F.embedding(input_ids, self.table(), s.word.padding_idx)
        if s.position is not None:
            x = x + s.position(positions)
        if s.segment is not None:
            x = x + (s.segment.weight[0] if token_type_ids is None else s.segment(token_type_ids))
        return s.dropout(s.norm(x))


class ElectraPretraining(nn.Module):
    """The generator and the discriminator, sharing one embeddings module (or, `gdes`, the
    generator's token table through `DisentangledEmbeddings`); `forward` is one ELECTRA step's two
    losses. Saved as the discriminator's directory with the generator, less the shared tensors, in
    its `generator/` folder (a checkpoint of an ELECTRA run; with `gdes`, the generator whole and
    the discriminator's own table in `generator/embedding_delta.safetensors`)."""

    def __init__(self, discriminator: ElectraForPreTraining, generator_config: BertConfig, gdes: bool = False):
        super().__init__()
        self.config = discriminator.config  # the model the run trains: its shape, vocabulary, positions
        self.discriminator = discriminator
        self.generator = BertForMaskedLM(generator_config)
        self.generator.hf_layout = "electra"  # saved as ElectraForMaskedLM even where no projection forces it
        shared = discriminator.encoder.embeddings
        self.generator.encoder.embeddings = shared  # the same module: one set of tensors
        self.generator.mlm.word_embeddings = shared.word  # the generator's decoder stays tied to it
        self.gdes = False
        if gdes:
            self.disentangle()

    def disentangle(self) -> ElectraPretraining:
        """Switch to gradient-disentangled sharing: the discriminator reads sg(E_G) + E_delta."""
        if not self.gdes:
            self.discriminator.encoder.embeddings = DisentangledEmbeddings(self.generator.encoder.embeddings)
            self.gdes = True
        return self

    def merged_discriminator(self) -> ElectraForPreTraining:
        """The discriminator as transformers reads it: with gradient-disentangled sharing, a copy
        whose token table is E_G + E_delta; otherwise the discriminator itself."""
        if not self.gdes:
            return self.discriminator
        import copy

        plain = ElectraForPreTraining(self.discriminator.config)
        state = {k: v for k, v in self.discriminator.state_dict().items() if not k.endswith(".delta")}
        table = self.discriminator.encoder.embeddings
        embeddings = copy.deepcopy(table.shared)
        with torch.no_grad():
            embeddings.word.weight.copy_(table.table())
        plain.load_state_dict(state, strict=False)
        plain.encoder.embeddings = embeddings
        return plain

    @classmethod
    def new(cls, config: BertConfig, width: float, layers: int | None = None, gdes: bool = False) -> ElectraPretraining:
        return cls(ElectraForPreTraining(config), generator_config(config, width, layers), gdes)

    @classmethod
    def from_pretrained(cls, path) -> ElectraPretraining:
        """A pair written by `save_pretrained`, the shared embeddings tied again."""
        from safetensors.torch import load_file

        from bertkit.hf import layout_of, load_config, load_hf_state_dict
        from bertkit.weights import read_state_dict

        path = Path(path)
        delta = path / GENERATOR / DELTA
        model = cls(ElectraForPreTraining.from_pretrained(path), load_config(path / GENERATOR), gdes=delta.exists())
        family = layout_of(json.loads((path / GENERATOR / "config.json").read_text(encoding="utf-8")))
        load_hf_state_dict(model.generator, read_state_dict(path / GENERATOR), True, path / GENERATOR,
                           family, shared=() if model.gdes else _SHARED)
        if model.gdes:
            with torch.no_grad():
                model.discriminator.encoder.embeddings.delta.copy_(load_file(str(delta))["delta"])
        return model

    def save_pretrained(self, path, tokenizer=None) -> None:
        """The discriminator in `path` (transformers' ElectraForPreTraining layout, with the
        tokenizer), the generator without the embeddings it shares in `path/generator` (with
        `gdes`: the generator whole, and the discriminator's own token table beside it)."""
        from safetensors.torch import save_file

        from bertkit.io import atomic_path

        self.merged_discriminator().save_pretrained(path, tokenizer)
        self.generator.save_pretrained(Path(path) / GENERATOR, leave_out=() if self.gdes else _SHARED)
        if self.gdes:
            with atomic_path(Path(path) / GENERATOR / DELTA) as tmp:
                save_file({"delta": self.discriminator.encoder.embeddings.delta.detach().cpu().contiguous()}, str(tmp))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, uniforms=None,
                reduction: str = "sum") -> ElectraOutput:
        """`input_ids` masked (B, T); `labels` the original ids at the masked positions, -100
        elsewhere; `uniforms` (B, T) in [0, 1), the draw that picks each masked position's sample."""
        gen = self.generator(input_ids, attention_mask, token_type_ids, labels=labels, reduction=reduction)
        masked = (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)  # (N,), gen.logits' rows
        with torch.no_grad():  # no gradient reaches the generator through its samples
            samples = sample_tokens(gen.logits.detach(), uniforms.reshape(-1)[masked])
        corrupted, replaced = replace_tokens(input_ids, labels, samples)
        disc = self.discriminator(corrupted, attention_mask, token_type_ids, labels=replaced, reduction=reduction)
        return ElectraOutput(gen.loss, disc.loss, gen.logits, disc.logits, replaced)


def with_pooler(encoder: BertModel, seed: int) -> BertModel:
    """`encoder`'s weights in a BertModel with a pooler at BERT's initialisation, drawn from `seed`
    (the same pooler every time: a resumed run saves what the uninterrupted one saved)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertModel(encoder.config)  # a pooler where the family's models have one
    missing, unexpected = model.load_state_dict(encoder.state_dict(), strict=False)
    assert set(missing) <= {"pooler.weight", "pooler.bias"} and not unexpected, (missing, unexpected)
    return model
