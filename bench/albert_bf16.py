"""ALBERT under bf16 autocast: how far its outputs move from fp32, and why (issue 51, item 5).

    OMP_NUM_THREADS=1 python bench/albert_bf16.py [--sst2] [--json docs/results/albert-bf16/DATE.json]

Random models as transformers initialises them (saved by transformers, loaded by bertkit), the
same right-padded batch of mixed lengths, deviation measured at the real tokens of bertkit's
forward pass in bf16 autocast against its own fp32 (which matches transformers to 1e-5):
1. depth: 1..12 layers of ALBERT (one shared layer), of the same ALBERT with a weight group per
   layer (`num_hidden_groups` = layers: the same forward pass, no sharing) and of BERT of the
   same width; at two widths (`tiny`: the tests' 32 wide, embeddings 16; `small`: 384 wide, 12
   heads, embeddings 128);
2. where: the hidden state's dtype between layers under autocast; 12-layer ALBERT with one part
   kept in fp32 (the embeddings and their projection, the attention's linear maps, the
   feed-forward's), or with the shared layer's output, or the projection's, cast back to fp32;
3. amplification: the fp32 forward with its hidden state rounded to bf16 once, before the first
   layer: what the stack makes of one rounding;
4. `--sst2`: a tiny random ALBERT fine-tuned on SST-2 train rows from scratch in fp32 and in bf16,
   each evaluated on SST-2 dev in fp32 and in bf16 (`bertkit finetune`, `bertkit evaluate`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

VOCAB, B, T = 1000, 8, 32
DEPTHS = (1, 2, 3, 4, 6, 8, 12)
SHAPES = {"tiny": dict(hidden_size=32, num_attention_heads=4, intermediate_size=37, embedding_size=16),
          "small": dict(hidden_size=384, num_attention_heads=12, intermediate_size=1536, embedding_size=128)}
ARCHS = ("albert", "albert-unshared", "bert")
SST2 = Path(os.environ.get("BERTKIT_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "data"


def build(arch: str, shape: str, layers: int, folder: Path):
    """bertkit's BertModel of a random transformers `arch` model (seed 0)."""
    import transformers

    from bertkit.model import BertModel

    kwargs = dict(SHAPES[shape], vocab_size=VOCAB, num_hidden_layers=layers, max_position_embeddings=128)
    if arch == "bert":
        kwargs.pop("embedding_size")
        config = transformers.BertConfig(**kwargs)
    else:
        config = transformers.AlbertConfig(**kwargs, num_hidden_groups=1 if arch == "albert" else layers)
    torch.manual_seed(0)
    path = folder / f"{arch}-{shape}-{layers}"
    (transformers.BertModel if arch == "bert" else transformers.AlbertModel)(config).save_pretrained(path)
    return BertModel.from_pretrained(path).eval()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(8, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()  # (B, T)
    return torch.where(mask.bool(), torch.randint(5, VOCAB, (B, T), generator=g), 0), mask


def states(model, ids, mask, bf16: bool) -> list[np.ndarray]:
    """Every layer's output (the projected embeddings first) at the real tokens, float64."""
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(ids, attention_mask=mask, output_hidden_states=True)
    real = mask.bool()
    return [h[real].double().numpy() for h in out.hidden_states]


def deviation(ours: list[np.ndarray], ref: list[np.ndarray], mask) -> dict:
    """Max abs difference of the last layer and of each layer's; the mean-pooled vectors' worst cosine."""
    owner = np.repeat(np.arange(B), mask.sum(1).numpy())
    pooled = [np.stack([s[owner == b].mean(0) for b in range(B)]) for s in (ours[-1], ref[-1])]
    cos = (pooled[0] * pooled[1]).sum(1) / np.linalg.norm(pooled[0], axis=1) / np.linalg.norm(pooled[1], axis=1)
    return {"max_abs": float(np.abs(ours[-1] - ref[-1]).max()),
            "pooled_max_abs": float(np.abs(pooled[0] - pooled[1]).max()),
            "pooled_min_cosine": float(cos.min()),
            "per_layer_max_abs": [round(float(np.abs(a - b).max()), 7) for a, b in zip(ours[1:], ref[1:])]}


def depth_sweep(folder: Path, shape: str) -> dict:
    ids, mask = batch()
    rows = {}
    for arch in ARCHS:
        for layers in DEPTHS:
            model = build(arch, shape, layers, folder)
            rows[f"{arch}-{layers}"] = deviation(states(model, ids, mask, True), states(model, ids, mask, False), mask)
            print(f"  {shape:5s} {arch:15s} {layers:2d} layers: max abs {rows[f'{arch}-{layers}']['max_abs']:.2e}",
                  flush=True)
    return rows


@contextlib.contextmanager
def in_fp32(modules: list[torch.nn.Module]):
    """Each module's forward outside autocast, on float32 inputs, for the duration."""
    def wrap(forward):
        def run(*args, **kwargs):
            args = [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
            with torch.autocast("cpu", enabled=False):
                return forward(*args, **kwargs)
        return run
    saved = [m.forward for m in modules]
    for m in modules:
        m.forward = wrap(m.forward)
    try:
        yield
    finally:
        for m, forward in zip(modules, saved):
            m.forward = forward


def where(folder: Path, shape: str) -> dict:
    """12-layer ALBERT's bf16 deviation with one part kept in fp32."""
    model = build("albert", shape, 12, folder)
    layer = model.layers[0]
    parts = {"nothing": [], "embeddings + projection": [model.embeddings, model.embed_proj],
             "attention maps (qkv, out)": [layer.qkv, layer.attn_out], "feed-forward": [layer.ffn_in, layer.ffn_out]}
    ids, mask = batch()
    ref = states(model, ids, mask, False)
    rows = {}
    for name, modules in parts.items():
        with in_fp32(modules):
            rows[f"{name} in fp32"] = deviation(states(model, ids, mask, True), ref, mask)["max_abs"]
    casts = {"the shared layer's output cast to fp32 between repeats": layer,
             "the projection's output cast to fp32 (the residual stream in fp32, as BERT's)": model.embed_proj}
    for name, module in casts.items():
        hook = module.register_forward_hook(lambda m, args, out: out.float())
        try:
            rows[name] = deviation(states(model, ids, mask, True), ref, mask)["max_abs"]
        finally:
            hook.remove()
    return rows


def stream_dtypes(folder: Path, shape: str) -> dict:
    """The dtype of the hidden state between layers (and after the embeddings) under bf16 autocast."""
    ids, mask = batch()
    rows = {}
    for arch in ARCHS:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            out = build(arch, shape, 2, folder)(ids, attention_mask=mask, output_hidden_states=True)
        rows[arch] = sorted({str(h.dtype).replace("torch.", "") for h in out.hidden_states})
    return rows


def amplification(folder: Path, shape: str) -> dict:
    """The fp32 forward with the first layer's input rounded to bf16 once: its size, the output's."""
    ids, mask = batch()
    rows = {}
    for arch in ARCHS:
        model = build(arch, shape, 12, folder)
        ref = states(model, ids, mask, False)
        calls = []

        def round_once(module, args, calls=calls):
            calls.append(1)
            return (args[0].bfloat16().float(), *args[1:]) if len(calls) == 1 else None
        hook = model.layers[0].register_forward_pre_hook(round_once)
        try:
            ours = states(model, ids, mask, False)
        finally:
            hook.remove()
        x = ref[0]  # the first layer's input, fp32
        rounding = float(np.abs(torch.from_numpy(x).float().bfloat16().double().numpy() - x).max())
        out = float(np.abs(ours[-1] - ref[-1]).max())
        rows[arch] = {"input_rounding_max_abs": rounding, "output_max_abs": out, "ratio": out / rounding}
    return rows


def albert_dir(folder: Path, layers: int) -> Path:
    """A random ALBERT (128 wide, 4 heads, embeddings 64, one shared layer) with BERT's uncased vocabulary."""
    import shutil

    import transformers

    path = folder / "albert-sst2"
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(SST2 / "vocab" / "bert-base-uncased" / "vocab.txt", path / "vocab.txt")
    config = transformers.AlbertConfig(vocab_size=30522, hidden_size=128, num_attention_heads=4, intermediate_size=512,
                                       num_hidden_layers=layers, embedding_size=64, max_position_embeddings=128,
                                       pad_token_id=0)
    torch.manual_seed(0)
    transformers.AlbertForMaskedLM(config).save_pretrained(path)
    return path


def _cli(*argv) -> str:
    from bertkit.cli import main as cli

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli([str(a) for a in argv])
    if code != 0:
        raise SystemExit(f"bertkit {argv[0]} exited {code}")
    return buffer.getvalue()


def fine_tune(model: Path, train: Path, dev: Path, out: Path, precision: str, seed: int, args) -> dict:
    """One fine-tuning in `precision`, its model evaluated on dev in fp32 and in bf16."""
    start = time.time()
    _cli("finetune", "--model", model, "--task", "sst2", "--train", train, "--dev", dev, "--out", out,
         "--epochs", args.epochs, "--batch-size", 32, "--lr", args.lr, "--max-seq-len", 64, "--seeds", seed,
         "--precision", precision, "--device", "cpu", "--no-progress")
    row = {"seed": seed, "train_seconds": round(time.time() - start, 1)}
    predictions = {}
    for evaluated in ("fp32", "bf16"):
        pred = out / f"pred-{evaluated}.txt"
        metrics = json.loads(_cli("evaluate", "--model", out / "model", "--task", "sst2", "--data", dev,
                                  "--precision", evaluated, "--device", "cpu", "--out", pred))
        row[f"dev_accuracy_{evaluated}"] = metrics["accuracy"]
        predictions[evaluated] = pred.read_text().splitlines()
    row["dev_predictions_that_differ"] = sum(a != b for a, b in zip(predictions["fp32"], predictions["bf16"]))
    print(f"  SST-2, trained in {precision}: {row}", flush=True)
    return row


def sst2(folder: Path, args) -> dict:
    """Fine-tuned from scratch in fp32 and in bf16 (each seed); each evaluated on dev in fp32 and in bf16."""
    glue = SST2 / "glue" / "SST-2"
    train = folder / "train.tsv"
    train.write_text("".join((glue / "train.tsv").read_text(encoding="utf-8").splitlines(True)[:args.rows + 1]),
                     encoding="utf-8")
    model = albert_dir(folder, args.layers)
    result = {"train_rows": args.rows, "dev_rows": 872, "layers": args.layers, "epochs": args.epochs, "lr": args.lr}
    for trained in ("fp32", "bf16"):
        runs = [fine_tune(model, train, glue / "dev.tsv", folder / f"ft-{trained}-{seed}", trained, seed, args)
                for seed in args.seeds]
        result[f"trained_{trained}"] = {"runs": runs, **{
            f"mean_dev_accuracy_{e}": round(float(np.mean([r[f"dev_accuracy_{e}"] for r in runs])), 2)
            for e in ("fp32", "bf16")}}
    return result


def machine() -> dict:
    text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    return {"cpu": fields.get("Model name", "").strip(), "flags": flags, "cores": os.cpu_count(),
            "bf16_native": bool({"avx512_bf16", "amx_bf16"} & set(flags)), "threads": torch.get_num_threads(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "torch": torch.__version__}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="tiny,small", help="comma-separated: tiny, small")
    p.add_argument("--sst2", action="store_true", help="also fine-tune a tiny ALBERT on SST-2 (minutes)")
    p.add_argument("--rows", type=int, default=4000, help="SST-2 training rows")
    p.add_argument("--layers", type=int, default=6, help="the SST-2 ALBERT's layers (one shared)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 3],
                   help="SST-2 fine-tuning seeds, comma-separated")
    p.add_argument("--json", default=f"docs/results/albert-bf16/{time.strftime('%Y-%m-%d')}.json")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    report = {"command": " ".join(["python", "bench/albert_bf16.py", *(sys.argv[1:] if argv is None else argv)]),
              "machine": machine(), "batch": {"B": B, "T": T, "lengths": "8..32, right-padded"}, "shapes": SHAPES}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for shape in filter(None, args.shapes.split(",")):
            print(f"{shape}: bf16 autocast against fp32, the last layer at real tokens", flush=True)
            report[shape] = {"depth": depth_sweep(folder, shape), "stream_dtype": stream_dtypes(folder, shape),
                             "where": where(folder, shape), "amplification": amplification(folder, shape)}
            print(f"  the hidden state between layers under autocast: {report[shape]['stream_dtype']}", flush=True)
            print(f"  where (12 layers, max abs): {report[shape]['where']}", flush=True)
            print(f"  one rounding before the first layer, then fp32: {report[shape]['amplification']}", flush=True)
        if args.sst2:
            report["sst2"] = sst2(folder, args)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
