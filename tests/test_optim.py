"""AdamW parameter groups and the warm-up / linear-decay schedule."""

from __future__ import annotations

import pytest
import torch

from bertkit import BertConfig, BertForPreTraining
from bertkit.train.optim import build_optimizer, lr_at, param_groups, warmup_steps


def test_lr_at_warms_up_then_decays_linearly_to_zero():
    # total 10, warm-up 4, peak 1.0: (s+1)/4 for s < 4, then (10 - s)/6.
    got = [lr_at(s, 10, 4, 1.0) for s in range(11)]
    want = [0.25, 0.5, 0.75, 1.0, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0.0]
    assert got == pytest.approx(want, abs=1e-15)
    assert lr_at(12, 10, 4, 2e-4) == 0.0  # past the end it stays at zero
    assert lr_at(0, 10, 0, 3e-4) == 3e-4  # no warm-up: peak at once
    assert lr_at(3, 7, 7, 1.0) == pytest.approx(4 / 7)  # all warm-up


def test_lr_at_is_pure_and_rejects_empty_runs():
    assert lr_at(5, 100, 10, 1e-4) == lr_at(5, 100, 10, 1e-4)
    with pytest.raises(ValueError):
        lr_at(0, 0, 0, 1e-4)


def test_warmup_is_a_fraction_below_one_else_steps():
    assert warmup_steps(0.01, 1000) == 10
    assert warmup_steps(0.1, 37) == 4
    assert warmup_steps(25, 1000) == 25
    assert warmup_steps(0, 1000) == 0


def test_no_weight_decay_on_biases_and_layernorm():
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=16)
    model = BertForPreTraining(config)
    decay, no_decay = param_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    plain = {names[id(p)] for p in no_decay["params"]}
    assert all(n.endswith("weight") and "norm" not in n for n in decayed)
    assert all(n.endswith("bias") or "norm" in n for n in plain)
    assert "encoder.embeddings.word.weight" in decayed and "encoder.layers.0.qkv.weight" in decayed
    assert "encoder.embeddings.norm.weight" in plain and "mlm.bias" in plain and "nsp.bias" in plain
    # every parameter exactly once (the tied decoder is the word embedding, not a second copy)
    assert len(decayed) + len(plain) == len(list(model.parameters()))
    assert not decayed & plain


def test_optimizer_is_adamw_with_decoupled_decay():
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.LayerNorm(5))
    opt = build_optimizer(model, lr=1e-3, weight_decay=0.1)
    assert isinstance(opt, torch.optim.AdamW)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert [len(g["params"]) for g in opt.param_groups] == [1, 3]
