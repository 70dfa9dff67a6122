"""Sentence vectors: pooling and layer choice by hand, batching that never changes a row, the
encoder read out of any head's directory, and `bertkit embed` as a user runs it, matched against
transformers' mean-pooled all-MiniLM-L6-v2 vectors (the sentence-transformers recipe)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from bertkit import BertConfig, BertForSequenceClassification, Tokenizer, UserError
from bertkit.embed import embed_texts, load_encoder, pool, select_layers
from bertkit.tokenizer import SPECIAL_TOKENS

SENTENCES = [
    "A man is playing a guitar.",
    "Hi.",
    "The quick brown fox jumps over the lazy dog, while the cat, which had been asleep on the warm "
    "windowsill all afternoon, slowly opened one eye and watched the commotion with mild contempt.",
    "Stocks fell sharply on Tuesday after the central bank raised interest rates by half a point.",
    "it 's a charming and often affecting journey .",
    "Naïve café résumés aren't always accurate!",
    "Water boils at 100 degrees Celsius at sea level.",
    "What time does the train to Edinburgh leave?",
    "She sells sea shells by the sea shore.",
    "The committee, after three days of deliberation and several heated exchanges between its members, "
    "finally agreed to postpone the vote until the spring session, citing a lack of reliable data on "
    "the long-term costs of the proposal and the need to consult the regional governments first.",
    "ok",
]


def _bertkit(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bertkit.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _max_diff(a, b) -> str:
    d = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return f"max diff {d.max():.2e}, mean diff {d.mean():.2e}"


# ---- pooling and layers, by hand ----

def test_pool_by_hand():
    torch.manual_seed(0)
    B, T, C = 3, 7, 5
    lengths = [7, 4, 1]
    mask = torch.tensor([[1] * n + [0] * (T - n) for n in lengths])  # (B, T)
    hidden = torch.randn(B, T, C)
    hidden[mask == 0] = 1e4  # padding must never reach a mean or a max
    for b, n in enumerate(lengths):
        rows = hidden[b, :n].tolist()
        cls = rows[0]
        mean = [sum(r[c] for r in rows) / n for c in range(C)]
        top = [max(r[c] for r in rows) for c in range(C)]
        assert pool(hidden, mask, "cls")[b].tolist() == pytest.approx(cls)
        assert pool(hidden, mask, "mean")[b].tolist() == pytest.approx(mean, rel=1e-6)
        assert pool(hidden, mask, "max")[b].tolist() == pytest.approx(top)
    assert pool(hidden, mask, "mean").shape == (B, C)
    with pytest.raises(ValueError):
        pool(hidden, mask, "median")


def test_select_layers():
    states = tuple(torch.full((2, 3, 5), float(i)) for i in range(4))  # embeddings + 3 layers
    both = select_layers(states, [-1, 0], "concat")
    assert both.shape == (2, 3, 10)
    assert both[0, 0].tolist() == [3.0] * 5 + [0.0] * 5
    assert select_layers(states, [1, 2, 3], "sum")[1, 2].tolist() == [6.0] * 5
    assert select_layers(states, [1, 2, 3], "mean")[1, 2].tolist() == [2.0] * 5
    with pytest.raises(UserError, match="layer 4 does not exist"):
        select_layers(states, [4])
    with pytest.raises(UserError, match="layer -5"):
        select_layers(states, [-5])


# ---- the library on the real checkpoint ----

@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return load_encoder(minilm_dir)


def test_batching_keeps_rows_and_order(minilm):
    model, tokenizer = minilm
    texts = [SENTENCES[i] for i in (0, 1, 2, 5)]
    one_by_one = np.stack([embed_texts(model, tokenizer, [t], pooling="max", progress=False)[0] for t in texts])
    batched = embed_texts(model, tokenizer, texts, pooling="max", batch_size=3, progress=False)
    assert batched.dtype == np.float32 and batched.shape == (4, 384)
    assert np.allclose(batched, one_by_one, atol=1e-5), _max_diff(batched, one_by_one)
    assert not model.training


def test_cls_and_layers_match_the_encoder_hidden_states(minilm):
    model, tokenizer = minilm
    texts = SENTENCES[:4]
    ours = embed_texts(model, tokenizer, texts, pooling="cls", layers=[-1, 0], batch_size=2, progress=False)
    for i, text in enumerate(texts):
        ids = torch.tensor([tokenizer.encode(text).ids])
        with torch.no_grad():
            states = model(ids, output_hidden_states=True).hidden_states
        expected = torch.cat([states[-1][0, 0], states[0][0, 0]]).numpy()  # (2C,): last layer | embeddings
        assert np.allclose(ours[i], expected, atol=1e-5), _max_diff(ours[i], expected)


def test_empty_list_and_bad_layer(minilm):
    model, tokenizer = minilm
    assert embed_texts(model, tokenizer, [], pooling="mean", layers=[-1, -2], progress=False).shape == (0, 768)
    with pytest.raises(UserError, match="layer 7 does not exist"):
        embed_texts(model, tokenizer, ["x"], pooling="mean", layers=[7], progress=False)


def test_load_encoder_reads_encoder_of_a_head_checkpoint(tmp_path):
    vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, *"abcdefghij"])}
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=64).with_labels(["no", "yes"])
    classifier = BertForSequenceClassification(config)
    classifier.save_pretrained(tmp_path, tokenizer=Tokenizer(vocab))
    encoder, tokenizer = load_encoder(tmp_path)
    assert tokenizer.vocab == vocab
    mine, theirs = encoder.state_dict(), classifier.encoder.state_dict()
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert torch.equal(mine[name], theirs[name]), name
    vectors = embed_texts(encoder, tokenizer, ["a b c", "j"], pooling="mean", max_length=1000, progress=False)
    assert vectors.shape == (2, 32)


# ---- the command line ----

def test_embed_cli_mean_normalized_matches_transformers(minilm_dir, tmp_path):
    transformers = pytest.importorskip("transformers")
    source = tmp_path / "sentences.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "vectors"  # no suffix: the file must keep exactly this name
    proc = _bertkit("embed", "--model", str(minilm_dir), "--input", str(source), "--pooling", "mean",
                    "--normalize", "--batch-size", "4", "--precision", "fp32", "--out", str(out))
    # the reference runs while the subprocess starts up
    hf_tok = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
    hf_model = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
    batch = hf_tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = hf_model(**batch).last_hidden_state  # (N, T, C)
    weights = batch["attention_mask"][..., None].float()
    expected = torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=-1).numpy()
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert f"wrote {len(SENTENCES)} x 384 float32 vectors" in stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentences.txt", "vectors"]
    got = np.load(out)
    assert got.shape == (len(SENTENCES), 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    assert np.abs(got - expected).max() < 1e-5, _max_diff(got, expected)


def _error_cases(minilm_dir, tmp_path) -> dict:
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("fine\ncaf\xe9\n".encode("latin-1"))
    (tmp_path / "blank.txt").write_text("one\ntwo\n\nfour\n", encoding="utf-8")
    (tmp_path / "good.txt").write_text("one\n", encoding="utf-8")
    (tmp_path / "not-a-model").mkdir()
    return {
        "latin1.txt:2: not valid UTF-8": (minilm_dir, tmp_path / "latin1.txt"),
        "not-a-model: no config.json": (tmp_path / "not-a-model", tmp_path / "good.txt"),
        "missing.txt: no such file": (minilm_dir, tmp_path / "missing.txt"),
        "empty.txt: empty file": (minilm_dir, tmp_path / "empty.txt"),
        "blank.txt:3: blank line": (minilm_dir, tmp_path / "blank.txt"),
    }


def test_embed_cli_errors(minilm_dir, tmp_path, capsys):
    from bertkit.cli import main

    cases = _error_cases(minilm_dir, tmp_path)
    argv = {expected: ["embed", "--model", str(model), "--input", str(source), "--pooling", "cls",
                       "--out", str(tmp_path / "out.npy")] for expected, (model, source) in cases.items()}
    # one as a user types it (a run spends most of its time importing torch) ...
    expected = "latin1.txt:2: not valid UTF-8"
    proc = _bertkit(*argv[expected])
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    assert stderr.startswith("bertkit embed: error: ") and expected in stderr, stderr
    # ... and the rest through the same entry point in this process
    for expected in list(cases)[1:]:
        assert main(argv[expected]) == 2, expected
        stderr = capsys.readouterr().err
        assert stderr.count("\n") == 1 and stderr.startswith("bertkit embed: error: ") and expected in stderr, stderr
    assert not (tmp_path / "out.npy").exists()


# ---- a folder or a pattern: shards, with the base install (no pyarrow) ----

def test_a_folder_or_pattern_is_embedded_into_npy_shards_without_pyarrow(tiny_dir, tmp_path, capsys, monkeypatch):
    """No --shards and no pyarrow (`pip install -e .`): a folder (or glob) writes .npy shards with
    their ids to --out, says so in one line, and records the format in the manifest."""
    import json

    from bertkit.cli import main

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as the base install: `import pyarrow` fails
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    texts = ["good movie", "bad plot", "the actor", "a scene and a film", "fine"]
    (corpus / "a.txt").write_text("\n".join(texts[:3]) + "\n", encoding="utf-8")
    (corpus / "b.txt").write_text("\n".join(texts[3:]) + "\n", encoding="utf-8")
    model, tok = load_encoder(tiny_dir)
    want = embed_texts(model, tok, texts, pooling="mean", max_length=32, progress=False)
    flags = ["--model", str(tiny_dir), "--pooling", "mean", "--max-length", "32", "--precision", "fp32",
             "--no-progress"]
    for given, out in ((str(corpus), tmp_path / "vecs"), (str(corpus / "*.txt"), tmp_path / "globbed")):
        assert main(["embed", *flags, "--input", given, "--out", str(out)]) == 0
        err = capsys.readouterr().err
        assert f"bertkit embed: --input is a corpus: writing its vectors as shards (npy, with their ids and a " \
               f"manifest) to the folder {out}" in err, err
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["complete"] and manifest["shard_format"] == "npy" and manifest["count"] == 5
        ids = [i for n in (0, 1) for i in json.loads((out / f"shard-00000{n}.ids.json").read_text())]
        got = np.concatenate([np.load(out / f"shard-00000{n}.npy") for n in (0, 1)])
        assert ids == ["a.txt:1", "a.txt:2", "a.txt:3", "b.txt:1", "b.txt:2"]
        assert np.abs(got - want).max() < 1e-5, _max_diff(got, want)
    one = tmp_path / "one"  # --shards asked for, of one file: the same default format, nothing more said
    assert main(["embed", *flags, "--shards", "--input", str(corpus / "a.txt"), "--out", str(one)]) == 0
    assert "--input is a corpus" not in capsys.readouterr().err
    assert json.loads((one / "manifest.json").read_text())["shard_format"] == "npy"
    for argv, expected in (
            (["--input", str(corpus), "--out", str(tmp_path / "v.npy")], "give --out a folder, not a .npy file"),
            (["--input", str(corpus), "--out", str(tmp_path / "p"), "--format", "parquet"],
             "--format parquet needs pyarrow (pip install 'bertkit[parquet]'); or pass --format npy")):
        assert main(["embed", *flags, *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "v.npy").exists() and not (tmp_path / "p").exists()
