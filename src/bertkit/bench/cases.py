"""The benchmark cases: what each one runs, for bertkit and for transformers, on the same weights.

Every model case builds our model with a fixed seed, saves it as a Hugging Face directory and
loads that directory into transformers' class of the same name, so both start from identical
weights; before any timed step their deterministic outputs (eval mode) are compared. Training
steps are forward + loss + backward + AdamW step + zero grad, with the same optimizer builder
for both; on CUDA in bf16 autocast with the fused AdamW kernel, on CPU in fp32.

transformers is a test/bench dependency only: it is imported here, inside functions.
"""

from __future__ import annotations

import contextlib
import copy
import tempfile
from dataclasses import dataclass, field

import torch

from bertkit.bench.flops import step_flops
from bertkit.bench.lengths import dev_lengths, sample_batches
from bertkit.bench.timing import Contender
from bertkit.config import BertConfig
from bertkit.errors import UserError


@dataclass(frozen=True)
class CaseSpec:
    name: str
    kind: str  # "pretrain", "infer", "varlen" or "data"
    devices: tuple[str, ...]  # device types the case runs on
    batch: dict[str, int] = field(default_factory=dict)  # sequences per batch, by device type
    preset: str = "base"
    seq_len: int = 128
    task: str | None = None  # length distribution of a varlen case
    int8: bool = False  # bertkit runs dynamically quantized (CPU)
    batches: dict[str, int] = field(default_factory=dict)  # varlen: batches per timed step


CASES: dict[str, CaseSpec] = {c.name: c for c in (
    CaseSpec("pretrain-base-s128-b256", "pretrain", ("cuda",), {"cuda": 256}),
    CaseSpec("pretrain-base-s512-b64", "pretrain", ("cuda",), {"cuda": 64}, seq_len=512),
    CaseSpec("pretrain-large-s128-b128", "pretrain", ("cuda",), {"cuda": 128}, preset="large"),
    CaseSpec("pretrain-mini-s128-b32", "pretrain", ("cpu", "cuda"), {"cpu": 32, "cuda": 32}, preset="mini"),
    CaseSpec("infer-base-s128", "infer", ("cpu", "cuda"), {"cpu": 8, "cuda": 256}),
    CaseSpec("infer-base-s128-int8", "infer", ("cpu",), {"cpu": 8}, int8=True),
    *(CaseSpec(f"infer-varlen-{t}", "varlen", ("cpu", "cuda"), {"cpu": 8, "cuda": 128}, task=t,
               seq_len=384 if t == "squad" else 128, batches={"cpu": 3, "cuda": 8}) for t in ("sst2", "mrpc", "squad")),
    CaseSpec("data-prepare", "data", ("cpu",)),
    CaseSpec("data-masking", "data", ("cpu", "cuda"), {"cpu": 256, "cuda": 256}),
)}


@dataclass
class Workload:
    """A built case: its contenders (bertkit first, transformers second) and its size per step."""

    spec: CaseSpec
    contenders: list[Contender]
    sequences: int  # per step
    tokens: int  # real tokens per step
    flops: float | None  # useful FLOPs per step
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Options:
    device: torch.device
    compile: bool = False  # torch.compile bertkit (and add compiled transformers on CUDA)
    int8: bool = False  # quantize bertkit in every CPU inference case


def transformers_module():
    try:
        import transformers
    except ImportError:
        raise UserError("bench compares against transformers, which is not installed: "
                        "pip install 'bertkit[test]' (or pip install transformers)") from None
    transformers.logging.set_verbosity_error()
    return transformers


def autocast_for(device: torch.device):
    if device.type == "cuda":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


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
    try:
        from bertkit.train.optim import build_optimizer
    except ImportError:  # the training package is optional for the benchmark
        return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=next(model.parameters()).is_cuda or None)
    return build_optimizer(model, lr=1e-4, weight_decay=0.01)


def pretrain_batch(config: BertConfig, B: int, T: int, device: torch.device, seed: int = 0) -> dict:
    """Full-length [CLS] A [SEP] B [SEP] instances with BERT's masking (B's Masker when present)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, config.vocab_size, (B, T), generator=g)
    ids[:, 0], ids[:, T // 2], ids[:, -1] = 101, 102, 102
    segments = (torch.arange(T) > T // 2).long().expand(B, T).contiguous()
    mask = torch.ones(B, T, dtype=torch.long)
    try:
        from bertkit.data.masking import Masker, MaskingConfig

        masker = Masker(MaskingConfig(), config.vocab_size, mask_id=103, special_ids=[0, 100, 101, 102, 103])
        ids, labels = masker(ids, mask, g)
    except ImportError:
        chosen = torch.rand(B, T, generator=g) < 0.15
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        ids = torch.where(chosen, torch.full_like(ids, 103), ids)
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
    from bertkit.model import compile_blocks

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
    labelled = int((batch["labels"] != -100).sum())
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
        mask = (torch.arange(T)[None, :] < torch.as_tensor(row_lengths)[:, None]).long()  # (B, T)
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


def build(spec: CaseSpec, opts: Options) -> Workload:
    if spec.kind == "pretrain":
        return build_pretrain(spec, opts)
    if spec.kind in ("infer", "varlen"):
        return build_infer(spec, opts)
    from bertkit.bench.data_cases import build_data

    return build_data(spec, opts)


def selected(names: str | None, device: torch.device) -> list[CaseSpec]:
    """The named cases (comma-separated), or every case that runs on this device type."""
    if not names:
        return [c for c in CASES.values() if device.type in c.devices]
    out = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name not in CASES:
            raise UserError(f"unknown case {name!r}; cases: {', '.join(CASES)}")
        if device.type not in CASES[name].devices:
            raise UserError(f"case {name} runs on {'/'.join(CASES[name].devices)} only, not {device.type}")
        out.append(CASES[name])
    return out
