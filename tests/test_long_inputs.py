"""Long inputs (`bertkit.long_inputs`): the window arithmetic on hand-made examples, and each
consumer checked against the same computation done by hand: chunk-and-pool, token features,
classification trained and evaluated on windows (its aggregation kept through save and load),
NER tagged from each token's most central window, best-chunk search, and a 100,000-token input
within a memory bound. The served routes are in test_serve_long_inputs.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertkit.errors import UserError
from bertkit.long_inputs import Plan, Policy, best_chunk, max_context_window, pool_chunks, window_starts
from bertkit.subword import Template
from finetune_helpers import ENV, evaluate, finetune, run_cli, sentence


def _dense_max_context(starts, window, n):
    """BERT's rule as SQuAD's reference code writes it: a (windows, tokens) score matrix."""
    token = np.arange(n)[None, :]
    start = np.asarray(starts)[:, None]
    stop = np.minimum(start + window, n)
    score = np.minimum(token - start, stop - 1 - token) + 0.01 * (stop - start)
    return np.argmax(np.where((token >= start) & (token < stop), score, -np.inf), axis=0)


# ---- the window arithmetic, by hand ----
def test_window_boundaries_and_the_max_context_rule_by_hand():
    assert window_starts(10, 4, 2) == [0, 2, 4, 6]  # windows 0-3, 2-5, 4-7, 6-9
    assert window_starts(4, 4, 2) == [0] and window_starts(5, 4, 2) == [0, 2] and window_starts(0, 4, 2) == [0]
    assert window_starts(10, 4, 9) == [0, 4, 8]  # a stride longer than the window steps by the window
    # token 3 sits at window 0's right edge and is central in window 1 (1 left, 2 right): window 1;
    # token 2 has 2 left and 1 right in window 0, 0 left in window 1: window 0
    assert max_context_window([0, 2, 4, 6], 4, 10).tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]
    # token 4 has 1 token of context on its short side in both windows: a tie goes to the earlier
    # window, and to the longer one when the last window is shorter (0.01 x the window's length)
    assert max_context_window([0, 3], 6, 9).tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert max_context_window([0, 3], 6, 8).tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, window = int(rng.integers(0, 60)), int(rng.integers(1, 12))
        starts = window_starts(n, window, int(rng.integers(1, 14)))
        assert max_context_window(starts, window, n).tolist() == _dense_max_context(starts, window, n).tolist()


class _Tok:
    """BERT's layout by hand: [CLS] A [SEP] (B [SEP]), the second text's type id 1."""

    pad_id = 0
    template = Template(single=(((101, 0),), ((102, 0),)), pair=(((101, 0),), ((102, 0),), ((102, 1),)),
                        second_type=1)


def test_plan_rows_carry_the_first_segment_and_gather_takes_each_token_from_its_central_window():
    plan = Plan([list(range(1, 11))], 6, _Tok(), stride=2)  # windows of 4 content tokens, 2 apart
    assert [plan.row(r)[0] for r in range(len(plan))] == [
        [101, 1, 2, 3, 4, 102], [101, 3, 4, 5, 6, 102], [101, 5, 6, 7, 8, 102], [101, 7, 8, 9, 10, 102]]
    assert plan.lengths.tolist() == [6, 6, 6, 6] and plan.long(0)
    outputs = [np.full(6, r) for r in range(len(plan))]  # each row's outputs say which row they came from
    assert plan.gather(0, outputs).tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 3]  # [CLS] first row, [SEP] last
    pair = Plan([list(range(1, 8))], 8, _Tok(), prefixes=[[50, 51]], stride=2)  # 8 - 3 - 2 = 3 per window
    ids, types = pair.row(0)
    assert ids == [101, 50, 51, 102, 1, 2, 3, 102] and types == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [pair.row(r)[0][4:-1] for r in range(len(pair))] == [[1, 2, 3], [3, 4, 5], [5, 6, 7]]
    long_prefix = Plan([[1]], 9, _Tok(), prefixes=[list(range(60, 70))])  # cut to half the limit: 3 tokens
    assert long_prefix.row(0)[0] == [101, 60, 61, 62, 102, 1, 102] and long_prefix.report("windows").prefix_cut == 1
    cut = Plan([list(range(1, 11))], 6, _Tok(), first_only=True)
    assert len(cut) == 1 and cut.row(0)[0] == [101, 1, 2, 3, 4, 102] and cut.report("truncate").long == 1
    with pytest.raises(UserError, match="--window-stride 5 is longer than a window"):
        Plan([list(range(20))], 6, _Tok(), stride=5)
    with pytest.raises(UserError, match="input 1 has 21 tokens; windows read at most 20"):
        Plan([list(range(21))], 6, _Tok(), max_tokens=20)


def test_aggregation_and_pooling_by_hand():
    vectors = np.array([[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(pool_chunks(vectors, [3, 1], False), [0.75, 0.25])
    np.testing.assert_allclose(pool_chunks(vectors, [3, 1], True), np.array([3, 1]) / np.sqrt(10), rtol=1e-6)
    scores = np.array([[0.1, 0.9, 0.3, 0.2], [0.5, 0.4, 0.0, 0.8]])
    np.testing.assert_allclose(best_chunk(scores, np.array([0, 0, 2, 2]), 3),
                               [[0.9, -np.inf, 0.3], [0.5, -np.inf, 0.8]])


# ---- embeddings and token features ----
def test_chunk_and_pool_equals_averaging_by_hand(tiny_dir):
    from bertkit.embed import embed_texts, load_encoder, pool

    model, tok = load_encoder(tiny_dir)
    long = " ".join(sentence(__import__("random").Random(i), i % 2 == 0) for i in range(12))  # ~84 tokens
    ids = tok.encode_ids_batch([long])[0]
    got = embed_texts(model, tok, ["a film", long], pooling="mean", normalize=True, max_length=32,
                      policy=Policy("windows", stride=20), progress=False)
    by_hand, weights = [], []
    for start in window_starts(len(ids), 30, 20):
        row = torch.tensor([[tok.cls_id, *ids[start:start + 30], tok.sep_id]])
        with torch.no_grad():
            v = pool(model(row).last_hidden_state, torch.ones_like(row), "mean")[0].numpy()
        by_hand.append(v / np.linalg.norm(v))
        weights.append(row.shape[1])
    expected = (np.array(by_hand) * np.array(weights)[:, None]).sum(0) / sum(weights)
    np.testing.assert_allclose(got[1], expected / np.linalg.norm(expected), atol=1e-5)
    short = embed_texts(model, tok, ["a film"], pooling="mean", normalize=True, max_length=32, progress=False)
    np.testing.assert_allclose(got[0], short[0], atol=1e-6)  # a short text is one window: unchanged
    chunks, owner = embed_texts(model, tok, ["a film", long], pooling="mean", normalize=True, max_length=32,
                                policy=Policy("windows", stride=20), progress=False, chunks=True)
    assert owner.tolist() == [0] + [1] * len(by_hand)
    np.testing.assert_allclose(chunks[1:], by_hand, atol=1e-5)


def test_embed_and_features_clis_read_past_the_limit_and_say_so(tiny_dir, tmp_path, capsys):
    from bertkit.embed import load_encoder

    long = " ".join(["the film was very good ."] * 40)  # 240 tokens: over the tiny model's 128 positions
    (tmp_path / "in.txt").write_text(f"a film\n{long}\n", encoding="utf-8")
    assert run_cli("embed", "--model", tiny_dir, "--input", tmp_path / "in.txt", "--pooling", "mean",
                   "--out", tmp_path / "v.npy", "--long-inputs", "windows") == 0
    err = capsys.readouterr().err
    assert "1 of 2 inputs were longer than 128 tokens: read in 4 windows in all (stride 63)" in err, err
    assert run_cli("features", "--model", tiny_dir, "--input", tmp_path / "in.txt", "--out", tmp_path / "f.npz",
                   "--layers", "-1", "--long-inputs", "windows", "--max-length", "64") == 0
    saved = np.load(tmp_path / "f.npz")
    assert saved["offsets"].tolist() == [0, 4, 4 + 242] and saved["windows"].tolist() == [1, 7]
    assert list(saved["tokens"][4:7]) == ["[CLS]", "the", "film"] and saved["tokens"][-1] == "[SEP]"
    model, tok = load_encoder(tiny_dir)
    ids = tok.encode_ids_batch([long])[0]
    start = window_starts(len(ids), 62, 31)[-1]  # the last window: its last tokens are central nowhere else
    with torch.no_grad():
        last = model(torch.tensor([[tok.cls_id, *ids[start:], tok.sep_id]])).last_hidden_state[0].numpy()
    np.testing.assert_allclose(saved["features"][-20:], last[-20:], atol=1e-5)
    assert "1 of 2 inputs were longer than 64 tokens: read in 8 windows" in capsys.readouterr().err


# ---- classification and NER ----
def _long_sst2(path, n, seed):
    import random

    rng = random.Random(seed)
    rows = [(" ".join(sentence(rng, p) for _ in range(4)), int(p)) for p in (True, False) * (n // 2)]
    path.write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows), encoding="utf-8")


def test_a_classifier_trained_on_windows_keeps_its_aggregation_through_save_and_load(tiny_dir, tmp_path, capsys):
    from bertkit.heads import BertForSequenceClassification
    from bertkit.tokenizer import Tokenizer

    _long_sst2(tmp_path / "train.tsv", 32, 0)
    _long_sst2(tmp_path / "dev.tsv", 12, 1)
    results = finetune(tiny_dir, tmp_path / "run", "sst2", tmp_path / "train.tsv", tmp_path / "dev.tsv",
                       "--max-seq-len", "12", "--long-inputs", "windows", "--window-stride", "6",
                       "--aggregate", "max", "--lr", "1e-3")
    model, tok = BertForSequenceClassification.from_pretrained(tmp_path / "run" / "model"), \
        Tokenizer.from_pretrained(tmp_path / "run" / "model")
    texts = [line.split("\t")[0] for line in (tmp_path / "dev.tsv").read_text().splitlines()[1:]]
    plan = Plan(tok.encode_ids_batch(texts), 12, tok, stride=6)
    assert results["long_inputs_report"]["dev"] == {"policy": "windows", "limit": 12, "inputs": 12, "long": 12,
                                                    "windows": len(plan), "stride": 6, "first_segments_cut": 0}
    saved = json.loads((tmp_path / "run" / "model" / "finetune.json").read_text())
    assert (saved["long_inputs"], saved["window_stride"], saved["aggregate"]) == ("windows", 6, "max")
    got = evaluate(capsys, tmp_path / "run" / "model", "sst2", tmp_path / "dev.tsv", "--out", tmp_path / "p.tsv")
    saved_dev = results["seeds"][0]["dev"]
    assert got["accuracy"] == pytest.approx(saved_dev["accuracy"]) and got["long_inputs"]["aggregate"] == "max"
    with torch.no_grad():
        logits = [model(torch.tensor([plan.row(r)[0]])).logits[0].numpy() for r in range(len(plan))]
    by_hand = [str(int(np.max([logits[r] for r in plan.rows(i)], axis=0).argmax())) for i in range(len(texts))]
    written = [line.split("\t")[1] for line in (tmp_path / "p.tsv").read_text().splitlines()[1:]]
    assert written == by_hand
    mean = evaluate(capsys, tmp_path / "run" / "model", "sst2", tmp_path / "dev.tsv", "--aggregate", "mean")
    assert mean["long_inputs"]["aggregate"] == "mean"


def test_a_pair_task_carries_its_first_text_in_every_window(tiny_dir):
    from bertkit.data.glue import Example, glue_task
    from bertkit.finetune.sequence import SequenceTask
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tiny_dir)
    task = SequenceTask(glue_task("mrpc"), None, tok, 16)
    task.policy = Policy("windows", stride=4)
    long = " ".join(["the film was very good ."] * 4)  # 24 tokens
    data = task.prepare([Example("a", "a film", long, "1"), Example("b", "a film", "a film", "0")])
    first = tok.encode_ids_batch(["a film"])[0]
    assert all(f["input_ids"][:len(first) + 2] == [tok.cls_id, *first, tok.sep_id] for f in data.features)
    assert data.decoding.tolist() == [0] * (len(data.features) - 1) + [1]  # windows of 16 - 3 - 2 = 11 tokens
    assert [f["labels"] for f in data.features] == [1] * (len(data.features) - 1) + [0]
    assert len(data.features) - 1 == len(window_starts(24, 11, 4)) and data.long_inputs.long == 1


class _EdgeTagger(torch.nn.Module):
    """Tags B-PER at each row's first and last content token, O elsewhere: a token may come out
    B-PER only where no window holds it with more context."""

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        n = attention_mask.sum(1, keepdim=True)  # (B, 1)
        pos = torch.arange(input_ids.shape[1])[None, :]
        edge = (pos == 1) | (pos == n - 2)
        logits = torch.stack([(~edge).float(), edge.float(), torch.zeros_like(pos.expand_as(edge)).float()], -1)
        return SimpleNamespace(logits=logits)


def test_ner_windows_tag_each_token_from_the_window_where_it_is_central(tiny_dir):
    from bertkit.data.ner import Sentence
    from bertkit.finetune.ner import TokenTask
    from bertkit.finetune.task import Runtime
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tiny_dir)
    document = Sentence(["film"] * 50, ["O"] * 50)
    rt = Runtime(torch.device("cpu"), progress=False)
    windows = TokenTask(["O", "B-PER", "I-PER"], tok, 12, Policy("windows", stride=5))
    data = windows.prepare([document])
    assert len(data.features) == 9 and data.long_inputs.windows == 9
    tags = windows.predict(_EdgeTagger(), data, rt)[0]
    assert tags == ["B-PER"] + ["O"] * 48 + ["B-PER"]  # edges inside the document are read where central
    truncated = TokenTask(["O", "B-PER", "I-PER"], tok, 12)
    data = truncated.prepare([document])
    assert len(data.features) == 1 and data.cut == 1
    assert truncated.predict(_EdgeTagger(), data, rt)[0] == ["B-PER"] + ["O"] * 8 + ["B-PER"] + ["O"] * 40


def test_ner_fine_tuned_on_sentences_tags_whole_documents_in_windows(tiny_dir, tmp_path, capsys):
    from finetune_helpers import write_conll

    write_conll(tmp_path / "train.conll", 60, 0)
    write_conll(tmp_path / "dev.conll", 10, 1)
    finetune(tiny_dir, tmp_path / "ner", "ner", tmp_path / "train.conll", tmp_path / "dev.conll", "--lr", "5e-3",
             "--epochs", "3")
    lines = [line for line in (tmp_path / "dev.conll").read_text().splitlines() if line and "DOCSTART" not in line]
    (tmp_path / "doc.conll").write_text("\n".join(lines) + "\n", encoding="utf-8")  # one 60-word document
    sentences = evaluate(capsys, tmp_path / "ner" / "model", "ner", tmp_path / "dev.conll")
    whole = evaluate(capsys, tmp_path / "ner" / "model", "ner", tmp_path / "doc.conll", "--max-seq-len", "32",
                     "--long-inputs", "windows", "--window-stride", "10")
    cut = evaluate(capsys, tmp_path / "ner" / "model", "ner", tmp_path / "doc.conll", "--max-seq-len", "32")
    assert sentences["f1"] > 90 and whole["f1"] >= sentences["f1"] - 1 and cut["f1"] < 70, (sentences, whole, cut)
    assert whole["long_inputs"]["long"] == 1 and whole["long_inputs"]["windows"] > 1


# ---- retrieval ----
def test_index_with_chunks_scores_a_passage_by_its_best_chunk(tiny_dir, tmp_path, capsys):
    from bertkit.embed import embed_texts, load_encoder

    filler = " ".join(["the story was very dull ."] * 30)
    docs = [{"_id": "late", "text": f"{filler} paris berlin river city"}, {"_id": "short", "text": "a film"},
            {"_id": "plain", "text": filler}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    assert run_cli("index", "--model", tiny_dir, "--input", tmp_path / "c.jsonl", "--out", tmp_path / "idx",
                   "--best-chunk", "--max-length", "32", "--no-progress") == 0
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["chunks"] and meta["long_inputs"] == "windows" and meta["count"] == 3 and meta["vectors"] > 3
    capsys.readouterr()
    assert run_cli("search", "--index", tmp_path / "idx", "paris berlin river city", "--json", "-k", "3") == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    model, tok = load_encoder(tiny_dir)
    chunks, owner = embed_texts(model, tok, [d["text"] for d in docs], pooling="mean", normalize=True, max_length=32,
                                policy=Policy("windows"), progress=False, chunks=True)
    query = embed_texts(model, tok, ["paris berlin river city"], pooling="mean", normalize=True, progress=False)
    best = best_chunk(query @ chunks.T, owner, 3)[0]
    assert [h["id"] for h in hits] == [docs[i]["_id"] for i in np.argsort(-best, kind="stable")]
    np.testing.assert_allclose([h["score"] for h in hits], np.sort(best)[::-1], atol=1e-5)
    assert run_cli("index", "--model", tiny_dir, "--input", tmp_path / "c.jsonl", "--out", tmp_path / "graph",
                   "--best-chunk", "--max-length", "32", "--no-progress", "--ann-threshold", "0") == 0
    capsys.readouterr()
    assert run_cli("search", "--index", tmp_path / "graph", "paris berlin river city", "--json", "-k", "3") == 0
    graph = json.loads(capsys.readouterr().out)["hits"]  # through the HNSW graph: the same passages, once each
    assert [h["id"] for h in graph] == [h["id"] for h in hits]
    # two code paths (the graph's distance kernels, exact search's matmul): equal to rounding, not bit for bit
    np.testing.assert_allclose([h["score"] for h in graph], [h["score"] for h in hits], atol=1e-5)


# ---- a 100,000-token input ----
def test_a_100000_token_input_stays_within_a_memory_bound(tiny_dir):
    script = textwrap.dedent(f"""
        import json, resource, time
        from bertkit.embed import embed_texts, load_encoder, token_features
        from bertkit.long_inputs import Policy
        model, tok = load_encoder({str(tiny_dir)!r})
        text = " ".join(["film"] * 100_000)
        embed_texts(model, tok, ["warm up"], pooling="mean", progress=False)
        before, start, report = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.time(), {{}}
        vector = embed_texts(model, tok, [text], pooling="mean", normalize=True, max_length=128,
                             policy=Policy("windows"), progress=False, report=report)
        features, offsets, tokens = token_features(model, tok, [text], [-1], max_length=128, progress=False,
                                                   policy=Policy("windows"))
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        print(json.dumps({{"mb": grown, "s": time.time() - start, "windows": report["windows"],
                          "shape": list(features.shape), "vector": list(vector.shape)}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["windows"] == 1587 and got["shape"] == [100_002, 32] and got["vector"] == [1, 32]
    # the output itself is 100,002 x 32 floats (12.8 MB); a (windows x tokens) max-context matrix
    # would be 1.3 GB and every window's hidden states at once ~80 MB more
    assert got["mb"] < 120, got
    assert got["s"] < 120, got


def test_an_input_over_the_cap_is_refused_before_any_work(tiny_dir):
    from bertkit.embed import text_plan
    from bertkit.long_inputs import MAX_INPUT_TOKENS
    from bertkit.tokenizer import Tokenizer

    huge = " ".join(["film"] * (MAX_INPUT_TOKENS + 1))
    with pytest.raises(UserError, match="input 1 has 1,000,001 tokens; windows read at most 1,000,000 tokens of one "
                                        "input: split it into smaller documents"):
        text_plan(Tokenizer.from_pretrained(tiny_dir), [huge], 128, Policy("windows"))
