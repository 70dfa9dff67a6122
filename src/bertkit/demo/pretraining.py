"""The demo's pretraining stages, each the library call of the `bertkit` command a user would
type: a WordPiece vocabulary (`bertkit tokenizer train`), packed full-length sequences (`bertkit
prepare --format packed`), pretraining for a time budget with the budget recipe (`bertkit pretrain
--recipe budget --minutes M`: no dropout, a high lr decaying to zero at the deadline; masked LM or
ELECTRA's replaced-token detection), and fill-mask examples.

`pretrain_model` is the one place the demo chooses its pretraining settings."""

from __future__ import annotations

import json
from pathlib import Path

FILL_MASK = [
    "The prime minister said the [MASK] would cut taxes.",
    "Shares in the company [MASK] sharply on Monday.",
    "The film won the award for best [MASK].",
    "Chelsea beat Arsenal in the [MASK] on Saturday.",
    "The new phone has a faster [MASK] and a bigger screen.",
]


def learn_vocabulary(corpus: Path, out: Path, vocab_size: int) -> None:
    from bertkit.io import expand_inputs
    from bertkit.tokenizer import Tokenizer

    Tokenizer.train(expand_inputs([corpus]), vocab_size=vocab_size).save_pretrained(out)


def prepare_instances(corpus: Path, vocab: Path, out: Path, max_seq_len: int, seed: int) -> None:
    from bertkit.data.prepare import PrepareOptions, prepare_corpus

    options = PrepareOptions(max_seq_len=max_seq_len, format="packed", val_fraction=0.02, seed=seed)
    prepare_corpus([corpus], vocab, out, options)


def pretrain_model(data: Path, out: Path, preset: str, minutes: float, seed: int, objective: str = "mlm",
                   overrides: dict | None = None) -> Path:
    """Pretrain `preset` (with the shape `overrides`) on DATA for `minutes` with the budget recipe
    and `objective` (mlm, or electra's replaced-token detection); returns the saved encoder's folder."""
    from bertkit.pretrain import TrainConfig, pretrain

    cfg = TrainConfig(data=str(data), out=str(out), preset=preset, minutes=minutes, recipe="budget", seed=seed,
                      eval_every=200, objective=objective, config_overrides=dict(overrides or {}))
    status = pretrain(cfg)
    if status != 0:  # stopped by a signal, checkpoint saved: the demo stops with the same status
        raise SystemExit(status)
    return out / "model"


def masked_lm_dir(run_dir: Path, objective: str) -> Path:
    """The folder fill-mask reads: the model itself, or ELECTRA's generator (the discriminator has
    no masked-LM head: it tells replaced tokens from original ones)."""
    return run_dir / ("generator" if objective == "electra" else "model")


def fill_mask_examples(model_dir: Path, top_k: int = 5) -> list[dict]:
    """The pretrained model's top guesses for each sentence of FILL_MASK, printed as they come."""
    from bertkit.fill_mask import fill_mask, load_masked_lm

    tokenizer, model = load_masked_lm(model_dir)
    out = []
    for text in FILL_MASK:
        guesses = fill_mask(model, tokenizer, text, top_k)[0]["guesses"]
        shown = ", ".join(f"{g['token']} ({100 * g['probability']:.1f}%)" for g in guesses)
        print(f"  {text}\n    -> {shown}", flush=True)
        out.append({"text": text, "top": [g["token"] for g in guesses],
                    "probabilities": [round(g["probability"], 4) for g in guesses]})
    return out


def pretraining_record(run_dir: Path) -> dict:
    """What the pretraining run did and reached: steps, tokens, its last validation record."""
    last, train = {}, {}
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("split") == "val" or rec.get("kind") == "val":
                last = rec
            elif rec.get("kind") == "train":
                train = rec
    return {"last_validation": last, "last_train_log": train}


def pretraining_precision() -> str:
    """What the budget recipe pretrains in on this CPU: "auto" resolved (bf16 where it runs natively)."""
    import torch

    from bertkit.devices import resolve_precision
    from bertkit.pretrain import TrainConfig

    return resolve_precision(TrainConfig(data="-", out="-", recipe="budget").precision, torch.device("cpu"))


def step_seconds(data: Path, preset: str, seed: int, steps: int = 3) -> float:
    """Seconds of one budget-recipe training step of `preset` on the prepared DATA, as this machine
    runs it now (its threads, its precision): two steps to warm up, then the mean of `steps`."""
    import time

    import numpy as np
    import torch

    from bertkit.data import PretrainingDataset
    from bertkit.devices import resolve_precision
    from bertkit.pretrain import TrainConfig
    from bertkit.pretrain.build import build_model, build_objective
    from bertkit.tokenizer import Tokenizer

    cfg = TrainConfig(data=str(data), out="-", preset=preset, steps=steps, recipe="budget", seed=seed)
    train = PretrainingDataset(data, split="train")
    model, optimizer = build_model(cfg, train.manifest, None, torch.device("cpu"))
    objective = build_objective(cfg, train.manifest, Tokenizer.from_pretrained(data / "tokenizer"))
    bf16 = resolve_precision(cfg.precision, torch.device("cpu")) == "bf16"
    batch = train.batch(np.arange(min(cfg.batch_size, len(train))))
    times = []
    for step in range(2 + steps):
        began = time.perf_counter()
        inputs = objective.prepare(batch, torch.device("cpu"), step, 0)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            sums = objective.loss_sums(model, inputs)
        sum(sums.values()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - began)
    return float(np.mean(times[2:]))
