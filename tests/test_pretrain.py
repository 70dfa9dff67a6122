"""Pretraining: the objectives' labels, the data stream, overfitting one batch, the command."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from bertkit import BertConfig, BertForMaskedLM
from bertkit.cli import main
from bertkit.data import Masker, MaskingConfig
from bertkit.pretrain.loop import DataStream
from bertkit.pretrain.objective import Objective, next_token_labels
from pretrain_helpers import tiny_args


def test_next_token_labels_stop_at_padding():
    ids = torch.tensor([[2, 10, 11, 3, 0, 0, 0], [2, 12, 13, 14, 15, 16, 3]])
    mask = (ids != 0).long()
    want = torch.tensor([[10, 11, 3, -100, -100, -100, -100], [12, 13, 14, 15, 16, 3, -100]])
    assert torch.equal(next_token_labels(ids, mask), want)


def test_data_stream_is_a_fresh_permutation_per_epoch_and_resumable():
    stream = DataStream(13, seed=5)
    taken = np.concatenate([stream.take(7) for _ in range(4)])  # 28 = 2 epochs + 2
    assert sorted(taken[:13]) == list(range(13)) and sorted(taken[13:26]) == list(range(13))
    assert not np.array_equal(taken[:13], taken[13:26])
    again = DataStream(13, seed=5, position=14)
    assert np.array_equal(again.take(14), taken[14:28])
    assert not np.array_equal(DataStream(13, seed=6).take(13), taken[:13])


def test_overfits_one_batch(one_thread):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM(config)
    ids = torch.randint(5, 99, (13, 7))
    ids[:, 0], ids[:, -1] = 2, 3
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    masker = Masker(MaskingConfig(rate=0.3), 99, mask_id=4, special_ids=[0, 1, 2, 3, 4])
    objective = Objective("mlm", masker, seed=0)
    inputs = objective.prepare(batch, torch.device("cpu"), 0, 0)  # one fixed masking
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(100):
        sums = objective.loss_sums(model, inputs)
        loss = sums["token_loss"] / (inputs["labels"] != -100).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0], f"loss {losses[0]:.3f} -> {losses[-1]:.3f}"


def test_command_end_to_end(pretraining_data, tmp_path, capsys, one_thread):
    # In-process to spare a start-up; test_resume runs the command in child processes.
    out = tmp_path / "run"
    assert main(tiny_args(pretraining_data / "nsp", out, "--steps", "12", "--eval-every", "6",
                          "--save-every", "6", "--log-every", "4", "--eval-samples", "20")) == 0
    lines = [s for s in capsys.readouterr().out.splitlines() if s.startswith("step ")]
    assert len(lines) == 3 and len({len(s) for s in lines}) == 1  # fixed width
    assert re.match(r"step +4/12 +\| loss +\d+\.\d{4} \| lr .* \| gnorm .* tok/s \| mfu +- \| eta ", lines[0])
    records = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "val"] == [0, 6, 12]
    assert [r["step"] for r in records if r["kind"] == "train"] == [4, 8, 12]
    val = records[-1]
    assert {"mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy"} <= val.keys()
    assert 0 <= val["mlm_accuracy"] <= 1 and val["loss"] == pytest.approx(val["mlm_loss"] + val["nsp_loss"])
    assert [p.name for p in sorted((out / "checkpoints").iterdir())] == ["step-0000006", "step-0000012"]
    for png in ("loss.png", "accuracy.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((out / "config.json").read_text())
    vocab = (pretraining_data / "tok" / "vocab.txt").read_text().splitlines()
    assert saved["model"]["hidden_size"] == 32 and saved["model"]["vocab_size"] == len(vocab) == 43
    assert saved["train"]["steps"] == 12 and saved["train"]["objective"] == "mlm+nsp"
    # The final model loads strictly in transformers, with its tokenizer beside it.
    transformers = pytest.importorskip("transformers")
    _, info = transformers.BertForPreTraining.from_pretrained(out / "model", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert (out / "model" / "vocab.txt").read_text() == (pretraining_data / "tok" / "vocab.txt").read_text()


@pytest.mark.parametrize("objective,fmt", [("mlm", "nsp"), ("mlm", "packed"), ("ltr", "packed")])
def test_objectives(pretraining_data, tmp_path, capsys, one_thread, objective, fmt):
    out = tmp_path / "run"
    assert main(tiny_args(pretraining_data / fmt, out, "--steps", "3", "--objective", objective,
                          "--eval-every", "3", "--eval-samples", "16", "--log-every", "3")) == 0
    records = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    key = "next_token_accuracy" if objective == "ltr" else "mlm_accuracy"
    assert all(key in r for r in records if r["kind"] == "val") and "nsp_accuracy" not in records[-1]
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["architectures"] == ["BertForMaskedLM"]
    assert config["attention"] == ("causal" if objective == "ltr" else "bidirectional")


def _one_line_error(capsys, code: int) -> str:
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_command_errors(pretraining_data, tmp_path, capsys):
    data = pretraining_data / "nsp"
    err = _one_line_error(capsys, main(tiny_args(tmp_path / "absent", tmp_path / "r1", "--steps", "1")))
    assert "absent: no such folder" in err and "--data" in err
    err = _one_line_error(capsys, main(tiny_args(pretraining_data / "packed", tmp_path / "r2", "--steps", "1")))
    assert "mlm+nsp" in err and "--objective mlm" in err
    err = _one_line_error(capsys, main([*tiny_args(data, tmp_path / "r3", "--steps", "1"), "--preset", "huge"]))
    assert "unknown preset 'huge'" in err
    existing = tmp_path / "r4"
    existing.mkdir()
    (existing / "notes.txt").write_text("keep me")
    err = _one_line_error(capsys, main(tiny_args(data, existing, "--steps", "1")))
    assert "not a previous run" in err and str(existing) in err
    assert [p.name for p in existing.iterdir()] == ["notes.txt"] and (existing / "notes.txt").read_text() == "keep me"
    err = _one_line_error(capsys, main(tiny_args(data, tmp_path / "r5", "--steps", "1",
                                                 "--tokenizer", str(pretraining_data / "nsp" / "tokenizer"),
                                                 "--batch-size", "12", "--grad-accum", "5")))
    assert "divisible" in err


def test_tokenizer_of_other_data_is_refused(pretraining_data, tmp_path, capsys, bert_vocab):
    other = tmp_path / "bert"
    other.mkdir()
    (other / "vocab.txt").write_text(bert_vocab.read_text())
    err = _one_line_error(capsys, main(tiny_args(pretraining_data / "nsp", tmp_path / "r", "--steps", "1",
                                                 "--tokenizer", str(other))))
    assert "prepared with tokenizer" in err
