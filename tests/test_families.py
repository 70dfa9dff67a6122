"""Every family bertkit reads, against transformers' own classes, offline and in fp32.

For each family (RoBERTa, XLM-R, DistilBERT, ALBERT, DeBERTa-v2/v3, ModernBERT) a tiny random
transformers model at odd sizes, every bias and LayerNorm given a nonzero random value, is saved by
transformers and loaded by bertkit's `from_pretrained` (strict): every layer's hidden states, the
masked-LM, sequence- and token-classification and QA logits and losses, and every parameter's
gradient agree within 1e-5 at the real tokens of a right-padded batch of mixed lengths. Then the
other way: bertkit's save loads strictly in transformers' class with the same outputs.
Padding positions are not compared: RoBERTa gives them the padding row's position and DeBERTa
zeroes them, while bertkit leaves them as any token (nothing real attends to them).
"""

from __future__ import annotations

import pytest
import torch

import bertkit
from bertkit.hf import hf_names
from bertkit.model import BertModel

transformers = pytest.importorskip("transformers")
transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()

TOL = 1e-5
B, T, V = 13, 9, 99
COMMON = dict(vocab_size=V, hidden_size=32, num_attention_heads=4, intermediate_size=37, num_hidden_layers=3,
              max_position_embeddings=64, initializer_range=0.2)
# family -> (transformers config class, its arguments, transformers class prefix, takes token type ids)
FAMILIES = {
    "roberta": ("RobertaConfig", dict(COMMON, max_position_embeddings=66, pad_token_id=1, type_vocab_size=1),
                "Roberta", True),
    "xlm-roberta": ("XLMRobertaConfig", dict(COMMON, max_position_embeddings=66, pad_token_id=1,
                                             type_vocab_size=1), "XLMRoberta", True),
    "distilbert": ("DistilBertConfig", dict(vocab_size=V, dim=32, n_heads=4, hidden_dim=37, n_layers=3,
                                            max_position_embeddings=64, initializer_range=0.2), "DistilBert", False),
    "albert": ("AlbertConfig", dict(COMMON, embedding_size=16, num_hidden_groups=1, hidden_act="gelu_new"),
               "Albert", True),
    "albert-groups": ("AlbertConfig", dict(COMMON, num_hidden_layers=4, embedding_size=24, num_hidden_groups=2),
                      "Albert", True),
    "deberta-v3": ("DebertaV2Config", dict(COMMON, relative_attention=True, position_buckets=6,
                                           max_relative_positions=64, pos_att_type=["p2c", "c2p"],
                                           share_att_key=True, norm_rel_ebd="layer_norm",
                                           position_biased_input=False, type_vocab_size=0), "DebertaV2", True),
    "deberta-v2": ("DebertaV2Config", dict(COMMON, relative_attention=True, max_relative_positions=5,
                                           pos_att_type="c2p|p2c", share_att_key=False, position_biased_input=True,
                                           type_vocab_size=2, pooler_hidden_act="tanh"), "DebertaV2", True),
    # max_relative_positions unset (-1: max_position_embeddings), 4 buckets under the 9 tokens
    "deberta-v3-log": ("DebertaV2Config", dict(COMMON, relative_attention=True, position_buckets=4,
                                               pos_att_type=["p2c", "c2p"], share_att_key=True,
                                               norm_rel_ebd="layer_norm", position_biased_input=False,
                                               type_vocab_size=0), "DebertaV2", True),
    # v2-xlarge's shape: the convolution after the first layer, 16 buckets over the 9 tokens
    "deberta-v2-conv": ("DebertaV2Config", dict(COMMON, relative_attention=True, position_buckets=16,
                                                pos_att_type="p2c|c2p", share_att_key=True, norm_rel_ebd="layer_norm",
                                                position_biased_input=False, type_vocab_size=0, conv_kernel_size=3,
                                                conv_act="gelu", conv_groups=2), "DebertaV2", True),
    "modernbert": ("ModernBertConfig", dict(COMMON, num_hidden_layers=4, local_attention=4,
                                            global_attn_every_n_layers=3, pad_token_id=0, global_rope_theta=1000.0,
                                            local_rope_theta=50.0),
                   "ModernBert", False),
    "modernbert-biased": ("ModernBertConfig", dict(COMMON, local_attention=6, global_attn_every_n_layers=2,
                                                   pad_token_id=0, attention_bias=True, mlp_bias=True, norm_bias=True,
                                                   classifier_bias=True, classifier_pooling="mean",
                                                   hidden_activation="gelu_new"), "ModernBert", False),
}
HEADS = ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")


