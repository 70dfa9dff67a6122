"""The model cases: what each one runs, for bertkit and for transformers, on the same weights.

Every model case builds our model with a fixed seed, saves it as a Hugging Face directory and
loads that directory into transformers' class of the same name, so both start from identical
weights; before any timed step their deterministic outputs (eval mode) are compared. Training
steps are forward + loss + backward + AdamW step + zero grad, with the same optimizer builder
for both; on CUDA in bf16 autocast with the fused AdamW kernel, on CPU in fp32.

transformers is a test/bench dependency only: it is imported here, inside functions.
"""

from __future__ import annotations

import copy
import tempfile

import torch

from bertkit.benchmark.lengths import dev_lengths, sample_batches
from bertkit.benchmark.spec import CaseSpec, Options, Workload, autocast_for, transformers_module
from bertkit.benchmark.timing import Contender
from bertkit.config import IGNORE_INDEX, BertConfig
from bertkit.data.batching import length_mask
from bertkit.data.masking import Masker, MaskingConfig
from bertkit.flops import step_flops
from bertkit.train.optim import build_optimizer


def _pair(our_cls, hf_name: str, config: BertConfig, device: torch.device, copies: int = 1):
    """Our model and `copies` transformers models with identical weights, on `device`."""
    tf = transformers_module()
    torch.manual_seed(0)
    ours = our_cls(config)
    with tempfile.TemporaryDirectory(prefix="bertkit-bench-") as tmp:
        ours.save_pretrained(tmp)
        theirs = [getattr(tf, hf_name).from_pretrained(tmp, attn_implementation="sdpa", dtype=torch.float32)
                  for _ in range(copies)]
    return ours.to(device), [m.to(device) for m in theirs]


def _optimizer(model: torch.nn.Module):
    return build_optimizer(model, lr=1e-4, weight_decay=0.01)


