"""DeBERTa-v2/v3 beyond the family table's short batch (tests/test_families.py): relative positions
at bucket counts below and above the sequence length, the convolution of v2's first layer when that
layer is also the last, and the replaced-token detection head in DeBERTa-v3's own layout.

Each against transformers in fp32, from tiny random models built from a config (nothing from a hub).
The bucket indices are compared exactly; hidden states at real tokens within 1e-5.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from bertkit import BertConfig, BertForMaskedLM, BertModel
from bertkit.attention import relative_positions
from bertkit.electra import ElectraForPreTraining
from test_families import COMMON, V, assert_close, at_real, randomize

transformers = pytest.importorskip("transformers")

transformers.utils.logging.set_verbosity_error()
V3 = dict(COMMON, relative_attention=True, pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm",
          position_biased_input=False, type_vocab_size=0)
RTD_KEYS = {f"mask_predictions.{m}.{p}" for m in ("LayerNorm", "dense", "classifier") for p in ("weight", "bias")}


def _reference(kind: str = "Model", **changes):
    config = transformers.DebertaV2Config(**{**V3, **changes})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return randomize(getattr(transformers, "DebertaV2" + kind)(config), 0)


def _without_architectures(path) -> None:
    """config.json as the released v3 checkpoints have it: no `architectures` (a DebertaV2Model's
    would say the file holds a discriminator, whose head it lacks)."""
    config = json.loads((path / "config.json").read_text())
    config.pop("architectures")
    (path / "config.json").write_text(json.dumps(config))


def _batch(T: int, lengths: list[int], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (len(lengths), T) of those lengths and their mask."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    return torch.where(mask.bool(), torch.randint(5, V, (len(lengths), T), generator=g), 0), mask


@pytest.mark.parametrize("buckets", [4, 6, 16, 20, 64, 256])
@pytest.mark.parametrize("farthest", [-1, 48, 64])
def test_bucketed_distances_are_transformers_own(buckets, farthest):
    """Every query-key bucket of sequences of 9, 60 and 64 tokens, as transformers' encoder builds
    them: -1 reaching max_position_embeddings, and the fp32 logarithm's ceiling (20 buckets over 64
    positions put distance 63 in bucket 19, where fp64 gives 20)."""
    encoder = transformers.models.deberta_v2.modeling_deberta_v2.DebertaV2Encoder(
        transformers.DebertaV2Config(**{**V3, "num_hidden_layers": 1}, position_buckets=buckets,
                                     max_relative_positions=farthest))
    config = BertConfig(max_position_embeddings=64, relative_attention=True, position_buckets=buckets,
                        max_relative_positions=farthest)
    for L in (9, 60, 64):
        want = encoder.get_rel_pos(torch.zeros(1, L, 32))[0]
        got = relative_positions(L, config, "cpu")
        assert torch.equal(got, want), f"{buckets} buckets to {farthest}, L={L}: {(got != want).sum()} differ"


@pytest.mark.parametrize("buckets, farthest", [(8, -1), (16, -1), (20, 64), (16, 48), (128, -1)])
def test_long_padded_sequences_match_below_and_above_the_bucket_count(tmp_path, buckets, farthest):
    """Sequences of 64, 31, 7, 2 and 57 tokens (the issue's: 16 buckets, max_relative_positions -1,
    shared keys, a normalised table, both terms), every layer, padded and unpadded."""
    ref = _reference(position_buckets=buckets, max_relative_positions=farthest)
    ref.save_pretrained(tmp_path)
    ours = BertModel.from_pretrained(tmp_path).eval()
    ids, mask = _batch(64, [64, 31, 7, 2, 57])
    want = ref(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for unpad in (False, True):
        ours.unpad = unpad
        got = ours(ids, mask, output_hidden_states=True).hidden_states
        for i, (a, b) in enumerate(zip(got, want)):
            assert_close(at_real(a, mask), at_real(b, mask), f"{buckets} buckets, unpad={unpad}, layer {i}")


def test_convolution_when_the_first_layer_is_the_last(tmp_path):
    """One layer: the convolution runs on the last layer's selected rows (the masked-LM positions)."""
    ref = _reference("ForMaskedLM", num_hidden_layers=1, position_buckets=8, conv_kernel_size=5, conv_act="tanh")
    ref.save_pretrained(tmp_path)
    ours = BertForMaskedLM.from_pretrained(tmp_path).eval()
    assert ours.encoder.token_conv is not None and ours.config.conv_kernel_size == 5
    ids, mask = _batch(20, [20, 13, 3])
    labels = torch.where(mask.bool() & (torch.arange(20) % 3 == 0), ids, -100)
    a, b = ours(ids, mask, labels=labels), ref(input_ids=ids, attention_mask=mask, labels=labels)
    assert_close(a.logits, b.logits[labels != -100], "one-layer conv masked-LM logits")
    assert_close(a.loss, b.loss, "one-layer conv masked-LM loss")
    with pytest.raises(ValueError, match="conv_kernel_size must be odd"):
        BertConfig(conv_kernel_size=4)


