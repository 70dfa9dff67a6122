"""`bertkit features`: per-token features from chosen layers, checked against the model's own
hidden states, and the .npz layout (no pickles)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit import BertConfig, BertForPreTraining, BertModel, Tokenizer
from bertkit.cli import main as cli

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away", "bird", "tree", "sun", "."]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A random 3-layer BERT (hidden 32, intermediate 37) and a 99-token vocabulary."""
    d = tmp_path_factory.mktemp("tiny-features")
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,'?!")
    vocab = list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *chars,
                                *(f"##{c}" for c in chars)]))[:99]
    (d / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    tok = Tokenizer.from_pretrained(d)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=64)
    torch.manual_seed(0)
    BertForPreTraining(config).save_pretrained(d, tokenizer=tok)
    return d


SENTENCES = ["the cat sat on the mat .", "", "a dog ran far far away", "zebra"]


def _export(tiny_dir, tmp_path, *extra) -> dict:
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "f.npz"
    code = cli(["features", "--model", str(tiny_dir), "--input", str(tmp_path / "in.txt"), "--out", str(out),
                "--batch-size", "3", *extra])
    assert code == 0
    with np.load(out) as f:  # allow_pickle=False by default: no object arrays inside
        return {k: f[k] for k in f.files}


def _reference(tiny_dir) -> tuple[list, list]:
    model = BertModel.from_pretrained(tiny_dir).eval()
    tok = Tokenizer.from_pretrained(tiny_dir)
    states, tokens = [], []
    with torch.no_grad():
        for s in SENTENCES:
            e = tok.encode(s)
            out = model(torch.tensor([e.ids]), output_hidden_states=True)
            states.append([h[0] for h in out.hidden_states])  # L+1 x (T, C)
            tokens.append(e.tokens)
    return states, tokens


def test_concat_of_last_layers_matches_hidden_states(tiny_dir, tmp_path):
    got = _export(tiny_dir, tmp_path, "--layers=-2,-1,0", "--combine", "concat")
    states, tokens = _reference(tiny_dir)
    lengths = [len(t) for t in tokens]
    assert got["features"].dtype == np.float32
    assert got["features"].shape == (sum(lengths), 3 * 32)
    assert got["offsets"].tolist() == np.concatenate([[0], np.cumsum(lengths)]).tolist()
    assert got["tokens"].tolist() == [t for ts in tokens for t in ts]
    assert got["layers"].tolist() == [-2, -1, 0] and str(got["combine"]) == "concat"
    for i, h in enumerate(states):
        rows = got["features"][got["offsets"][i] : got["offsets"][i + 1]]
        want = torch.cat([h[-2], h[-1], h[0]], dim=-1).numpy()
        diff = np.abs(rows - want).max()
        assert diff < 1e-5, f"sentence {i}: max |difference| {diff}"


def test_sum_combines_layers_and_bad_layer_exits_2(tiny_dir, tmp_path, capsys):
    got = _export(tiny_dir, tmp_path, "--layers=-4,-3,-2,-1", "--combine", "sum")
    states, _ = _reference(tiny_dir)
    assert got["features"].shape[1] == 32
    want = np.concatenate([sum(h[-4:]).numpy() for h in states])
    assert np.abs(got["features"] - want).max() < 1e-5
    capsys.readouterr()
    code = cli(["features", "--model", str(tiny_dir), "--input", str(tmp_path / "in.txt"),
                "--out", str(tmp_path / "g.npz"), "--layers=-5"])
    assert code == 2 and "layer -5" in capsys.readouterr().err
    assert not (tmp_path / "g.npz").exists()


def test_long_inputs_are_cut_with_one_note_and_overwrite_replaces(tiny_dir, tmp_path, capsys):
    """embed and features cut inputs longer than the limit (or the model's 64 positions) and say
    how many, once; an existing output is replaced only with --overwrite."""
    source = tmp_path / "in.txt"
    source.write_text("the cat sat .\n" + " ".join(["the dog ran far away ."] * 30) + "\na bird\n", encoding="utf-8")
    embed = ["embed", "--model", str(tiny_dir), "--input", str(source), "--pooling", "mean", "--out",
             str(tmp_path / "v.npy")]
    features = ["features", "--model", str(tiny_dir), "--input", str(source), "--out", str(tmp_path / "f.npz")]
    assert cli([*embed, "--max-length", "16"]) == 0
    err = capsys.readouterr().err
    assert ("bertkit embed: note: 1 of 3 inputs were longer than 16 tokens and were cut to them (--long-inputs "
            "windows reads them whole)\n") in err, err
    assert err.count("note:") == 1
    assert cli([*features, "--layers", "-1"]) == 0  # the default 128 is above the model's 64: cut to those
    err = capsys.readouterr().err
    assert err.count("note:") == 1 and "1 of 3 inputs were longer than 64 tokens" in err, err
    with np.load(tmp_path / "f.npz") as f:
        assert np.diff(f["offsets"]).max() == 64
    first = np.load(tmp_path / "v.npy")
    assert cli([*embed, "--max-length", "8"]) == 2
    assert "v.npy: exists; pass --overwrite" in capsys.readouterr().err
    assert np.array_equal(np.load(tmp_path / "v.npy"), first)
    assert cli([*embed, "--max-length", "8", "--overwrite"]) == 0
    assert not np.array_equal(np.load(tmp_path / "v.npy"), first)
