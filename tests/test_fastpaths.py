"""Each fast path against the plain computation it replaces.

Sparse MLM logits vs dense, fused QKV through save/load, SDPA vs explicit softmax attention,
unpadded vs padded encoder, graph-break-free capture by torch.compile, fused AdamW on CUDA,
the internally padded vocabulary, device-agnostic masking, int8 dynamic quantization, and the
benchmark's FLOP accounting and CLI.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from bertkit import BertConfig, BertForPreTraining, BertForSequenceClassification, BertModel
from bertkit.model import attention_mask_for_sdpa, set_unpadding

B, T = 13, 7
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def tiny(**changes) -> BertConfig:
    return BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=37, max_position_embeddings=16, **changes)


def report(a: torch.Tensor, b: torch.Tensor) -> str:
    d = (a.float() - b.float()).abs()
    return f"max {d.max().item():.2e} mean {d.mean().item():.2e}"


def ragged_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (B, T), generator=g)
    lengths = torch.tensor([7, 1, 3, 7, 5, 2, 6, 4, 7, 3, 3, 1, 6])  # (B,): full, single-token, repeats
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    ids = ids * mask  # [PAD] = 0 after each sequence
    segments = ((torch.arange(T)[None, :] >= (lengths[:, None] + 1) // 2) & mask.bool()).long()
    return ids, mask, segments


# ---- MLM logits only at labelled positions ----

def test_sparse_mlm_logits_equal_dense_loss_and_grads():
    torch.manual_seed(0)
    sparse = BertForPreTraining(tiny(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    dense = copy.deepcopy(sparse)
    ids, mask, segments = ragged_batch()
    labels = torch.full_like(ids, -100)
    labels[::2, 0] = 17
    labels[1::3, 2] = 42
    out = sparse(ids, mask, segments, labels=labels)
    assert out.logits.shape == (int((labels != -100).sum()), 99)
    full = dense(ids, mask, segments).logits  # (B, T, V)
    dense_loss = F.cross_entropy(full.reshape(-1, 99), labels.reshape(-1), ignore_index=-100)
    assert torch.allclose(out.loss, dense_loss, atol=1e-6), report(out.loss, dense_loss)
    # labels without hidden states also skip the last layer's work away from labelled rows and [CLS]
    whole = dense(ids, mask, segments, labels=labels, output_hidden_states=True)
    assert torch.allclose(out.logits, whole.logits, atol=1e-6), report(out.logits, whole.logits)
    assert torch.allclose(out.pooler_output, whole.pooler_output, atol=1e-6)
    out.loss.backward()
    dense_loss.backward()
    for (name, p), q in zip(sparse.named_parameters(), dense.parameters()):
        if p.grad is None:  # pooler and NSP: no next-sentence label, no gradient in either
            assert q.grad is None and name.startswith(("nsp.", "encoder.pooler."))
            continue
        assert torch.allclose(p.grad, q.grad, atol=1e-6), f"{name}: {report(p.grad, q.grad)}"


# ---- fused QKV ----

def test_fused_qkv_survives_save_and_load(tmp_path):
    torch.manual_seed(1)
    model = BertModel(tiny()).eval()
    model.save_pretrained(tmp_path)
    loaded = BertModel.from_pretrained(tmp_path).eval()
    for a, b in zip(model.layers, loaded.layers):
        assert torch.equal(a.qkv.weight, b.qkv.weight) and torch.equal(a.qkv.bias, b.qkv.bias)
    ids, mask, _ = ragged_batch()
    assert torch.equal(model(ids, mask).last_hidden_state, loaded(ids, mask).last_hidden_state)


# ---- SDPA with the mask layout it needs ----

def explicit_attention(q, k, v, keep):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    if keep is not None:
        scores = scores + torch.where(keep, 0.0, torch.finfo(scores.dtype).min)
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_equals_explicit_softmax_attention(causal):
    torch.manual_seed(2)
    q, k, v = torch.randn(3, B, 4, T, 8).unbind(0)  # 3 x (B, H, T, D)
    _, mask, _ = ragged_batch()
    for attention_mask in (None, mask):
        keep, is_causal = attention_mask_for_sdpa(attention_mask, T, causal)
        if attention_mask is None:
            assert keep is None and is_causal == causal  # no mask: flash / efficient kernels allowed
        else:
            assert keep.dtype == torch.bool and keep.shape == ((B, 1, T, T) if causal else (B, 1, 1, T))
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=is_causal)
        want_keep = keep if not is_causal else torch.ones(T, T, dtype=torch.bool).tril()
        want = explicit_attention(q, k, v, want_keep)
        assert torch.allclose(got, want, atol=1e-6), report(got, want)


def test_all_ones_mask_and_no_mask_give_the_same_encoder_output():
    torch.manual_seed(3)
    model = BertModel(tiny()).eval()
    ids = torch.randint(5, 99, (B, T))
    a = model(ids).last_hidden_state
    b = model(ids, torch.ones(B, T, dtype=torch.long)).last_hidden_state
    assert torch.allclose(a, b, atol=1e-6), report(a, b)


# ---- unpadding ----

def forward_unpadded(model, ids, mask, segments, output_hidden_states=False):
    """`model`'s unpadded path (unpad=True) on the same weights; the flag is restored after."""
    model.unpad = True
    try:
        return model(ids, mask, segments, output_hidden_states=output_hidden_states)
    finally:
        model.unpad = False


