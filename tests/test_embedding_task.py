"""`bertkit finetune --task embedding | rerank`: the losses against hand-computed values, batches
without repeated texts, GradCache's gradients against the plain batch's, sentence-transformers
loading what bertkit saves (and agreeing with bertkit to 1e-5), and a tiny run that learns."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.data.pairs import PairRow, read_pair_rows
from bertkit.finetune.contrastive import cosent_loss, in_batch_loss, matryoshka
from bertkit.finetune.embedding import EmbeddingTask, no_duplicate_batches
from bertkit.finetune.rerank import RerankTask, listwise_loss
from finetune_helpers import BAD, GOOD, NOUNS, assert_same_metrics, evaluate, run_cli


def _max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


def test_in_batch_loss_equals_the_hand_computed_value():
    anchors = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    candidates = torch.tensor([[3.0, 4.0], [0.0, 1.0], [-1.0, 0.0]])  # p1, p2, one hard negative
    # cosines: a1 -> (0.6, 0, -1), a2 -> (0.8, 1, 0); scale 2
    row1 = -1.2 + math.log(math.exp(1.2) + math.exp(0.0) + math.exp(-2.0))
    row2 = -2.0 + math.log(math.exp(1.6) + math.exp(2.0) + math.exp(0.0))
    forward = (row1 + row2) / 2
    assert in_batch_loss(anchors, candidates, 2.0).item() == pytest.approx(forward, abs=1e-6)
    back1 = -1.2 + math.log(math.exp(1.2) + math.exp(1.6))  # p1 picks a1 among (a1, a2)
    back2 = -2.0 + math.log(math.exp(0.0) + math.exp(2.0))
    symmetric = (forward + (back1 + back2) / 2) / 2
    assert in_batch_loss(anchors, candidates, 2.0, symmetric=True).item() == pytest.approx(symmetric, abs=1e-6)


def test_cosent_equals_the_hand_computed_value():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    b = torch.tensor([[3.0, 4.0], [0.0, 1.0], [0.0, 5.0]])  # cosines 0.6, 0, 1 -> x2: 1.2, 0, 2
    gold = torch.tensor([2.0, 3.0, 1.0])
    # pairs in the wrong order: (0 over 2): 2 - 1.2; (1 over 0): 1.2 - 0; (1 over 2): 2 - 0
    expected = math.log(1 + math.exp(0.8) + math.exp(1.2) + math.exp(2.0))
    assert cosent_loss(a, b, gold, 2.0).item() == pytest.approx(expected, abs=1e-6)
    assert cosent_loss(b, a, torch.tensor([2.0, 1.0, 3.0]), 2.0).item() < 1e-3 + math.log(1 + 3 * math.exp(-0.4))


def test_matryoshka_sums_the_loss_over_the_listed_prefixes_at_unit_length():
    v = torch.arange(1.0, 13.0).reshape(3, 4)

    def unit(x):
        return x / x.norm(dim=1, keepdim=True)

    got = matryoshka(lambda x: x.sum() * x.shape[1], v, (2, 4, 1))  # the full width only because it is listed
    assert got.item() == pytest.approx(float(unit(v).sum() * 4 + unit(v[:, :2]).sum() * 2 + 3), abs=1e-5)
    assert matryoshka(lambda x: x.sum(), v, (2,)).item() == pytest.approx(float(unit(v[:, :2]).sum()), abs=1e-5)


def test_listwise_loss_is_the_positives_softmax_cross_entropy():
    logits = torch.tensor([2.0, 1.0, 0.0, 0.5, 3.0])  # group 0: 3 candidates, group 1: 2
    group = torch.tensor([0, 0, 0, 1, 1])
    expected = ((-2.0 + math.log(math.exp(2) + math.exp(1) + 1)) + (-0.5 + math.log(math.exp(0.5) + math.exp(3)))) / 2
    assert listwise_loss(logits, group).item() == pytest.approx(expected, abs=1e-6)


def test_no_batch_holds_a_text_twice():
    rng = random.Random(0)
    words = [f"w{i}" for i in range(15)]
    rows = [(rng.choice(words), rng.choice(words), rng.choice(words)) for _ in range(60)]
    batches = no_duplicate_batches(rows, 4, torch.Generator().manual_seed(1))
    assert sorted(i for b in batches for i in b) == list(range(60))  # every row exactly once
    for b in batches:
        texts = [t for i in b for t in set(rows[i])]
        assert len(texts) == len(set(texts)), [rows[i] for i in b]
    assert max(map(len, batches)) == 4


@pytest.fixture(scope="module")
def pair_rows() -> list[PairRow]:
    """Anchors paired with a permuted noun: nothing lexical links them, so it has to be learnt."""
    perm = NOUNS[3:] + NOUNS[:3]
    return [PairRow(f"the {a}", f"{b} was", (f"{perm[(i + 5) % len(NOUNS)]} was",))
            for i, (a, b) in enumerate(zip(NOUNS, perm))]


@pytest.fixture(scope="module")
def rerank_rows(pair_rows) -> list[PairRow]:
    """The same queries; positives say something good, negatives something bad (learnable by a
    tiny cross-encoder in a few steps, unlike the arbitrary pairing)."""
    return [PairRow(r.anchor, f"{r.positive} {GOOD[i % 6]}", (f"{r.negatives[0]} {BAD[i % 6]}",))
            for i, r in enumerate(pair_rows)]


def _grads(model, task, batch):
    model.zero_grad()
    task.loss(model, batch).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("train_mode", [False, True])
def test_cached_gradients_equal_the_plain_batch(tiny_dir, pair_rows, train_mode):
    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tiny_dir)
    model = BertModel.from_pretrained(tiny_dir).train(train_mode)
    kw = dict(pooling="mean", symmetric=True, matryoshka_dims=(16, 8))
    plain, cached = EmbeddingTask(tok, 32, **kw), EmbeddingTask(tok, 32, grad_cache=3 if not train_mode else 64, **kw)
    plain.fit_labels(pair_rows)
    cached.fit_labels(pair_rows)
    data = plain.prepare(pair_rows, train=True)
    batch = plain.collate(data.features)
    assert batch.inputs["input_ids"].shape[0] == 2 * len(pair_rows)  # negatives repeat positives: 26 texts, once each
    torch.manual_seed(5)  # with dropout on, GradCache replays each chunk's random state
    want = _grads(model, plain, batch)
    torch.manual_seed(5)
    got = _grads(model, cached, batch)
    assert want.keys() == got.keys() and len(want) > 10
    worst = max(_max_diff(want[n], got[n]) for n in want)
    assert worst < 1e-5, worst
    assert max(float(g.abs().max()) for g in want.values()) > 1e-3  # real gradients, not zeros


def test_pair_rows_from_tsv_and_jsonl(tmp_path):
    (tmp_path / "p.tsv").write_text("id\tquery\tpassage\tnegative_1\tnegative_2\n1\tq\tp\tn1\t\n", encoding="utf-8")
    (tmp_path / "p.jsonl").write_text('{"anchor": "q", "positive": "p", "negatives": ["n1"]}\n', encoding="utf-8")
    (tmp_path / "s.tsv").write_text("sentence1\tsentence2\tscore\na\tb\t3.5\n", encoding="utf-8")
    assert read_pair_rows(tmp_path / "p.tsv") == read_pair_rows(tmp_path / "p.jsonl") == [PairRow("q", "p", ("n1",))]
    assert read_pair_rows(tmp_path / "s.tsv") == [PairRow("a", "b", (), 3.5)]


def _write_rows(path: Path, rows: list[PairRow]) -> Path:
    path.write_text("anchor\tpositive\tnegative\n" + "".join(f"{r.anchor}\t{r.positive}\t{r.negatives[0]}\n"
                                                             for r in rows), encoding="utf-8")
    return path


def test_a_tiny_run_learns_the_pairs_and_reloads_in_sentence_transformers(tiny_dir, pair_rows, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from bertkit.embed import embed_texts, load_encoder
    from bertkit.finetune.task import Runtime
    from bertkit.model import BertModel
    from bertkit.st import model_pooling
    from bertkit.tokenizer import Tokenizer

    rows = _write_rows(tmp_path / "pairs.tsv", pair_rows)
    task = EmbeddingTask(Tokenizer.from_pretrained(tiny_dir), 32, pooling="max")
    dev = task.prepare(pair_rows)
    before = task.score(dev, task.predict(BertModel.from_pretrained(tiny_dir), dev, Runtime(torch.device("cpu"))))
    out = tmp_path / "out"
    assert run_cli("finetune", "--model", tiny_dir, "--task", "embedding", "--train", rows, "--dev", rows, "--out", out,
                   "--epochs", "40", "--batch-size", "13", "--lr", "1e-2", "--warmup", "0", "--seeds", "1",
                   "--no-progress", "--pooling", "max", "--normalize", "--grad-cache", "5",
                   "--matryoshka-dims", "32,16", "--max-seq-len", "32") == 0
    seed = json.loads((out / "results.json").read_text())["seeds"][0]
    assert np.mean(seed["train_loss"][-5:]) < 0.5 * np.mean(seed["train_loss"][:5]), seed["train_loss"]
    assert seed["dev"]["mrr@10"] > before["mrr@10"] + 0.3 and seed["dev"]["mrr@10"] > 0.8, (before, seed["dev"])
    model_dir = out / "model"
    assert model_pooling(model_dir) == ("max", 32)
    texts = [r.anchor for r in pair_rows] + ["the movie was good", "berlin"]
    model, tok = load_encoder(model_dir)
    ours = embed_texts(model, tok, texts, pooling="max", normalize=True, progress=False)
    theirs = st.SentenceTransformer(str(model_dir), device="cpu").encode(texts, convert_to_numpy=True)
    assert _max_diff(ours, theirs) < 1e-5
    assert np.allclose(np.linalg.norm(theirs, axis=1), 1.0, atol=1e-5)  # the saved Normalize module


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sentence_transformers_pools_as_the_saved_files_say(tiny_dir, tmp_path, pooling):
    st = pytest.importorskip("sentence_transformers")
    from bertkit.embed import embed_texts, load_encoder
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tiny_dir)
    model, _ = load_encoder(tiny_dir)
    EmbeddingTask(tok, 64, pooling=pooling).save_model(model, tmp_path, tok)
    assert not (tmp_path / "2_Normalize").exists()
    texts = ["the film was awful , really", "a", "john and mary in paris ?"]
    ours = embed_texts(model, tok, texts, pooling=pooling, progress=False)
    theirs = st.SentenceTransformer(str(tmp_path), device="cpu").encode(texts, convert_to_numpy=True)
    assert _max_diff(ours, theirs) < 1e-5


@pytest.mark.parametrize("loss", ["bce", "listwise"])
def test_reranker_loads_in_cross_encoder_and_scores_identically(tiny_dir, rerank_rows, tmp_path, loss, capsys):
    st = pytest.importorskip("sentence_transformers")
    from bertkit.search.rerank import Reranker

    pair_rows = rerank_rows
    rows = _write_rows(tmp_path / "pairs.tsv", pair_rows)
    out = tmp_path / "out"
    extra = ("--pos-weight", "2") if loss == "bce" else ()
    assert run_cli("finetune", "--model", tiny_dir, "--task", "rerank", "--train", rows, "--dev", rows, "--out", out,
                   "--epochs", "30", "--batch-size", "13", "--lr", "1e-2", "--warmup", "0", "--seeds", "1",
                   "--no-progress", "--loss", loss, *extra) == 0
    results = json.loads((out / "results.json").read_text())
    seed = results["seeds"][0]
    assert np.mean(seed["train_loss"][-5:]) < 0.5 * np.mean(seed["train_loss"][:5]), seed["train_loss"]
    assert seed["dev"]["mrr@10"] == 1.0
    assert_same_metrics(results, evaluate(capsys, out / "model", "rerank", rows))
    query, passages = pair_rows[0].anchor, [t for r in pair_rows for t in r.texts[1:]]
    candidates = [{"id": str(i), "text": p, "score": 0.0} for i, p in enumerate(passages)]
    hits = Reranker(out / "model").rerank(query, candidates)
    ours = [h["rerank_score"] for h in sorted(hits, key=lambda h: int(h["id"]))]
    cross = st.CrossEncoder(str(out / "model"), device="cpu")
    theirs = cross.predict([(query, p) for p in passages])
    assert _max_diff(ours, theirs) < 1e-5
    assert {h["text"] for h in hits[:len(pair_rows)]} == {r.positive for r in pair_rows}


def test_rerank_task_scores_ties_against_the_positive(tiny_dir, pair_rows):
    from bertkit.tokenizer import Tokenizer

    task = RerankTask(Tokenizer.from_pretrained(tiny_dir), 32)
    data = task.prepare(pair_rows)
    assert task.score(data, [[0.0, 0.0]] * len(pair_rows))["mrr@10"] == 0.5
    assert task.score(data, [[1.0, 0.0]] * len(pair_rows))["mrr@10"] == 1.0


def test_scored_rows_train_with_cosent_and_evaluate_reproduces_the_dev_scores(tiny_dir, tmp_path, capsys):
    from finetune_helpers import finetune, write_stsb

    write_stsb(tmp_path / "train.tsv", 24, 0)  # GLUE's STS-B layout: sentence1, sentence2, score
    write_stsb(tmp_path / "dev.tsv", 12, 1)
    results = finetune(tiny_dir, tmp_path / "out", "embedding", tmp_path / "train.tsv", tmp_path / "dev.tsv",
                       "--pooling", "mean")
    assert results["main_metric"] == "spearman" and "pearson" in results["seeds"][0]["dev"]
    settings = json.loads((tmp_path / "out" / "model" / "finetune.json").read_text())
    assert settings["loss"] == "cosent" and settings["pooling"] == "mean"
    assert_same_metrics(results, evaluate(capsys, tmp_path / "out" / "model", "embedding", tmp_path / "dev.tsv"))


def _brute_force_cost(lengths, max_groups, group_cost):
    """The least padded cost over every split of the length-sorted rows into <= max_groups runs."""
    import itertools

    ls = sorted(lengths)
    best = float("inf")
    for k in range(1, max_groups + 1):
        for cuts in itertools.combinations(range(1, len(ls)), k - 1):
            edges = (0, *cuts, len(ls))
            best = min(best, sum((b - a) * ls[b - 1] + group_cost for a, b in itertools.pairwise(edges)))
    return best


def test_length_groups_are_the_cheapest_split():
    from bertkit.data.batching import length_groups

    rng = random.Random(3)
    for _ in range(40):
        lengths = [rng.choice([rng.randint(3, 20), rng.randint(60, 128)]) for _ in range(rng.randint(1, 9))]
        groups = length_groups(lengths, max_groups=3, group_cost=16)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        cost = sum(len(g) * max(lengths[i] for i in g) + 16 for g in groups)
        assert cost == _brute_force_cost(lengths, 3, 16)
    assert [len(g) for g in length_groups([15] * 32 + [128] * 32)] == [32, 32]  # questions, paragraphs
    assert len(length_groups([30, 31, 32, 33])) == 1  # not worth a second forward pass


def test_a_batch_is_embedded_in_length_groups_and_returned_in_row_order(tiny_dir):
    from bertkit.data.batching import collate
    from bertkit.embed import pool
    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tiny_dir)
    model = BertModel.from_pretrained(tiny_dir).eval()
    texts = [" ".join(NOUNS[: 2 + (7 * i) % 23]) if i % 2 else f"the {NOUNS[i]}" for i in range(12)]
    inputs = collate([{"input_ids": e.ids} for e in tok.encode_batch(texts, max_length=32)], tok.pad_id)
    widths = []
    hook = model.register_forward_pre_hook(lambda m, args, kwargs: widths.append(kwargs["input_ids"].shape[1]),
                                           with_kwargs=True)
    got = EmbeddingTask(tok, 32, pooling="mean").encode(model, inputs)
    hook.remove()
    assert len(widths) >= 2 and min(widths) < inputs["input_ids"].shape[1]  # short texts not padded to the longest
    with torch.no_grad():
        want = pool(model(**inputs).last_hidden_state, inputs["attention_mask"], "mean")
    assert _max_diff(got.detach(), want) < 1e-5


def test_a_new_head_on_a_near_zero_pooler_gets_a_note(tiny_dir, tmp_path):
    """all-MiniLM-L6-v2's pooler has weight std 0.009: a reranker on it learned nothing at lr 3e-5."""
    from bertkit.finetune.task import pooler_note
    from bertkit.heads import BertForSequenceClassification

    model = BertForSequenceClassification.from_pretrained(tiny_dir, id2label={0: "LABEL_0"})
    assert model.load_report["initialized"]
    torch.nn.init.normal_(model.encoder.pooler.weight, std=0.02)
    assert pooler_note(model) is None
    torch.nn.init.normal_(model.encoder.pooler.weight, std=0.009)
    assert "near zero (weight std 0.009)" in pooler_note(model)
    model.save_pretrained(tmp_path / "trained")
    assert pooler_note(BertForSequenceClassification.from_pretrained(tmp_path / "trained")) is None  # head not new