def _deberta_rtd_logits(h: torch.Tensor, w: dict, eps: float) -> torch.Tensor:
    """DeBERTa-v3's LMMaskPredictionHead (microsoft/DeBERTa) from its tensors: (B, T, C) -> (B, T)."""
    x = F.layer_norm(h + h[:, :1], (h.shape[-1],), w["mask_predictions.LayerNorm.weight"],
                     w["mask_predictions.LayerNorm.bias"], eps)
    x = F.gelu(F.linear(x, w["mask_predictions.dense.weight"], w["mask_predictions.dense.bias"]))
    return F.linear(x, w["mask_predictions.classifier.weight"], w["mask_predictions.classifier.bias"]).squeeze(-1)


def test_a_saved_discriminator_is_deberta_v3s_layout_and_loads_in_transformers(tmp_path):
    """Saved as the released v3 discriminators are: DebertaV2Model (no key missing) plus DeBERTa's own
    head, whose six `mask_predictions` tensors are all transformers reports unexpected."""
    _reference(position_buckets=8).save_pretrained(tmp_path / "hf")
    _without_architectures(tmp_path / "hf")
    ours = ElectraForPreTraining.from_pretrained(tmp_path / "hf").eval()
    randomize(ours.rtd, 4)
    ours.save_pretrained(tmp_path / "ours")
    saved = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert saved["architectures"] == ["DebertaV2Model"] and saved["model_type"] == "deberta-v2"
    back, info = transformers.DebertaV2Model.from_pretrained(tmp_path / "ours", output_loading_info=True,
                                                             attn_implementation="eager")
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert set(info["unexpected_keys"]) == RTD_KEYS, info
    ids, mask = _batch(12, [12, 5, 9])
    h = back.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
    want = _deberta_rtd_logits(h, load_file(str(tmp_path / "ours" / "model.safetensors")), ours.config.layer_norm_eps)
    assert_close(at_real(ours(ids, mask).logits, mask), at_real(want, mask), "DeBERTa RTD logits")


def test_a_released_discriminator_head_loads_whole(tmp_path):
    """A directory laid out as microsoft/deberta-v3-*'s (`deberta.` + `mask_predictions` +
    `lm_predictions`, no architectures): every head tensor is used, none dropped as another head's."""
    _reference(position_buckets=8).save_pretrained(tmp_path)
    state = {"deberta." + k: v for k, v in load_file(str(tmp_path / "model.safetensors")).items()}
    g = torch.Generator().manual_seed(7)
    for key in sorted(RTD_KEYS) + ["lm_predictions.lm_head.dense.weight", "lm_predictions.lm_head.bias"]:
        shape = (1, 32) if "classifier.weight" in key else (1,) if "classifier.bias" in key else \
            (32, 32) if key.endswith("dense.weight") else (V,) if key.endswith("head.bias") else (32,)
        state[key] = torch.randn(shape, generator=g) * 0.5 + (1.0 if "LayerNorm.weight" in key else 0.0)
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    _without_architectures(tmp_path)
    ours = ElectraForPreTraining.from_pretrained(tmp_path).eval()
    assert not [k for k in ours.load_report["skipped"] + ours.load_report["initialized"] if "mask_pred" in k], \
        ours.load_report
    ids, mask = _batch(12, [12, 5, 9])
    h = ours.encoder(ids, mask).last_hidden_state
    want = _deberta_rtd_logits(h, state, ours.config.layer_norm_eps)
    assert_close(at_real(ours(ids, mask).logits, mask), at_real(want, mask), "released-layout RTD logits")