@pytest.mark.parametrize("attention", ["bidirectional", "causal"])
def test_unpadded_encoder_equals_padded_at_real_tokens(attention):
    torch.manual_seed(4)
    model = BertModel(tiny(attention=attention)).eval()
    ids, mask, segments = ragged_batch()
    padded = model(ids, mask, segments, output_hidden_states=True)
    packed = forward_unpadded(model, ids, mask, segments, output_hidden_states=True)
    real = mask.bool()
    for i, (a, b) in enumerate(zip(padded.hidden_states, packed.hidden_states)):
        assert torch.allclose(a[real], b[real], atol=1e-5), f"layer {i}: {report(a[real], b[real])}"
    assert torch.allclose(padded.pooler_output, packed.pooler_output, atol=1e-5)
    assert packed.last_hidden_state[~real].abs().max() == 0  # zeros at padding


def test_unpad_flag_on_heads_gives_same_logits_and_grads():
    torch.manual_seed(5)
    plain = BertForSequenceClassification(tiny(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    fast = set_unpadding(copy.deepcopy(plain))
    assert fast.encoder.unpad and not plain.encoder.unpad
    ids, mask, segments = ragged_batch()
    labels = torch.arange(B) % 2
    a, b = plain(ids, mask, segments, labels=labels), fast(ids, mask, segments, labels=labels)
    assert torch.allclose(a.logits, b.logits, atol=1e-5), report(a.logits, b.logits)
    a.loss.backward()
    b.loss.backward()
    for (name, p), q in zip(plain.named_parameters(), fast.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5), f"{name}: {report(p.grad, q.grad)}"


@CUDA
def test_unpadded_encoder_on_cuda_fp32_and_bf16_varlen_kernel():
    from bertkit.model import _varlen_kernel

    torch.manual_seed(9)
    model = BertModel(tiny()).cuda().eval()
    ids, mask, segments = (t.cuda() for t in ragged_batch())
    real = mask.bool()
    with torch.no_grad():
        a = model(ids, mask, segments).last_hidden_state
        b = forward_unpadded(model, ids, mask, segments).last_hidden_state  # fp32: per-length SDPA
        assert torch.allclose(a[real], b[real], atol=1e-5), report(a[real], b[real])
        if _varlen_kernel(torch.zeros(1, device="cuda", dtype=torch.bfloat16), 0.0) is None:
            pytest.skip(f"torch {torch.__version__} has no torch.nn.attention.varlen")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            a = model(ids, mask, segments).last_hidden_state
            b = forward_unpadded(model, ids, mask, segments).last_hidden_state  # flash varlen
    assert torch.allclose(a[real].float(), b[real].float(), atol=5e-2), report(a[real], b[real])


# ---- torch.compile, per block ----

def test_compiled_blocks_train_like_eager_as_the_labelled_count_changes():
    """`pretrain --compile` compiles each block (the gather of labelled rows stays eager): the
    loss and every gradient equal eager's over steps whose number of labelled positions differs,
    and the parameter names (the checkpoint keys) are unchanged. aot_eager runs dynamo and AOT
    autograd, the parts that break on data-dependent shapes, without a C++ compiler."""
    import copy

    from bertkit.train.compile import compile_blocks

    torch.manual_seed(6)
    eager = BertForPreTraining(tiny()).eval()  # dropout off: both must compute the same thing
    compiled = compile_blocks(copy.deepcopy(eager), backend="aot_eager")
    assert [k for k, _ in compiled.named_parameters()] == [k for k, _ in eager.named_parameters()]
    ids, mask, segments = ragged_batch()
    torch._dynamo.reset()
    for rate in (0.3, 0.15, 0.5):  # a different N of labelled rows each step
        labels = torch.where(torch.rand(B, T) < rate, ids, torch.full_like(ids, -100))
        labels[0, 0] = 7
        losses = []
        for m in (eager, compiled):
            m.zero_grad(set_to_none=True)
            loss = m(ids, mask, segments, labels=labels, next_sentence_label=torch.arange(B) % 2).loss
            loss.backward()
            losses.append(loss)
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
        for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
            if p.grad is not None:
                torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


# ---- fused AdamW ----

def test_fused_adamw_on_cpu_equals_the_plain_loop():
    from bertkit.train.optim import build_optimizer, param_groups

    torch.manual_seed(0)
    fused_model = BertModel(tiny())
    plain_model = BertModel(tiny())
    plain_model.load_state_dict(fused_model.state_dict())
    fused = build_optimizer(fused_model, lr=1e-3, weight_decay=0.01)
    plain = torch.optim.AdamW(param_groups(plain_model, 0.01), lr=1e-3, eps=1e-6, weight_decay=0.01,
                              foreach=False)
    assert fused.defaults["fused"] is True
    ids = torch.randint(0, tiny().vocab_size, (3, 7))
    for _ in range(3):
        # Both optimizers get the very same gradients, so only the update rule is compared.
        fused_model(ids).last_hidden_state.square().mean().backward()
        for p, q in zip(fused_model.parameters(), plain_model.parameters()):
            q.grad = None if p.grad is None else p.grad.clone()
        fused.step()
        plain.step()
        fused.zero_grad()
        plain.zero_grad()
    for (name, a), b in zip(fused_model.state_dict().items(), plain_model.state_dict().values()):
        diff = (a - b).abs().max().item()
        assert diff < 1e-6, f"{name}: max abs diff {diff:.2e}"


@CUDA
def test_adamw_fused_on_cuda():
    from bertkit.train.optim import build_optimizer

    optimizer = build_optimizer(BertModel(tiny()).cuda(), lr=1e-4, weight_decay=0.01)
    assert optimizer.defaults["fused"] is True


# ---- vocabulary padded to a multiple of 64 ----

def test_padded_vocabulary_is_internal_only(tmp_path):
    from safetensors.torch import load_file

    torch.manual_seed(7)
    model = BertForPreTraining(tiny()).eval()
    assert model.encoder.embeddings.word.weight.shape[0] == 128 and model.config.vocab_size == 99
    ids, mask, segments = ragged_batch()
    before = model(ids, mask, segments).logits
    assert before.shape == (B, T, 99)
    with torch.no_grad():  # rows past vocab_size are never looked up nor returned
        model.encoder.embeddings.word.weight[99:].normal_()
        model.mlm.bias[99:].normal_()
    assert torch.equal(model(ids, mask, segments).logits, before)
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert saved["bert.embeddings.word_embeddings.weight"].shape == (99, 32)
    assert saved["cls.predictions.bias"].shape == (99,)


# ---- masking on the input's device ----

def _masker():
    from bertkit.data.masking import Masker, MaskingConfig

    return Masker(MaskingConfig(), 99, mask_id=4, special_ids=[0, 1, 2, 3, 4])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_masking_runs_on_the_inputs_device(device):
    ids, mask, _ = ragged_batch()
    ids, mask = ids.to(device), mask.to(device)
    masker = _masker()
    masked, labels = masker(ids, mask, torch.Generator(device=device).manual_seed(0))
    again, labels2 = masker(ids, mask, torch.Generator(device=device).manual_seed(0))
    assert masked.device.type == labels.device.type == device
    assert torch.equal(masked, again) and torch.equal(labels, labels2)
    chosen = labels != -100
    assert chosen.any() and not chosen[mask == 0].any()  # never padding
    assert torch.equal(ids, ids * mask)  # the input is not written into


# ---- int8 dynamic quantization ----

def test_int8_quantization_replaces_linears_and_stays_close():
    from bertkit.quantize import is_quantized, quantize_int8

    torch.manual_seed(8)
    model = BertForSequenceClassification(tiny()).eval()
    q = quantize_int8(model)
    assert is_quantized(q) and not is_quantized(model)
    qkv = type(q.encoder.layers[0].qkv)
    assert qkv.__name__ == "Linear" and "quantized" in qkv.__module__
    ids, mask, segments = ragged_batch()
    with torch.no_grad():
        a, b = model(ids, mask, segments).logits, q(ids, mask, segments).logits
    assert not torch.equal(a, b)
    assert (a - b).abs().max() < 0.05 * a.abs().max() + 1e-3, report(a, b)


# ---- the benchmark's accounting and command ----

def test_step_flops_counts_dense_attention_and_labelled_head():
    from bertkit.flops import encoder_matrix_params, step_flops

    c = tiny()
    per_layer = 4 * 32 * 32 + 2 * 32 * 37
    assert encoder_matrix_params(c) == 2 * per_layer
    infer = step_flops(c, [7, 3])
    assert infer == 2 * 2 * per_layer * 10 + 4 * 32 * 2 * (49 + 9)
    train = step_flops(c, [7, 3], labelled=2, training=True)
    assert train == 3 * infer + 6 * (32 * 32 + 32 * 99) * 2


def test_stored_length_histograms_reproduce_the_dev_sets():
    from bertkit.benchmark.lengths import STORED, WIDTHS, from_histogram

    means = {"sst2": 25.2, "mrpc": 53.2, "squad": 174.6}
    for task, hist in STORED.items():
        lengths = from_histogram(hist, WIDTHS[task])
        assert len(lengths) == sum(hist.values())
        assert abs(lengths.mean() - means[task]) < WIDTHS[task] / 2 + 0.5
        assert lengths.max() <= (384 if task == "squad" else 128)


def test_bench_cli_rejects_an_unknown_case_in_one_line():
    from bertkit.benchmark import CASES

    assert {"infer-varlen-squad", "pretrain-mini-s128-b32", "infer-base-s128-int8"} <= set(CASES)
    run = [sys.executable, "-m", "bertkit.cli", "bench", "--device", "cpu", "--cases", "infer-base-s128,nope"]
    bad = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown case 'nope'" in bad.stderr and "Traceback" not in bad.stderr
