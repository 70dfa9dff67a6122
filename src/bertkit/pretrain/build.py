"""What a run trains and what it leaves: the model and objective its options name, built new,
from `--init-from`'s directory or from a checkpoint, and the final model folders.

- mlm+nsp: `BertForPreTraining`; mlm and ltr: `BertForMaskedLM` (ltr with causal attention);
  RUN/model is that model's directory.
- electra: `bertkit.electra.ElectraPretraining`, the discriminator and a generator sharing its
  embeddings. RUN/model is the discriminator as a plain BERT (encoder and a pooler at BERT's
  initialisation, as ELECTRA trains none), which every other command takes; RUN/discriminator
  is transformers' ElectraForPreTraining (encoder and RTD head), RUN/generator its
  ElectraForMaskedLM (with the embeddings, and the vocabulary for fill-mask). Continued
  pretraining (`--init-from`) starts the discriminator from the directory's encoder and a new
  generator sharing its embeddings.
"""

from __future__ import annotations

from pathlib import Path

import torch

from bertkit.heads import BertForMaskedLM, BertForPreTraining
from bertkit.pretrain.init import initialise
from bertkit.pretrain.objective import ElectraObjective, Objective, derived_seed
from bertkit.pretrain.setup import TrainConfig, model_config
from bertkit.train.checkpoint import load_optimizer, write_model_copy
from bertkit.train.optim import build_optimizer

_POOLER_SEED = 3  # tag of the seed of an ELECTRA run's RUN/model pooler: derived_seed(seed, _POOLER_SEED)


def build_model(cfg: TrainConfig, manifest: dict, checkpoint, device: torch.device):
    """(the model on `device`, with the run's dropout; its AdamW, restored from `checkpoint`)."""
    if checkpoint is not None:
        model = _load(cfg, checkpoint.path)
    else:
        torch.manual_seed(cfg.seed)  # the same initial weights, or new heads, on every rank
        model = _electra(cfg, manifest) if cfg.objective == "electra" else _bert(cfg, manifest)
    model.to(device)
    if cfg.dropout is not None:
        from bertkit.pretrain.recipes import set_dropout

        set_dropout(model, cfg.dropout)
    optimizer = build_optimizer(model, cfg.lr, cfg.weight_decay, betas=(0.9, cfg.adam_beta2))
    if checkpoint is not None:
        load_optimizer(checkpoint, optimizer)
    return model, optimizer


def _head(cfg: TrainConfig) -> type:
    return BertForPreTraining if cfg.objective in ("mlm+nsp", "mlm+sop") else BertForMaskedLM


def _load(cfg: TrainConfig, path: Path):
    if cfg.objective == "electra":
        from bertkit.electra import ElectraPretraining

        return ElectraPretraining.from_pretrained(path)
    return _head(cfg).from_pretrained(path)


def _bert(cfg: TrainConfig, manifest: dict):
    if cfg.init_from:
        return bidirectional(_head(cfg).from_pretrained(cfg.init_from))
    return initialise(_head(cfg)(model_config(cfg, manifest)), cfg.init)


def bidirectional(model):
    """`model` reading both directions: a left-to-right (causal) model continued as a masked LM
    (causal-then-masked pretraining) keeps every weight and attends both ways from its first step."""
    if model.config.attention == "causal":
        config = model.config.replace(attention="bidirectional")
        for module in model.modules():
            if getattr(module, "config", None) is not None:
                module.config = config
        model.load_report = {**getattr(model, "load_report", {}), "was_causal": True}
    return model


def _electra(cfg: TrainConfig, manifest: dict):
    """A new discriminator (or --init-from's encoder with a new RTD head) and a new generator."""
    from bertkit.electra import ElectraForPreTraining, ElectraPretraining, default_width, generator_config

    if cfg.init_from:
        discriminator = bidirectional(ElectraForPreTraining.from_pretrained(cfg.init_from))
    else:
        discriminator = ElectraForPreTraining(model_config(cfg, manifest))
    config = discriminator.config
    width = cfg.generator_width or default_width(config.hidden_size)
    model = ElectraPretraining(discriminator, generator_config(config, width, cfg.generator_layers))
    if cfg.init_from:  # the generator keeps BERT's init: "scaled" would redraw the embeddings it shares
        model.load_report = discriminator.load_report
    else:  # the discriminator last: the shared embeddings are drawn at its width
        initialise(model.generator, cfg.init)
        initialise(model.discriminator, cfg.init)
    return model.disentangle() if cfg.embedding_sharing == "gdes" else model


def build_objective(cfg: TrainConfig, manifest: dict, tokenizer) -> Objective:
    if cfg.objective == "ltr":
        return Objective("ltr", None, cfg.seed)
    from bertkit.data import Masker, continuation_table

    masker = Masker(cfg.masking(), int(manifest["vocab_size"]), int(manifest["mask_id"]),
                    list(manifest["special_ids"]), continuation_table(tokenizer))
    if cfg.objective == "electra":
        return ElectraObjective(masker, cfg.seed, cfg.rtd_weight)
    return Objective(cfg.objective, masker, cfg.seed)


def generator_of(model):
    """The config of the generator an ELECTRA run trains beside its model, else None."""
    from bertkit.electra import ElectraPretraining

    return model.generator.config if isinstance(model, ElectraPretraining) else None


def save_final(model, cfg: TrainConfig, tokenizer, records: list[dict]) -> str:
    """The final model folder(s), each written atomically with its model card (from the run's
    metrics.jsonl `records`); what the last line names."""
    from bertkit.model_card import pretrain_card, render

    out = Path(cfg.out)
    if generator_of(model) is None:
        write_model_copy(model, out / "model", tokenizer, render(pretrain_card(cfg, records)))
        return f"model in {out / 'model'}"
    from bertkit.electra import with_pooler

    discriminator = model.merged_discriminator()  # with gradient-disentangled sharing, its table made whole
    bert = with_pooler(discriminator.encoder, derived_seed(cfg.seed, _POOLER_SEED))
    for name, part in (("model", bert), ("discriminator", discriminator), ("generator", model.generator)):
        write_model_copy(part, out / name, tokenizer, render(pretrain_card(cfg, records, name)))
    return f"model in {out / 'model'}, ELECTRA's discriminator and generator beside it"
