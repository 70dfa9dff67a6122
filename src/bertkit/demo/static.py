"""The demo's static row: its own pretrained model distilled into a static embedding model
(`bertkit distill --to static`, PCA to 64 dimensions at most), one vector per token and so one per
word whatever its sentence, and how fast it embeds the held-out articles against the model it came
from. The demo's vocabulary is small, so the distillation takes seconds.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

NAME = "static (from demo)"


def static_row(model_dir: Path, run: Path, contextual, texts: list[str], max_len: int) -> tuple[dict, dict]:
    """({word: (occurrences, C) vectors}, {distill_seconds, texts, texts_per_s, contextual_texts_per_s,
    speedup}): `contextual` is the demo's (model, tokenizer), timed on the same `texts`."""
    from bertkit.demo.senses import SENSES, occurrences
    from bertkit.distill.static import StaticJob, StaticOptions, distill_static
    from bertkit.embed import embed_texts
    from bertkit.export.backend import load_encoder_for

    start = time.perf_counter()
    distill_static(StaticJob(str(model_dir), str(run / "static"), StaticOptions(dim=64)), log=lambda _: None)
    seconds = time.perf_counter() - start
    model, tokenizer = load_encoder_for(run / "static")
    vectors = {}
    for word in SENSES:  # none for a word of only unknown pieces (a zero row)
        one = embed_texts(model, tokenizer, [word], progress=False)
        vectors[word] = np.repeat(one, len(occurrences(word)[0]), 0) if np.any(one) else None
    rates = []
    for m, tok in ((model, tokenizer), contextual):
        start = time.perf_counter()
        embed_texts(m, tok, texts, max_length=max_len, progress=False)
        rates.append(len(texts) / max(time.perf_counter() - start, 1e-9))
    info = {"distill_seconds": round(seconds, 2), "texts": len(texts), "texts_per_s": round(rates[0], 1),
            "contextual_texts_per_s": round(rates[1], 1), "speedup": round(rates[0] / rates[1], 1)}
    return vectors, info


def static_line(info: dict) -> str:
    return (f"- {NAME}: distilled in {info['distill_seconds']:.1f} s; it embeds {info['texts_per_s']:,.0f} held-out "
            f"articles a second against the demo model's {info['contextual_texts_per_s']:,.1f} "
            f"({info['speedup']:,.0f}x), and gives a word one vector in every sentence, as Word2Vec does.")
