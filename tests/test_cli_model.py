"""`bertkit info` and `bertkit fill-mask` through a subprocess, as a user types them.

Subprocesses are started together, since each spends most of its time importing torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

import bertkit
from bertkit.cli import main
from bertkit.fill_mask import fill_mask as predict
from bertkit.fill_mask import load_masked_lm


def start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "bertkit.cli", *map(str, args)], text=True, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory, bert_vocab):
    """A tiny random BertForMaskedLM with the bert-base-uncased vocabulary whose MLM bias makes
    "capital" the first guess and the piece "##s" the second, anywhere."""
    tok = bertkit.Tokenizer.from_pretrained(bert_vocab)
    config = bertkit.BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=37, max_position_embeddings=64)
    torch.manual_seed(0)
    model = bertkit.BertForMaskedLM(config)
    with torch.no_grad():
        model.mlm.bias[tok.vocab["capital"]] = 30.0
        model.mlm.bias[tok.vocab["##s"]] = 29.0
    path = tmp_path_factory.mktemp("mlm")
    model.save_pretrained(path, tokenizer=tok)
    return path


def test_info_and_fill_mask(minilm_dir, mlm_dir, capsys):
    info = start("info", minilm_dir, "--json")
    text = start("fill-mask", "--model", mlm_dir, "Paris is the [MASK] of France.", "--top-k", "3")

    rc, out, err = finish(info)
    assert rc == 0, err
    report = json.loads(out)
    assert report["parameters"] == 22_713_216
    assert report["heads"] == ["pooler"] and report["architectures"] == ["BertModel"]
    assert report["config"]["hidden_size"] == 384 and report["tokenizer"] is True

    rc, out, err = finish(text)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[:2] == ["Paris is the [MASK] of France.", "  [MASK] 1 (token 4)"]
    assert len(lines) == 5
    first, second = lines[2].split(), lines[3].split()
    assert first[:1] + first[2:] == ["capital", "paris", "is", "the", "capital", "of", "france."]
    assert float(first[1]) > 0.7
    assert second[0] == "##s" and "thes" in second  # a piece joins the word before it

    # The same entry point in this process (one subprocess less on a shared machine).
    assert main(["fill-mask", "--model", str(mlm_dir), "the [MASK] of [MASK].", "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert [m["position"] for m in item["masks"]] == [2, 4]
    tok, model = load_masked_lm(mlm_dir)
    expected = predict(model, tok, "the [MASK] of [MASK].", 5)
    for got, want in zip(item["masks"], expected):
        assert [g["token"] for g in got["guesses"]] == [g["token"] for g in want["guesses"]]
        assert [g["probability"] for g in got["guesses"]] == pytest.approx([g["probability"] for g in want["guesses"]])
    assert item["masks"][1]["guesses"][0]["text"] == "the [MASK] of capital."


def test_pretraining_dir_fills_masks(tmp_path, mlm_dir):
    """A BertForPreTraining directory works too: its NSP head is skipped, its MLM head kept."""
    tok, mlm = load_masked_lm(mlm_dir)
    pre = bertkit.BertForPreTraining(mlm.config)
    pre.mlm.load_state_dict(mlm.mlm.state_dict())
    pre.encoder.load_state_dict(mlm.encoder.state_dict(), strict=False)
    pre.save_pretrained(tmp_path, tokenizer=tok)
    _, model = load_masked_lm(tmp_path)
    assert "cls.seq_relationship.weight" in model.load_report["skipped"] and not model.load_report["initialized"]
    (got,), (want,) = predict(model, tok, "a [MASK].", 3), predict(mlm, tok, "a [MASK].", 3)
    assert [g["token"] for g in got["guesses"]] == [g["token"] for g in want["guesses"]]
    assert [g["probability"] for g in got["guesses"]] == pytest.approx([g["probability"] for g in want["guesses"]])


def test_errors_are_one_line(tmp_path, minilm_dir, mlm_dir):
    cases = {
        "no [MASK]": (start("fill-mask", "--model", mlm_dir, "no mask here"), "no [MASK] token"),
        "no MLM head": (start("fill-mask", "--model", minilm_dir, "a [MASK]."), "model has no masked-LM head"),
        "no config.json": (start("fill-mask", "--model", tmp_path, "a [MASK]."), "no config.json"),
    }
    for case, (proc, message) in cases.items():
        rc, out, err = finish(proc)
        assert rc == 2, f"{case}: exit {rc}, stderr {err!r}"
        assert len(err.splitlines()) == 1 and "Traceback" not in err, f"{case}: {err!r}"
        assert message in err and err.startswith("bertkit "), f"{case}: {err!r}"
        assert out == ""


def test_info_counts_old_checkpoints_once(tmp_path, capsys):
    """An old pytorch_model.bin also stores the MLM decoder (a copy of the word embeddings): info
    counts it once, and the loader drops the copy."""
    config = bertkit.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=37, max_position_embeddings=64)
    bertkit.BertForPreTraining(config).save_pretrained(tmp_path / "new")
    state = load_file(tmp_path / "new" / "model.safetensors")
    state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"].clone()
    state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"].clone()
    (tmp_path / "old").mkdir()
    shutil.copy(tmp_path / "new" / "config.json", tmp_path / "old")
    torch.save(state, tmp_path / "old" / "pytorch_model.bin")
    counts = []
    for name in ("new", "old"):
        assert main(["info", str(tmp_path / name), "--json"]) == 0
        counts.append(json.loads(capsys.readouterr().out)["parameters"])
    assert counts[0] == counts[1] == sum(t.numel() for t in state.values()) - 99 * 32 - 99
    model = bertkit.BertForPreTraining.from_pretrained(tmp_path / "old")
    assert torch.equal(model.mlm.bias[:99], state["cls.predictions.bias"])


def test_long_text_is_cut_once_with_a_note(tiny_dir, capsys):
    """[MASK] first and 10,000 words after: a short excerpt per guess, one note with the limit."""
    text = "[MASK] " + " ".join(["the movie was good ."] * 2000)
    assert main(["fill-mask", "--model", str(tiny_dir), text, "--top-k", "5"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "bertkit fill-mask: note: the text was cut to the model's 128 tokens\n"
    lines = captured.out.splitlines()
    assert len(lines) == 7 and len(captured.out) < 2000, captured.out[:500]
    assert lines[0].endswith(f"… ({len(text):,} characters)")
    guess = lines[2].split(maxsplit=2)[2]  # token, probability, then the words around the [MASK]
    assert guess.endswith(" …") and guess.count("movie") == 3  # the 16 pieces after the [MASK], not 126
    assert main(["fill-mask", "--model", str(tiny_dir), "the [MASK] was good .", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and json.loads(captured.out)[0]["cut_to"] is None
