"""Numerical parity with transformers' BERT, offline and in fp32.

Each test builds a tiny random transformers model at odd sizes, gives every bias and LayerNorm a
nonzero random value (so a dropped bias or a swapped LayerNorm shows), saves it with
transformers' `save_pretrained`, loads it with our `from_pretrained` (the real converter, strict),
and compares every layer's hidden states, the pooler, each head's logits and loss, and every
parameter's gradient, on a right-padded batch of mixed lengths and with no attention mask.
transformers runs its "eager" attention, the reference additive dtype-minimum mask.
"""

from __future__ import annotations

import math

import pytest
import torch

import bertkit
from bertkit.hf import hf_names

transformers = pytest.importorskip("transformers")
transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()

TOL = 1e-5
B, T, V = 13, 7, 99



def assert_close(ours: torch.Tensor, ref: torch.Tensor, what: str, tol: float = TOL) -> None:
    """Shapes equal and max |ours - ref| <= tol; the message reports max and mean difference."""
    assert ours.shape == ref.shape, f"{what}: shape {tuple(ours.shape)} vs transformers {tuple(ref.shape)}"
    diff = (ours.detach().double() - ref.detach().double()).abs()
    worst, mean = diff.max().item(), diff.mean().item()
    assert worst <= tol, f"{what}: max diff {worst:.3g} (mean {mean:.3g}) exceeds {tol:g}"


def hf_config(**changes):
    """Odd tiny sizes; initializer_range 0.2 puts GELU inputs and attention scores near 1, where
    exact and approximate GELU, or a wrong softmax scale, differ well beyond the tolerance."""
    kw = dict(vocab_size=V, hidden_size=32, num_attention_heads=4, intermediate_size=37, num_hidden_layers=2,
              max_position_embeddings=64, initializer_range=0.2, attn_implementation="eager")
    kw.update(changes)
    return transformers.BertConfig(**kw)


def randomize(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Nonzero biases, LayerNorm gains away from 1, a nonzero [PAD] row."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.3 * noise)
            elif name.endswith("bias"):
                p.copy_(0.3 * noise)
            else:
                p.copy_(0.2 * noise)
    return model.eval()


def make_batch(seed: int = 0, padded: bool = True) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0], lengths[1] = T, 1  # the longest and the shortest possible
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()  # (B, T), right padding
    ids = torch.randint(5, V, (B, T), generator=g)
    batch = {"input_ids": ids * mask if padded else ids,
             "token_type_ids": torch.randint(0, 2, (B, T), generator=g) * (mask if padded else 1)}
    if padded:
        batch["attention_mask"] = mask
    return batch


def token_labels(batch, n_classes: int, seed: int, rate: float = 0.4) -> torch.Tensor:
    """Labels at a random subset of real tokens, -100 elsewhere (at least one labelled)."""
    g = torch.Generator().manual_seed(seed)
    real = batch.get("attention_mask", torch.ones(B, T, dtype=torch.long)).bool()
    pick = (torch.rand(B, T, generator=g) < rate) & real
    pick[0, 0] = True
    return torch.where(pick, torch.randint(0, n_classes, (B, T), generator=g), torch.full((B, T), -100))


def load_pair(tmp_path, hf_cls_name: str, seed: int = 0, **config_changes):
    """A random transformers model saved to disk, and our model of the same name loaded from it."""
    torch.manual_seed(seed)
    ref = randomize(getattr(transformers, hf_cls_name)(hf_config(**config_changes)), seed)
    ref.save_pretrained(tmp_path)
    ours = getattr(bertkit, hf_cls_name).from_pretrained(tmp_path).eval()
    return ours, ref


def compare_hidden(ours_states, ref_states) -> None:
    assert len(ours_states) == len(ref_states)
    for i, (a, b) in enumerate(zip(ours_states, ref_states)):
        assert_close(a, b, "embeddings" if i == 0 else f"layer {i} hidden states")


def compare_grads(ours: torch.nn.Module, ref: torch.nn.Module) -> None:
    """Every one of our parameters' gradient against the HF parameter(s) it came from."""
    ref_params = dict(ref.named_parameters())
    vocab = ours.config.vocab_size
    covered: set[str] = set()
    for name, p in ours.named_parameters():
        keys, _ = hf_names(ours, name)
        ref_grads = [ref_params[k].grad for k in keys]
        assert all(g is not None for g in ref_grads), f"transformers has no gradient for {keys}"
        ref_grad = torch.cat(ref_grads, dim=0)  # fused q|k|v == HF's three concatenated
        grad = p.grad
        if name.endswith(("embeddings.word.weight", "mlm.bias")):
            assert not grad[vocab:].any(), f"{name}: gradient reached the vocabulary padding rows"
            grad = grad[:vocab]
        assert_close(grad, ref_grad, f"gradient of {name} ({'/'.join(keys)})")
        covered.update(keys)
    assert covered == set(ref_params), f"transformers parameters not compared: {set(ref_params) - covered}"


