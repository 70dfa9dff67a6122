"""Each family's encoder forward on the CPU: bertkit against transformers' eager on the same weights.

    OMP_NUM_THREADS=1 python bench/cpu_speed.py --family all [--lengths sst2] --json bench/results/family_speed.json

For every family bertkit reads (BERT, RoBERTa, XLM-R, DistilBERT, ALBERT, DeBERTa-v3, ModernBERT), a
random transformers model of one shape (6 layers, 384 wide, 12 heads, intermediate 1536: the shape
of the small encoders people serve on CPUs; ALBERT with 128-wide embeddings; DeBERTa-v3 with its
relative attention; ModernBERT with a 128-token local window every layer but every third) is saved
by transformers and loaded by both. Contenders, one thread, the same batches:
- transformers fp32 (eager attention, the reference 1.00x) and transformers int8 (the same model
  through `torch.ao.quantization.quantize_dynamic` on its Linear layers, what a transformers user
  does for int8 on a CPU);
- bertkit fp32 and bertkit int8 (`bertkit.quantize`: per-channel int8 Linear layers, oneDNN);
- with `--lengths`, bertkit's unpadded path too (real tokens only, attention per length group).
Timing is cpu_speed.py's: rounds alternate the contenders, the median and the paired ratio.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

SHAPE = dict(hidden_size=384, num_attention_heads=12, intermediate_size=1536, num_hidden_layers=6)
# family -> (transformers class prefix, its config's arguments beyond SHAPE)
FAMILIES = {
    "bert": ("Bert", dict(SHAPE, max_position_embeddings=512)),
    "roberta": ("Roberta", dict(SHAPE, max_position_embeddings=514, pad_token_id=1, type_vocab_size=1)),
    "xlm-roberta": ("XLMRoberta", dict(SHAPE, max_position_embeddings=514, pad_token_id=1, type_vocab_size=1)),
    "distilbert": ("DistilBert", dict(dim=384, n_heads=12, hidden_dim=1536, n_layers=6, max_position_embeddings=512)),
    "albert": ("Albert", dict(SHAPE, embedding_size=128, max_position_embeddings=512)),
    "deberta-v3": ("DebertaV2", dict(SHAPE, max_position_embeddings=512, relative_attention=True, position_buckets=256,
                                     max_relative_positions=512, pos_att_type=["p2c", "c2p"], share_att_key=True,
                                     norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0)),
    "modernbert": ("ModernBert", dict(SHAPE, intermediate_size=1024, max_position_embeddings=8192,
                                      local_attention=128, global_attn_every_n_layers=3, pad_token_id=0)),
}


def model_dir(family: str, folder: Path, vocab: int) -> Path:
    """A random transformers model of `family` saved in `folder/family`."""
    import transformers

    prefix, kwargs = FAMILIES[family]
    config = getattr(transformers, prefix + "Config")(vocab_size=vocab, **kwargs)
    torch.manual_seed(0)
    out = folder / family
    getattr(transformers, prefix + "Model")(config).save_pretrained(out)
    return out


def _real(hidden: torch.Tensor, mask: np.ndarray) -> np.ndarray:
    return hidden.numpy()[mask.astype(bool)]


def contenders(family: str, folder: Path, feeds: list[dict], varlen: bool) -> dict:
    """name -> (a no-argument callable giving every batch's real-token vectors, precision)."""
    import transformers

    from bertkit.model import BertModel, set_unpadding
    from bertkit.quantize import quantize_int8

    path = model_dir(family, folder, 30522)
    prefix = FAMILIES[family][0]
    hf = getattr(transformers, prefix + "Model").from_pretrained(path, attn_implementation="eager").eval()
    hf8 = torch.ao.quantization.quantize_dynamic(
        getattr(transformers, prefix + "Model").from_pretrained(path, attn_implementation="eager").eval(),
        {torch.nn.Linear}, dtype=torch.qint8)
    ours = BertModel.from_pretrained(path).eval()
    takes_types = family not in ("distilbert", "modernbert")
    tensors = [{k: torch.from_numpy(v) for k, v in f.items() if k != "token_type_ids" or takes_types}
               for f in feeds]

    def call(model):
        def run():
            with torch.inference_mode():
                return np.concatenate([_real(model(**t).last_hidden_state, f["attention_mask"])
                                       for t, f in zip(tensors, feeds)])
        return run

    out = {"transformers fp32": (call(hf), "fp32"), "transformers int8": (call(hf8), "int8"),
           "bertkit fp32": (call(ours), "fp32"), "bertkit int8": (call(quantize_int8(ours)), "int8")}
    if varlen:
        out["bertkit fp32 unpadded"] = (call(set_unpadding(BertModel.from_pretrained(path).eval())), "fp32")
        out["bertkit int8 unpadded"] = (call(set_unpadding(quantize_int8(BertModel.from_pretrained(path).eval()))),
                                        "int8")
    return out


def table(rows: list[dict]) -> str:
    lines = ["| contender | seq/s | vs transformers fp32 (paired) | max abs diff |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['contender']} | {r['seq_per_s']:.2f} | {r['ratio']:.2f}x ({r['paired_ratio']:.2f}x) | "
                     f"{r['max_abs_diff_vs_transformers']:.1e} |")
    by = {r["contender"]: r for r in rows}
    int8 = by["bertkit int8"]["paired_ratio"] / by["transformers int8"]["paired_ratio"]
    lines.append(f"\nbertkit fp32 / transformers fp32 {by['bertkit fp32']['paired_ratio']:.2f}x; "
                 f"bertkit int8 / transformers int8 {int8:.2f}x")
    return "\n".join(lines)
