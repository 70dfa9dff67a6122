"""`bertkit pretrain --arch`: BERT's descendants pretrained from a preset's shape.

Each architecture (RoBERTa, ALBERT with sentence-order prediction, DeBERTa-v3 with replaced-token
detection and gradient-disentangled sharing, ModernBERT) pretrains a few steps on the toy corpus,
saves in its family's layout and loads strictly in transformers' class of that family with the
same outputs; a run stopped after a checkpoint and resumed ends bit for bit where the
uninterrupted run ended; what an architecture cannot take is refused in one line before any work.
Sentence-order labels are checked on a hand-built document.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from bertkit import BertForMaskedLM, BertForPreTraining, BertModel
from bertkit.cli import main
from pretrain_helpers import TINY, assert_bit_identical

transformers = pytest.importorskip("transformers")
transformers.utils.logging.set_verbosity_error()

FP32 = ("--precision", "fp32")
# arch -> (data format, the folder and transformers class it must load strictly in, our class)
ARCHS = {
    "roberta": ("packed", "model", "AutoModelForMaskedLM", BertForMaskedLM),
    "albert": ("sop", "model", "AlbertForPreTraining", BertForPreTraining),
    "deberta": ("packed", "generator", "AutoModelForMaskedLM", BertForMaskedLM),
    "modernbert": ("packed", "model", "AutoModelForMaskedLM", BertForMaskedLM),
}


@pytest.fixture(scope="module")
def data(pretraining_data, tmp_path_factory):
    """The toy corpus prepared also as sentence-order pairs."""
    root = pretraining_data
    sop = tmp_path_factory.mktemp("sop") / "sop"
    assert main(["prepare", "--input", str(root / "corpus.txt"), "--tokenizer", str(root / "tok"), "--max-seq-len",
                 "32", "--format", "sop", "--out", str(sop), "--val-fraction", "0.2", "--workers", "1"]) == 0
    return {"packed": root / "packed", "nsp": root / "nsp", "sop": sop}


def _args(data: dict, arch: str, out, *extra: str) -> list[str]:
    shape = {**TINY, "max_position_embeddings": 64} if arch != "modernbert" else TINY
    return ["pretrain", "--data", str(data[ARCHS[arch][0]]), "--out", str(out), "--preset", "tiny", "--arch", arch,
            "--recipe", "budget", "--batch-size", "13", "--config-json", json.dumps(shape), *FP32, *extra]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_each_arch_pretrains_saves_its_layout_and_resumes_bit_for_bit(data, arch, tmp_path, capsys):
    extra = ("--steps", "8", "--save-every", "4", "--eval-every", "4", "--eval-samples", "8", "--keep", "0",
             "--log-every", "1")
    assert main(_args(data, arch, tmp_path / "whole", *extra)) == 0
    shutil.copytree(tmp_path / "whole", tmp_path / "half")  # as if stopped right after the step-4 checkpoint
    for later in ("model", "discriminator", "generator", "checkpoints/step-0000008"):
        shutil.rmtree(tmp_path / "half" / later, ignore_errors=True)
    metrics = tmp_path / "half" / "metrics.jsonl"  # the records before the stop, marked as the first run's
    metrics.write_text("".join(json.dumps({**r, "first_run": True}) + "\n" for r in _records(metrics)))
    capsys.readouterr()
    assert main(_args(data, arch, tmp_path / "half", *extra, "--resume")) == 0
    # it continued the checkpoint (a restart at step 0 ends with the same weights: this tells them apart)
    assert capsys.readouterr().out.startswith(f"resuming from {tmp_path / 'half' / 'checkpoints' / 'step-0000004'} ")
    steps = [(r["step"], "first_run" in r) for r in _records(metrics) if r["kind"] == "train"]
    assert steps == [(s, s <= 4) for s in range(1, 9)], steps  # its first logged step is 5
    for name in ("model", "discriminator", "generator"):
        if (tmp_path / "whole" / name).is_dir():
            assert_bit_identical(tmp_path / "whole" / name, tmp_path / "half" / name)
    _, folder, hf_class, ours_class = ARCHS[arch]
    path = tmp_path / "whole" / folder
    saved = json.loads((path / "config.json").read_text())
    assert saved["model_type"] == {"deberta": "deberta-v2"}.get(arch, arch)
    ref, info = getattr(transformers, hf_class).from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    ours = ours_class.from_pretrained(path).eval()
    ids = torch.randint(5, ours.config.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        a, b = ours(ids, mask), ref.eval()(input_ids=ids, attention_mask=mask)
    want = b.prediction_logits if hf_class.endswith("PreTraining") else b.logits
    assert (a.logits - want).abs().max() < 1e-4


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("arch, rate", [("modernbert", 0.3), ("roberta", 0.15)])
def test_modernbert_masks_30_percent_of_the_tokens_where_the_others_mask_15(data, arch, rate, tmp_path):
    """ModernBERT's authors' 30%: the resolved config's rate, and the labelled share of the tokens a
    batch could mask (all but padding and special tokens) within 4 standard deviations of it."""
    import argparse

    from bertkit.cli.pretrain import add_arguments, train_config
    from bertkit.pretrain.build import build_objective
    from bertkit.pretrain.setup import open_data

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = train_config(parser.parse_args(_args(data, arch, tmp_path / "run", "--steps", "1")[1:]))
    assert cfg.mask_rate == rate and cfg.masking().rate == rate
    train, _, tokenizer = open_data(cfg)
    batch = train.batch(np.arange(min(len(train), 512)))
    labels = build_objective(cfg, train.manifest, tokenizer).prepare(batch, torch.device("cpu"), 0, 0)["labels"]
    ids = torch.as_tensor(batch["input_ids"]).long()
    maskable = torch.as_tensor(batch["attention_mask"]).bool() & ~torch.isin(ids, torch.tensor(
        train.manifest["special_ids"]))
    n = int(maskable.sum())
    share = float((labels != -100)[maskable].float().mean())
    assert n > 2000 and abs(share - rate) < 4 * (rate * (1 - rate) / n) ** 0.5, (share, rate, n)
    assert not (labels != -100)[~maskable].any()


def test_albert_shares_one_tensor_per_layer_role_and_learns_sentence_order_as_its_pair_task(data, tmp_path):
    assert main(_args(data, "albert", tmp_path / "run", "--steps", "4", "--eval-samples", "8")) == 0
    model = BertForPreTraining.from_pretrained(tmp_path / "run" / "model")
    assert len(model.encoder.layers) == 1 and model.encoder.layer_at(0) is model.encoder.layer_at(1)
    names = [n for n, _ in model.named_parameters() if ".layers." in n]
    assert all(".layers.0." in n for n in names)  # one tensor per role, read at every depth
    val = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("sop_accuracy" in r for r in val if r["kind"] == "val")


def test_deberta_is_rtd_with_disentangled_sharing_and_a_half_depth_generator(data, tmp_path):
    extra = ("--steps", "2", "--eval-samples", "0")
    assert main(_args(data, "deberta", tmp_path / "run", *extra, "--config-json",
                      json.dumps({**TINY, "num_hidden_layers": 4, "max_position_embeddings": 64}))) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())["train"]
    assert config["objective"] == "electra" and config["embedding_sharing"] == "gdes"
    generator = json.loads((tmp_path / "run" / "generator" / "config.json").read_text())
    assert generator["num_hidden_layers"] == 2 and generator["hidden_size"] == TINY["hidden_size"]
    assert (tmp_path / "run" / "checkpoints").is_dir()
    model = BertModel.from_pretrained(tmp_path / "run" / "model")
    assert model.pooler is None and model.config.relative_attention


@pytest.mark.parametrize("extra, message", [
    (("--objective", "mlm+sop"), "needs data prepared with `bertkit prepare --format sop`"),
    (("--objective", "mlm+nsp", "--arch", "roberta"), "needs data prepared with `bertkit prepare --format nsp`"),
])
def test_what_an_arch_cannot_take_is_one_line_before_any_work(data, tmp_path, capsys, extra, message):
    args = ["pretrain", "--data", str(data["packed"]), "--out", str(tmp_path / "run"), "--preset", "tiny",
            "--steps", "2", "--config-json", json.dumps(TINY), *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "run").exists()


def test_an_arch_is_fixed_on_resume(data, tmp_path, capsys):
    assert main(_args(data, "albert", tmp_path / "run", "--steps", "2", "--eval-samples", "0")) == 0
    capsys.readouterr()
    args = _args(data, "albert", tmp_path / "run", "--steps", "4", "--eval-samples", "0", "--resume")
    args[args.index("albert")] = "modernbert"
    args[args.index("--data") + 1] = str(data["sop"])
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arch 'albert' -> 'modernbert'" in err[0], err


def test_sentence_order_pairs_follow_each_other_and_half_are_swapped(tmp_path):
    """A hand-built document of numbered sentences: every pair is two consecutive spans, in order
    (label 0) or swapped (label 1), and both labels occur."""
    from bertkit.data.instances import IN_ORDER, SWAPPED, build_sop

    class Store:  # one document of 40 one-token sentences: token t is sentence t
        tokens = np.arange(100, 140, dtype=np.int64)
        sentence_ends = np.arange(1, 41)
        document_ends = np.array([40])

    pairs = []

    class Writer:
        def add(self, ids, a_length, label):
            pairs.append((list(ids), int(a_length), int(label)))

    build_sop(Store(), np.array([0]), Writer(), max_seq_len=9, short_seq_prob=0.0, dupe_factor=3, seed=1,
              cls_id=2, sep_id=3)
    assert pairs
    for ids, a_length, label in pairs:
        a, b = ids[1 : a_length - 1], ids[a_length:-1]
        assert ids[0] == 2 and ids[a_length - 1] == 3 and ids[-1] == 3 and a and b
        first, second = (a, b) if label == IN_ORDER else (b, a)
        assert first == list(range(first[0], first[0] + len(first))) and second[0] == first[-1] + 1, (ids, label)
    labels = [p[2] for p in pairs]
    assert {IN_ORDER, SWAPPED} == set(labels) and 0.3 < labels.count(SWAPPED) / len(labels) < 0.7