def pretrain_batch(config: BertConfig, B: int, T: int, device: torch.device, seed: int = 0) -> dict:
    """Full-length [CLS] A [SEP] B [SEP] instances with BERT's 80/10/10 masking."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, config.vocab_size, (B, T), generator=g)
    ids[:, 0], ids[:, T // 2], ids[:, -1] = 101, 102, 102
    segments = (torch.arange(T) > T // 2).long().expand(B, T).contiguous()
    mask = torch.ones(B, T, dtype=torch.long)
    masker = Masker(MaskingConfig(), config.vocab_size, mask_id=103, special_ids=[0, 100, 101, 102, 103])
    ids, labels = masker(ids, mask, g)
    nsp = torch.randint(0, 2, (B,), generator=g)
    # No attention mask: pretraining instances are full length, so SDPA may use flash kernels.
    batch = {"input_ids": ids, "token_type_ids": segments, "labels": labels, "next_sentence_label": nsp}
    return {k: v.to(device) for k, v in batch.items()}


def _train_contender(name: str, model, run_model, batch: dict, autocast, outputs=None) -> Contender:
    optimizer = _optimizer(model)
    model.train()

    def step():
        with autocast():
            loss = run_model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return Contender(name, step, outputs)


def _eval_outputs(model, batch: dict, autocast, select=None):
    """Deterministic outputs (dropout off) of `model` on `batch`, read before any training step."""
    def outputs() -> dict[str, torch.Tensor]:
        was_training = model.training
        model.eval()
        with torch.no_grad(), autocast():
            out = model(**batch, output_hidden_states=True)
        model.train(was_training)
        result = {"last_hidden": out.hidden_states[-1]}
        if getattr(out, "loss", None) is not None:
            result["loss"] = out.loss
        if getattr(out, "pooler_output", None) is not None:
            result["pooler"] = out.pooler_output
        if select is not None:
            result["last_hidden"] = result["last_hidden"][select]
        return result
    return outputs


def compiled(model, device: torch.device):
    # Per block, as `bertkit pretrain --compile` does (see `compile_blocks` for why).
    from bertkit.train.compile import compile_blocks

    return compile_blocks(model)


def build_pretrain(spec: CaseSpec, opts: Options) -> Workload:
    from bertkit.heads import BertForPreTraining

    device, ac = opts.device, autocast_for(opts.device)
    config = BertConfig.preset(spec.preset)
    B, T = spec.batch[device.type], spec.seq_len
    second_reference = device.type == "cuda" and opts.compile  # transformers compiled, too
    ours, theirs = _pair(BertForPreTraining, "BertForPreTraining", config, device, 2 if second_reference else 1)
    batch = pretrain_batch(config, B, T, device)
    run_ours = compiled(ours, device) if opts.compile else ours
    contenders = [
        _train_contender("bertkit", ours, run_ours, batch, ac, _eval_outputs(ours, batch, ac)),
        _train_contender("transformers", theirs[0], theirs[0], batch, ac, _eval_outputs(theirs[0], batch, ac)),
    ]
    if second_reference:
        contenders.append(_train_contender("transformers-compiled", theirs[1], torch.compile(theirs[1]), batch, ac))
    labelled = int((batch["labels"] != IGNORE_INDEX).sum())
    flops = step_flops(config, [T] * B, labelled, training=True)
    notes = [f"{labelled} labelled positions of {B * T}", "dropout 0.1 on for both"]
    return Workload(spec, contenders, B, B * T, flops, notes)


def _infer_contender(name: str, model, batches: list[dict], autocast, outputs=None) -> Contender:
    model.eval()

    def step():
        with torch.inference_mode(), autocast():
            for batch in batches:
                model(**batch)

    return Contender(name, step, outputs)


def _varlen_batches(spec: CaseSpec, device: torch.device) -> tuple[list[dict], list[int], str]:
    lengths, source = dev_lengths(spec.task)
    n, B = spec.batches[device.type], spec.batch[device.type]
    g = torch.Generator().manual_seed(0)
    batches, real = [], []
    for row_lengths in sample_batches(lengths, B, n):
        T = int(row_lengths.max())
        ids = torch.randint(1000, 30522, (B, T), generator=g)
        mask = length_mask(row_lengths, T)  # (B, T)
        ids = torch.where(mask.bool(), ids, torch.zeros_like(ids))  # [PAD] = 0 on the right
        ids[:, 0] = 101
        batches.append({"input_ids": ids.to(device), "attention_mask": mask.to(device)})
        real.extend(int(x) for x in row_lengths)
    return batches, real, source


def build_infer(spec: CaseSpec, opts: Options) -> Workload:
    from bertkit.model import BertModel

    device, ac = opts.device, autocast_for(opts.device)
    config = BertConfig.preset(spec.preset)
    ours, theirs = _pair(BertModel, "BertModel", config, device)
    notes = []
    if spec.kind == "varlen":
        batches, lengths, source = _varlen_batches(spec, device)
        ours.unpad = True
        pad = sum(b["input_ids"].numel() for b in batches)
        notes += [f"lengths: {source}", f"padding {1 - sum(lengths) / pad:.0%} of the padded tokens",
                  "bertkit unpadded, transformers padded to each batch's longest"]
    else:
        B, T = spec.batch[device.type], spec.seq_len
        batches = [{"input_ids": torch.randint(1000, config.vocab_size, (B, T)).to(device)}]
        lengths = [T] * B
    keep = batches[0].get("attention_mask")
    select = keep.bool() if keep is not None else None
    ours_out = _eval_outputs(ours, batches[0], ac, select)
    theirs_out = _eval_outputs(theirs[0], batches[0], ac, select)
    main, plain_name = ours, None
    if spec.int8 or (opts.int8 and device.type == "cpu"):
        from bertkit.quantize import quantize_int8

        main, plain_name = quantize_int8(ours), "bertkit-fp32"
        ours_out = _eval_outputs(main, batches[0], ac, select)
        notes.append("bertkit int8 dynamic quantization; bertkit-fp32 is the same model unquantized")
    elif opts.compile and spec.kind != "varlen":  # unpadded shapes change every batch: stays eager
        # A compiled copy: compile_blocks works in place, and `ours` stays the eager contender.
        main, plain_name = compiled(copy.deepcopy(ours), device), "bertkit-eager"
    contenders = [_infer_contender("bertkit", main, batches, ac, ours_out),
                  _infer_contender("transformers", theirs[0], batches, ac, theirs_out)]
    if plain_name is not None:
        contenders.append(_infer_contender(plain_name, ours, batches, ac))
    return Workload(spec, contenders, len(lengths), sum(lengths), step_flops(config, lengths), notes)


def build_model_case(spec: CaseSpec, opts: Options) -> Workload:
    if spec.kind == "pretrain":
        return build_pretrain(spec, opts)
    return build_infer(spec, opts)