def _run_both(ours, ref, batch, **labels):
    ours.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)
    a = ours(**batch, **labels, output_hidden_states=True)
    b = ref(**batch, **labels, output_hidden_states=True)
    return a, b


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "no-mask"])
def test_bert_model(tmp_path, padded):
    ours, ref = load_pair(tmp_path, "BertModel", num_hidden_layers=3)
    batch = make_batch(1, padded)
    a, b = _run_both(ours, ref, batch)
    compare_hidden(a.hidden_states, b.hidden_states)
    assert_close(a.last_hidden_state, b.last_hidden_state, "last hidden state")
    assert_close(a.pooler_output, b.pooler_output, "pooler output")
    # A loss that weighs every position and the pooler differently, so each gradient is distinct;
    # a mean, as real losses are, keeps gradients O(1) so 1e-5 is a relative test too.
    w = torch.randn(B, T, 32, generator=torch.Generator().manual_seed(2))
    for out in (a, b):
        ((out.last_hidden_state * w).sum(-1).mean() + out.pooler_output.pow(2).sum(-1).mean()).backward()
    compare_grads(ours, ref)


def test_causal_attention(tmp_path):
    """Our attention="causal" is transformers' BertModel with is_decoder=True."""
    ours, ref = load_pair(tmp_path, "BertModel", is_decoder=True, use_cache=False)
    assert ours.config.attention == "causal"
    for padded in (True, False):
        batch = make_batch(3, padded)
        a, b = _run_both(ours, ref, batch)
        compare_hidden(a.hidden_states, b.hidden_states)
        assert_close(a.pooler_output, b.pooler_output, "pooler output")
        w = torch.randn(B, T, 32, generator=torch.Generator().manual_seed(4))
        for out in (a, b):
            ((out.last_hidden_state * w).sum(-1).mean() + out.pooler_output.pow(2).sum(-1).mean()).backward()
        compare_grads(ours, ref)
    # Causality itself: a change at the last position leaves every earlier position unchanged.
    ids = make_batch(5, padded=False)["input_ids"]
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % V
    with torch.no_grad():
        h1, h2 = ours(ids).last_hidden_state, ours(changed).last_hidden_state
    assert torch.equal(h1[:, :-1], h2[:, :-1])
    assert not torch.equal(h1[:, -1], h2[:, -1])


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "no-mask"])
def test_pretraining(tmp_path, padded):
    ours, ref = load_pair(tmp_path, "BertForPreTraining")
    assert ours.mlm.word_embeddings.weight is ours.encoder.embeddings.word.weight, "MLM decoder is not tied"
    batch = make_batch(6, padded)
    labels = token_labels(batch, V, seed=7)
    nsp = torch.randint(0, 2, (B,), generator=torch.Generator().manual_seed(8))
    a, b = _run_both(ours, ref, batch, labels=labels, next_sentence_label=nsp)
    compare_hidden(a.hidden_states, b.hidden_states)
    assert_close(a.pooler_output, ref.bert.pooler(b.hidden_states[-1]), "pooler output")
    # Our MLM logits exist only at labelled positions, in row-major order.
    assert_close(a.logits, b.prediction_logits[labels != -100], "MLM logits at labelled positions")
    assert_close(a.seq_relationship_logits, b.seq_relationship_logits, "NSP logits")
    assert_close(a.loss, b.loss, "MLM + NSP loss")
    a.loss.backward()
    b.loss.backward()
    compare_grads(ours, ref)
    with torch.no_grad():  # without labels, logits cover every position
        full = ours(**batch).logits
    assert_close(full, b.prediction_logits, "MLM logits, all positions")


def test_masked_lm(tmp_path):
    ours, ref = load_pair(tmp_path, "BertForMaskedLM", seed=1)
    assert ours.mlm.word_embeddings.weight is ours.encoder.embeddings.word.weight, "MLM decoder is not tied"
    for padded in (True, False):
        batch = make_batch(9, padded)
        labels = token_labels(batch, V, seed=10)
        a, b = _run_both(ours, ref, batch, labels=labels)
        compare_hidden(a.hidden_states, b.hidden_states)
        assert_close(a.logits, b.logits[labels != -100], "MLM logits at labelled positions")
        assert_close(a.loss, b.loss, "MLM loss")
        a.loss.backward()
        b.loss.backward()
        compare_grads(ours, ref)


@pytest.mark.parametrize("num_labels", [1, 3], ids=["regression", "3-classes"])
def test_sequence_classification(tmp_path, num_labels):
    ours, ref = load_pair(tmp_path, "BertForSequenceClassification", seed=2, num_labels=num_labels)
    assert ours.config.num_labels == num_labels
    g = torch.Generator().manual_seed(11)
    labels = torch.randn(B, generator=g) if num_labels == 1 else torch.randint(0, num_labels, (B,), generator=g)
    for padded in (True, False):
        batch = make_batch(12, padded)
        a, b = _run_both(ours, ref, batch, labels=labels)
        compare_hidden(a.hidden_states, b.hidden_states)
        assert_close(a.pooler_output, ref.bert.pooler(b.hidden_states[-1]), "pooler output")
        assert_close(a.logits, b.logits, "classifier logits")
        assert_close(a.loss, b.loss, "MSE loss" if num_labels == 1 else "cross-entropy loss")
        a.loss.backward()
        b.loss.backward()
        compare_grads(ours, ref)