def assert_close(ours: torch.Tensor, ref: torch.Tensor, what: str, tol: float = TOL) -> None:
    assert ours.shape == ref.shape, f"{what}: shape {tuple(ours.shape)} vs transformers {tuple(ref.shape)}"
    diff = (ours.detach().double() - ref.detach().double()).abs()
    worst, mean = diff.max().item(), diff.mean().item()
    assert worst <= tol, f"{what}: max diff {worst:.3g} (mean {mean:.3g}) exceeds {tol:g}"


def randomize(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Nonzero biases, LayerNorm gains away from 1: a dropped bias or a swapped norm shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=g)
                if isinstance(module, torch.nn.LayerNorm) and name == "weight":
                    p.copy_(1.0 + 0.3 * noise)
                elif name == "bias":
                    p.copy_(0.3 * noise)
                else:
                    p.copy_(0.2 * noise)
    return model.eval()


def reference(family: str, kind: str, seed: int = 0, labels: int = 3):
    config_cls, kwargs, prefix, _ = FAMILIES[family]
    labels = 2 if kind == "ForQuestionAnswering" else labels
    config = getattr(transformers, config_cls)(**kwargs, num_labels=labels)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return randomize(getattr(transformers, prefix + kind)(config), seed)


def batch(family: str, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    lengths[0], lengths[1] = T, 2
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    pad = FAMILIES[family][1].get("pad_token_id", 0)
    ids = torch.where(mask.bool(), torch.randint(5, V, (B, T), generator=g), pad)
    out = {"input_ids": ids, "attention_mask": mask}
    if FAMILIES[family][3] and FAMILIES[family][1].get("type_vocab_size", 2) > 1:
        out["token_type_ids"] = torch.randint(0, 2, (B, T), generator=g) * mask
    return out


def at_real(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return x[mask.bool()]


def ours_of(ref, tmp_path, kind: str):
    ref.save_pretrained(tmp_path)
    return getattr(bertkit, "Bert" + kind).from_pretrained(tmp_path).eval()


def compare_grads(ours, ref) -> None:
    ref_params = dict(ref.named_parameters(remove_duplicate=False))  # a tied table under each of its names
    tied = {id(p) for p in ref_params.values()}
    covered = set()
    for name, p in ours.named_parameters():
        keys, _ = hf_names(ours, name)
        grads = [ref_params[k].grad for k in keys]
        if p.grad is None:  # outside this loss (a pooler): so it must be for transformers
            assert all(g is None or not g.any() for g in grads), f"{name}: no gradient here, but {keys} have one"
            covered.update(keys)
            continue
        assert all(g is not None for g in grads), f"transformers has no gradient for {keys}"
        grad = p.grad[: ours.config.vocab_size] if name.endswith(("embeddings.word.weight", "mlm.bias")) else p.grad
        assert_close(grad, torch.cat(grads, dim=0), f"gradient of {name} ({'/'.join(keys)})")
        covered.update(keys)
    covered_ids = {id(ref_params[k]) for k in covered}
    missing = {k for k in set(ref_params) - covered if id(ref_params[k]) not in covered_ids
               and ref_params[k].grad is not None and ref_params[k].grad.any()}
    assert tied
    assert not missing, f"transformers parameters not compared: {missing}"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_encoder_hidden_states_and_gradients(tmp_path, family):
    ref = reference(family, "Model")
    ours = ours_of(ref, tmp_path, "Model")
    assert ours.config.model_type == FAMILIES[family][2].lower().replace("xlmroberta", "xlm-roberta").replace(
        "debertav2", "deberta-v2")
    inputs = batch(family)
    mask = inputs["attention_mask"]
    a = ours(**inputs, output_hidden_states=True)
    b = ref(**inputs, output_hidden_states=True)
    assert len(a.hidden_states) == len(b.hidden_states)
    for i, (x, y) in enumerate(zip(a.hidden_states, b.hidden_states)):
        assert_close(at_real(x, mask), at_real(y, mask), f"{family} hidden states {i}")
    assert_close(at_real(a.last_hidden_state, mask), at_real(b.last_hidden_state, mask), f"{family} last state")
    w = torch.randn(B, T, 32, generator=torch.Generator().manual_seed(2)) * mask[..., None]
    for out in (a, b):
        (out.last_hidden_state * w).sum(-1).mean().backward()
    compare_grads(ours, ref)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("kind", HEADS[1:])
def test_heads_logits_losses_and_gradients(tmp_path, family, kind):
    ref = reference(family, kind)
    ours = ours_of(ref, tmp_path, kind)
    inputs = batch(family)
    if kind == "ForQuestionAnswering":  # the span softmax runs over padding too, where families differ
        inputs["attention_mask"] = torch.ones_like(inputs["attention_mask"])
        inputs["input_ids"] = torch.where(inputs["input_ids"] == FAMILIES[family][1].get("pad_token_id", 0), 7,
                                          inputs["input_ids"])
    mask = inputs["attention_mask"]
    g = torch.Generator().manual_seed(3)
    if kind == "ForSequenceClassification":
        labels = {"labels": torch.randint(0, 3, (B,), generator=g)}
    elif kind == "ForQuestionAnswering":  # answers inside the real tokens
        lengths = mask.sum(1)
        labels = {"start_positions": (torch.rand(B, generator=g) * lengths).long(),
                  "end_positions": (torch.rand(B, generator=g) * lengths).long()}
    else:
        n = V if kind == "ForMaskedLM" else 3
        pick = (torch.rand(B, T, generator=g) < 0.4) & mask.bool()
        pick[0, 0] = True
        labels = {"labels": torch.where(pick, torch.randint(0, n, (B, T), generator=g), -100)}
    a = ours(**inputs, **labels)
    b = ref(**inputs, **labels)
    if kind == "ForMaskedLM":  # ours: logits at the labelled positions only
        assert_close(a.logits, b.logits[labels["labels"] != -100], f"{family} masked-LM logits")
    elif kind == "ForQuestionAnswering":
        assert_close(at_real(a.start_logits, mask), at_real(b.start_logits, mask), f"{family} start logits")
        assert_close(at_real(a.end_logits, mask), at_real(b.end_logits, mask), f"{family} end logits")
    elif kind == "ForTokenClassification":
        assert_close(at_real(a.logits, mask), at_real(b.logits, mask), f"{family} token logits")
    else:
        assert_close(a.logits, b.logits, f"{family} sequence logits")
    assert_close(a.loss, b.loss, f"{family} loss")
    a.loss.backward()
    b.loss.backward()
    compare_grads(ours, ref)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("kind", HEADS)
def test_bertkit_save_loads_strictly_in_transformers(tmp_path, family, kind):
    ref = reference(family, kind)
    ours = ours_of(ref, tmp_path / "hf", kind)
    ours.save_pretrained(tmp_path / "ours")
    cls = getattr(transformers, FAMILIES[family][2] + kind)
    back, info = cls.from_pretrained(tmp_path / "ours", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    back.eval()
    inputs = batch(family)
    out, want = back(**inputs), ref(**inputs)
    first = "last_hidden_state" if kind == "Model" else ("start_logits" if kind == "ForQuestionAnswering" else "logits")
    if kind == "ForSequenceClassification":
        assert_close(getattr(out, first), getattr(want, first), f"{family} reloaded {kind}")
    else:
        mask = inputs["attention_mask"]
        assert_close(at_real(getattr(out, first), mask), at_real(getattr(want, first), mask),
                     f"{family} reloaded {kind}")


@pytest.mark.parametrize("family", ["roberta", "deberta-v3", "deberta-v3-log", "deberta-v2-conv", "modernbert",
                                    "albert"])
def test_unpadded_path_equals_padded(tmp_path, family):
    ours = ours_of(reference(family, "Model"), tmp_path, "Model")
    inputs = batch(family)
    mask = inputs["attention_mask"]
    padded = ours(**inputs).last_hidden_state
    ours.unpad = True
    packed = ours(**inputs).last_hidden_state
    assert_close(at_real(packed, mask), at_real(padded, mask), f"{family} unpadded")


def test_albert_layers_share_one_tensor_per_role(tmp_path):
    ours = ours_of(reference("albert", "Model"), tmp_path, "Model")
    assert isinstance(ours, BertModel) and len(ours.layers) == 1 and ours.config.num_hidden_layers == 3
    assert ours.layer_at(0) is ours.layer_at(2)


def test_modernbert_long_inputs_take_the_blocked_local_path_and_equal_transformers(tmp_path):
    """Past 8 half-windows a local layer attends block by block (`attention.local_blocks`): the same
    numbers as transformers' full masked product, padded and unpadded."""
    ref = reference("modernbert", "Model")  # local_attention 4: blocks from 17 tokens on
    ours = ours_of(ref, tmp_path, "Model")
    g = torch.Generator().manual_seed(5)
    lengths = torch.tensor([40, 23, 31])
    mask = (torch.arange(40)[None] < lengths[:, None]).long()
    ids = torch.where(mask.bool(), torch.randint(5, V, (3, 40), generator=g), 0)
    want = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    for unpad in (False, True):
        ours.unpad = unpad
        got = ours(ids, mask).last_hidden_state
        assert_close(at_real(got, mask), at_real(want, mask), f"modernbert at 40 tokens, unpad={unpad}")
