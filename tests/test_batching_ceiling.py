"""bench/batching_ceiling.py: the FLOPs per text its ceiling divides by."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import batching_ceiling
from bertkit import BertConfig, BertModel

CONFIG = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64)


def test_linear_flops_are_what_torch_counts_in_the_encoder():
    # torch's counter sees the encoder's linear layers (not CPU attention, counted by hand below)
    model = BertModel(CONFIG, add_pooling_layer=False).eval()
    for L in (5, 11):
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(torch.randint(5, 50, (1, L)))
        assert batching_ceiling.linear_flops(CONFIG, L) == counter.get_total_flops()


def test_attention_flops_and_the_mean_over_texts():
    # one layer of 5 tokens, width 32: Q K^T and the weighted sum of V, 5 x 5 x 32 multiply-adds each
    assert batching_ceiling.attention_flops(CONFIG, 5) == 3 * 2 * (2 * 5 * 5 * 32)
    linear = [batching_ceiling.linear_flops(CONFIG, L) for L in (5, 11)]
    attention = [batching_ceiling.attention_flops(CONFIG, L) for L in (5, 11)]
    assert batching_ceiling.flops_per_text(CONFIG, [5, 11]) == (sum(linear) / 2, sum(attention) / 2)