def test_token_classification(tmp_path):
    ours, ref = load_pair(tmp_path, "BertForTokenClassification", seed=3, num_labels=5)
    for padded in (True, False):
        batch = make_batch(13, padded)
        labels = token_labels(batch, 5, seed=14, rate=0.8)
        a, b = _run_both(ours, ref, batch, labels=labels)
        compare_hidden(a.hidden_states, b.hidden_states)
        assert_close(a.logits, b.logits, "token logits")
        assert_close(a.loss, b.loss, "token cross-entropy")
        a.loss.backward()
        b.loss.backward()
        compare_grads(ours, ref)


def test_question_answering(tmp_path):
    ours, ref = load_pair(tmp_path, "BertForQuestionAnswering", seed=4)
    g = torch.Generator().manual_seed(15)
    start = torch.randint(0, T, (B,), generator=g)
    end = torch.randint(0, T, (B,), generator=g)
    start[2], end[3] = T + 5, 40  # outside the sequence: clamped and ignored, as transformers does
    for padded in (True, False):
        batch = make_batch(16, padded)
        a, b = _run_both(ours, ref, batch, start_positions=start, end_positions=end)
        compare_hidden(a.hidden_states, b.hidden_states)
        assert_close(a.start_logits, b.start_logits, "start logits")
        assert_close(a.end_logits, b.end_logits, "end logits")
        assert_close(a.loss, b.loss, "span loss")
        a.loss.backward()
        b.loss.backward()
        compare_grads(ours, ref)


def test_silent_details_are_pinned(tmp_path):
    """The details that change numbers only a little: erf GELU, eps 1e-12, tied decoder + own bias."""
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    exact = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    gelu = bertkit.model.ACTIVATIONS["gelu"]
    assert_close(gelu(x), exact, "gelu vs erf formula", tol=1e-12)
    assert (gelu(x) - torch.nn.functional.gelu(x, approximate="tanh")).abs().max() > 1e-4
    assert bertkit.BertConfig().layer_norm_eps == 1e-12
    ours, ref = load_pair(tmp_path, "BertForPreTraining", seed=5)
    norms = [m for m in ours.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * 2 + 2 and all(m.eps == 1e-12 for m in norms)
    assert ours.mlm.word_embeddings.weight is ours.encoder.embeddings.word.weight
    # The decoder's bias is its own parameter, loaded from transformers' (nonzero) cls.predictions.bias.
    assert_close(ours.mlm.bias[:V], ref.cls.predictions.bias, "MLM bias", tol=0)
    assert ours.mlm.bias.abs().sum() > 0
    assert ours.config.hidden_act == "gelu" and ref.config.hidden_act == "gelu"


def test_minilm_matches_transformers(minilm_dir):
    """The real all-MiniLM-L6-v2 checkpoint: last hidden states on real sentences, padded batch."""
    sentences = [
        "The cat sat on the mat.",
        "A man is playing a guitar on a small stage in front of a quiet crowd.",
        "Hello!",
        "Stock markets fell sharply on Tuesday after the central bank raised interest rates again.",
        "Where is the nearest train station?",
        "Photosynthesis converts light energy into chemical energy stored in glucose.",
        "I love it.",
        "She didn't expect the results to be so different from last year's experiment, but they were.",
    ]
    tok = bertkit.Tokenizer.from_pretrained(minilm_dir)
    enc = tok.encode_batch(sentences, padding=True)
    batch = {k: torch.tensor([getattr(e, f) for e in enc]) for k, f in
             (("input_ids", "ids"), ("attention_mask", "attention_mask"), ("token_type_ids", "type_ids"))}
    lengths = batch["attention_mask"].sum(1)
    assert lengths.min() < lengths.max() == batch["input_ids"].shape[1]
    ours = bertkit.BertModel.from_pretrained(minilm_dir).eval()
    ref = transformers.BertModel.from_pretrained(minilm_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        a, b = ours(**batch), ref(**batch)
    real = batch["attention_mask"].bool()
    assert_close(a.last_hidden_state[real], b.last_hidden_state[real], "MiniLM last hidden state, real tokens")
    # Padding positions' outputs are never used; there even transformers' own sdpa and eager paths
    # differ by ~2e-5 on these |h| ~ 10 activations.
    assert_close(a.last_hidden_state, b.last_hidden_state, "MiniLM last hidden state, with padding", tol=1e-4)
    assert_close(a.pooler_output, b.pooler_output, "MiniLM pooler output")
