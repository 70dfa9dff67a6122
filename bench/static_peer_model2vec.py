"""The model2vec side of bench/static_embeddings.py, run in its own virtual environment.

    .venv-model2vec/bin/python bench/static_peer_model2vec.py TEACHER TEXTS.json OUT_DIR

model2vec's `distill[quantization]` extra pins a transformers that does not load beside bertkit's, so
the bench calls this file with `/work/main/.venv-model2vec/bin/python` (python3 -m venv; pip install
torch==2.13.0 from the CPU wheel on disk, then model2vec[distill,quantization]). It distils TEACHER
with model2vec's defaults except float32 tables (pca_dims 256, SIF 1e-4 on Zipf's law, mean
pooling), saves the model, encodes every text list of TEXTS.json (a JSON object of name -> list
of strings) with `StaticModel.encode` into OUT_DIR/NAME.npy, and prints one JSON line: the
distillation's wall and CPU seconds, the versions, and each list's encoding seconds.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main() -> int:
    teacher, texts_file, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    import model2vec
    import numpy as np
    import torch
    import transformers
    from model2vec.distill import distill

    torch.set_num_threads(1)
    wall, cpu = time.perf_counter(), time.process_time()
    model = distill(teacher, pca_dims=256, device="cpu", quantize_to="float32")
    record = {"distill_wall_s": round(time.perf_counter() - wall, 2),
              "distill_cpu_s": round(time.process_time() - cpu, 2),
              "model2vec": model2vec.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
              "vocab_size": int(model.embedding.shape[0]), "dim": int(model.embedding.shape[1]), "encode_s": {}}
    model.save_pretrained(str(out / "model"))
    for name, texts in json.loads(texts_file.read_text(encoding="utf-8")).items():
        wall = time.perf_counter()
        vectors = model.encode(texts, show_progress_bar=False)
        record["encode_s"][name] = round(time.perf_counter() - wall, 4)
        np.save(out / f"{name}.npy", np.asarray(vectors, dtype=np.float32))
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
