"""Continued pretraining (`bertkit pretrain --init-from DIR`): the run starts from DIR's weights,
with or without an MLM head (a new one is tied to the word embeddings, and the run says so),
keeps DIR's tokenizer (data prepared with another is refused) and resumes as any run does."""

from __future__ import annotations

import json

import torch

from bertkit import BertConfig, BertForMaskedLM, BertModel, Tokenizer
from bertkit.cli import main
from pretrain_helpers import TINY, weights

LOW_LR = ("--lr", "1e-9", "--warmup", "0")  # two steps that barely move the weights


def _encoder_dir(pretraining_data, path, head: type = BertModel):
    """A random tiny model on the pretraining data's vocabulary, saved with `head` (HF format)."""
    tok = Tokenizer.from_pretrained(pretraining_data / "tok")
    config = BertConfig(vocab_size=len(tok), **TINY)
    torch.manual_seed(7)
    model = head(config)
    model.save_pretrained(path, tokenizer=tok)
    return model


def _args(pretraining_data, init, out, *extra):
    return ["pretrain", "--data", str(pretraining_data / "packed"), "--out", str(out), "--objective", "mlm",
            "--init-from", str(init), "--batch-size", "13", "--eval-samples", "0", *extra]


def test_starts_from_an_encoder_without_mlm_head_and_says_so(pretraining_data, tmp_path, capsys):
    init = tmp_path / "init"
    _encoder_dir(pretraining_data, init)
    assert main(_args(pretraining_data, init, tmp_path / "run", "--steps", "2", *LOW_LR)) == 0
    out = capsys.readouterr().out
    assert "no masked-LM head there, so it starts new with its decoder tied to the word embeddings" in out
    before, after = weights(init), weights(tmp_path / "run" / "model")
    for key, tensor in before.items():  # every encoder tensor continues from DIR's, not from a fresh init
        if "pooler" not in key:
            assert (after["bert." + key] - tensor).abs().max() < 1e-6, key
    model = BertForMaskedLM.from_pretrained(tmp_path / "run" / "model")
    assert model.mlm.word_embeddings.weight is model.encoder.embeddings.word.weight
    assert Tokenizer.from_pretrained(tmp_path / "run" / "model").fingerprint == \
        Tokenizer.from_pretrained(init).fingerprint


def test_keeps_an_existing_mlm_head(pretraining_data, tmp_path, capsys):
    init = tmp_path / "init"
    source = _encoder_dir(pretraining_data, init, BertForMaskedLM)
    assert main(_args(pretraining_data, init, tmp_path / "run", "--steps", "2", *LOW_LR)) == 0
    assert "masked-LM head loaded" in capsys.readouterr().out
    trained = BertForMaskedLM.from_pretrained(tmp_path / "run" / "model")
    assert (trained.mlm.dense.weight - source.mlm.dense.weight).abs().max() < 1e-6


def test_nsp_objective_adds_a_new_nsp_head(pretraining_data, tmp_path, capsys):
    init = tmp_path / "init"
    _encoder_dir(pretraining_data, init, BertForMaskedLM)
    args = _args(pretraining_data, init, tmp_path / "run", "--steps", "2")
    args[args.index("mlm")] = "mlm+nsp"
    args[args.index(str(pretraining_data / "packed"))] = str(pretraining_data / "nsp")
    assert main(args) == 0
    assert "new: next-sentence" in capsys.readouterr().out
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert saved["architectures"] == ["BertForPreTraining"] and saved["hidden_size"] == TINY["hidden_size"]


def test_resume_continues_an_initialised_run_bit_for_bit(pretraining_data, tmp_path, capsys):
    import shutil

    init = tmp_path / "init"
    _encoder_dir(pretraining_data, init)
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert main(_args(pretraining_data, init, straight, "--steps", "4")) == 0
    assert main(_args(pretraining_data, init, run, "--steps", "4", "--save-every", "2", "--keep", "0")) == 0
    shutil.rmtree(run / "checkpoints" / "step-0000004")  # as if the run had stopped after step 2
    shutil.rmtree(run / "model")
    capsys.readouterr()
    assert main(_args(pretraining_data, init, run, "--steps", "4", "--resume")) == 0
    assert "resuming from" in capsys.readouterr().out
    record = json.loads((run / "config.json").read_text())
    assert record["train"]["init_from"] == str(init) and record["resumes"][0]["step"] == 2
    a, b = weights(run / "model"), weights(straight / "model")
    assert all(torch.equal(a[k], b[k]) for k in a)
