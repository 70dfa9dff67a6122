"""Knowledge distillation on tiny random models: layer selection and initialisation, the losses
against hand computations, and `bertkit distill` end to end (the student-teacher gap shrinks,
the saved student loads in transformers and `bertkit evaluate` reproduces its scores)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bertkit import BertConfig, Tokenizer
from bertkit.distill.losses import (
    DistillWeights,
    hidden_cosine,
    soft_target_kl,
    vector_mse,
)
from bertkit.distill.student import (
    every_kth_layer,
    init_from_teacher,
    new_like,
    student_config,
)
from bertkit.errors import UserError
from bertkit.heads import BertForMaskedLM, BertForSequenceClassification
from bertkit.model import BertModel
from conftest import _tiny_vocab
from finetune_helpers import evaluate, run_cli, sentence, write_sst2, write_stsb


def _config(layers: int = 5, **changes) -> BertConfig:
    fields = {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": layers, "num_attention_heads": 2,
                  "intermediate_size": 37, "max_position_embeddings": 64}
    return BertConfig(**{**fields, **changes})


# ---- which layers, and the copy --------------------------------------------------------------
@pytest.mark.parametrize("teacher, student, expected", [
    (6, 2, (3, 6)), (12, 3, (4, 8, 12)), (12, 6, (2, 4, 6, 8, 10, 12)), (12, 5, (2, 5, 7, 10, 12)),
    (4, 4, (1, 2, 3, 4)), (5, 1, (5,)), (7, 3, (2, 5, 7)),
])
def test_every_kth_layer_ends_with_the_top_layer(teacher, student, expected):
    assert every_kth_layer(teacher, student) == expected


def test_every_kth_layer_refuses_a_deeper_student():
    with pytest.raises(UserError, match="student of 7 layers"):
        every_kth_layer(6, 7)


def test_student_config_keeps_tokenizer_and_labels_and_takes_a_quarter_of_the_layers():
    teacher = _config(6, id2label={0: "neg", 1: "pos"}, problem_type="single_label_classification")
    student = student_config(teacher)
    assert student.num_hidden_layers == 2 and student == teacher.replace(num_hidden_layers=2)
    small = student_config(teacher, "tiny")
    assert (small.hidden_size, small.num_hidden_layers, small.vocab_size) == (128, 2, 99)
    assert small.id2label == teacher.id2label and small.max_position_embeddings == 64


@pytest.mark.parametrize("head", [BertForSequenceClassification, BertForMaskedLM, BertModel])
def test_student_is_exactly_the_teachers_chosen_layers(head):
    torch.manual_seed(0)
    teacher = head(_config(5)).eval()
    student = new_like(teacher, _config(2)).eval()
    assert init_from_teacher(student, teacher, (2, 5)) == []
    enc_t = teacher if head is BertModel else teacher.encoder
    enc_s = student if head is BertModel else student.encoder
    for j, i in enumerate((2, 5)):
        for (name, a), (_, b) in zip(enc_s.layers[j].state_dict().items(), enc_t.layers[i - 1].state_dict().items()):
            assert torch.equal(a, b), (j, name)
    t_state = teacher.state_dict()
    for name, value in student.state_dict().items():
        if ".layers." not in f".{name}":
            assert torch.equal(value, t_state[name]), name
    # the student's forward is the teacher's embeddings, then its layers 2 and 5, then pooler and head
    ids = torch.randint(5, 99, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, 5:] = 0
    x = enc_t.embeddings(ids, torch.arange(7), None)
    keep = mask.bool()[:, None, None, :]
    for i in (2, 5):
        x = enc_t.layers[i - 1](x, keep, False)
    out = student(ids, attention_mask=mask)
    if head is BertModel:
        got, want = out.last_hidden_state[mask.bool()], x[mask.bool()]
    elif head is BertForMaskedLM:
        got, want = out.logits[mask.bool()], teacher.mlm(x)[mask.bool()]
    else:
        got, want = out.logits, teacher.output(enc_t.pool(x))
    assert (got - want).abs().max().item() < 1e-5


def test_only_a_student_of_the_teachers_width_starts_from_it():
    teacher = BertForSequenceClassification(_config(4))
    other = new_like(teacher, _config(2).replace(hidden_size=48, num_attention_heads=3))
    with pytest.raises(UserError, match="width 48 cannot start from a teacher of width 32"):
        init_from_teacher(other, teacher, (2, 4))
    with pytest.raises(UserError, match=re.escape("teacher's layers are 1..4")):
        init_from_teacher(new_like(teacher, _config(2)), teacher, (2, 5))


# ---- the losses, by hand --------------------------------------------------------------------
def _softmax(row, t):
    e = [math.exp(v / t) for v in row]
    return [v / sum(e) for v in e]


def test_soft_target_kl_is_hintons_loss_by_hand():
    s = [[1.0, 2.0, 0.0], [0.3, -1.0, 0.5]]
    t = [[0.5, 0.5, 2.0], [2.0, 0.0, -1.0]]
    for temperature in (1.0, 2.0, 4.0):
        want = 0.0
        for srow, trow in zip(s, t):
            p, q = _softmax(trow, temperature), _softmax(srow, temperature)
            want += sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))
        want = want / len(s) * temperature ** 2
        got = soft_target_kl(torch.tensor(s), torch.tensor(t), temperature).item()
        assert got == pytest.approx(want, rel=1e-6)
    assert soft_target_kl(torch.tensor(t), torch.tensor(t), 2.0).item() == pytest.approx(0.0, abs=1e-7)
    # T^2 keeps the gradient's scale: d/ds = T * (softmax(s/T) - softmax(t/T)) / rows
    st = torch.tensor(s, requires_grad=True)
    soft_target_kl(st, torch.tensor(t), 2.0).backward()
    want = 2.0 * (F.softmax(torch.tensor(s) / 2, -1) - F.softmax(torch.tensor(t) / 2, -1)) / 2
    assert torch.allclose(st.grad, want, atol=1e-6)


def test_hidden_cosine_skips_padding_and_vector_mse_by_hand():
    s = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    t = torch.tensor([[[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0]])
    want = ((1 - 1.0) + (1 - 1 / math.sqrt(2))) / 2  # the padded third token does not count
    assert hidden_cosine(s, t, mask).item() == pytest.approx(want, rel=1e-6)
    assert vector_mse(torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 4.0]])).item() == pytest.approx(2.5)
    with pytest.raises(ValueError, match="temperature"):
        DistillWeights(temperature=0)


# ---- end to end -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("distill-vocab")
    (d / "vocab.txt").write_text("".join(t + "\n" for t in _tiny_vocab()), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def classifier_teacher(vocab_dir, tmp_path_factory) -> Path:
    """A 4-layer random classifier with a sharpened head: confident, input-dependent outputs to imitate."""
    tok = Tokenizer.from_pretrained(vocab_dir)
    config = _config(4, vocab_size=len(tok), id2label={0: "0", 1: "1"}, max_position_embeddings=128,
                     problem_type="single_label_classification")
    torch.manual_seed(1)
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.output.weight.mul_(20.0)
    d = tmp_path_factory.mktemp("teacher")
    model.save_pretrained(d, tokenizer=tok)
    return d


def _gap(teacher_dir: Path, student: torch.nn.Module, dev: Path) -> float:
    """Mean KL(teacher || student) at T=1 over the dev sentences."""
    from bertkit.data.batching import collate
    from bertkit.data.glue import read_glue

    tok = Tokenizer.from_pretrained(teacher_dir)
    teacher = BertForSequenceClassification.from_pretrained(teacher_dir).eval()
    encs = tok.encode_batch([e.text_a for e in read_glue("sst2", dev)], max_length=128)
    batch = collate([{"input_ids": e.ids} for e in encs], tok.pad_id)
    with torch.no_grad():
        return soft_target_kl(student.eval()(**batch).logits, teacher(**batch).logits, 1.0).item()


def test_distilled_classifier_closes_the_gap_loads_in_transformers_and_evaluates(
        classifier_teacher, tmp_path, capsys):
    import transformers

    write_sst2(tmp_path / "train.tsv", 120, 0)
    write_sst2(tmp_path / "dev.tsv", 30, 1)
    start = new_like(BertForSequenceClassification.from_pretrained(classifier_teacher), student_config(
        BertForSequenceClassification.from_pretrained(classifier_teacher).config))
    before = _gap(classifier_teacher, start, tmp_path / "dev.tsv")
    out = tmp_path / "student"
    assert run_cli("distill", "--teacher", classifier_teacher, "--task", "sst2", "--student-preset", "teacher",
                   "--train", tmp_path / "train.tsv", "--dev", tmp_path / "dev.tsv", "--out", out, "--epochs", "4",
                   "--lr", "2e-3", "--batch-size", "16", "--hard-weight", "0", "--no-progress") == 0
    first = capsys.readouterr().out.splitlines()[0]  # its precision in its first line and its results
    assert first.startswith("bertkit distill: sst2") and first.endswith(", fp32"), first
    assert json.loads((out / "results.json").read_text())["args"]["precision"] == "fp32"
    report = json.loads((out / "distill.json").read_text())
    assert report["student"]["teacher_layers"] == [4] and report["student"]["init"] == "teacher"
    assert report["student_parameters"] < report["teacher_parameters"]
    ours = BertForSequenceClassification.from_pretrained(out / "model")
    after = _gap(classifier_teacher, ours, tmp_path / "dev.tsv")
    assert after < 0.5 * before, (before, after)
    theirs = transformers.BertForSequenceClassification.from_pretrained(out / "model").eval()
    ids = torch.randint(5, 60, (3, 9))
    assert (theirs(input_ids=ids).logits - ours.eval()(ids).logits).abs().max().item() < 1e-5
    evaluated = evaluate(capsys, out / "model", "sst2", tmp_path / "dev.tsv")
    assert evaluated["accuracy"] == pytest.approx(report["student_dev"]["accuracy"])


def test_embedding_student_learns_the_teachers_vectors(vocab_dir, tmp_path, capsys):
    import random

    import transformers

    from bertkit.embed import embed_texts

    tok = Tokenizer.from_pretrained(vocab_dir)
    torch.manual_seed(2)
    teacher_dir = tmp_path / "teacher"
    BertModel(_config(3, vocab_size=len(tok), max_position_embeddings=128)).save_pretrained(teacher_dir, tok)
    rng = random.Random(0)
    (tmp_path / "corpus.txt").write_text("\n\n".join(" ".join(sentence(rng, rng.random() < 0.5).capitalize()
                                                               for _ in range(3)) for _ in range(80)) + "\n")
    write_stsb(tmp_path / "sts.tsv", 20, 0)
    out = tmp_path / "student"
    assert run_cli("distill", "--teacher", teacher_dir, "--task", "embedding", "--student-preset", "teacher",
                   "--train", tmp_path / "corpus.txt", "--dev", tmp_path / "sts.tsv", "--out", out,
                   "--epochs", "3", "--lr", "2e-3", "--batch-size", "16", "--no-progress") == 0
    report = json.loads((out / "distill.json").read_text())
    assert report["student"]["teacher_layers"] == [3] and report["main_metric"] == "spearman"
    held_out = [sentence(rng, i % 2 == 0) for i in range(24)]
    teacher = BertModel.from_pretrained(teacher_dir)
    start = new_like(teacher, teacher.config.replace(num_hidden_layers=1))  # random: where distillation starts from
    kw = {"pooling": "mean", "progress": False}
    want = embed_texts(teacher, tok, held_out, **kw)
    error = {name: float(((embed_texts(m, tok, held_out, **kw) - want) ** 2).mean())
             for name, m in (("before", start), ("after", BertModel.from_pretrained(out / "model")))}
    assert error["after"] < 0.5 * error["before"], error
    theirs = transformers.BertModel.from_pretrained(out / "model").eval()
    ids = torch.randint(5, 60, (2, 6))
    ours = BertModel.from_pretrained(out / "model").eval()
    assert (theirs(input_ids=ids).last_hidden_state - ours(ids).last_hidden_state).abs().max().item() < 1e-5
    zero_shot = evaluate(capsys, out / "model", "stsb", tmp_path / "sts.tsv", "--zero-shot")
    assert zero_shot["spearman"] == pytest.approx(report["student_dev"]["spearman"], abs=1e-6)
    sentence_transformers = pytest.importorskip("sentence_transformers")
    theirs = sentence_transformers.SentenceTransformer(str(out / "model"), device="cpu")
    assert [type(m).__name__ for m in theirs] == ["Transformer", "Pooling"]  # the teacher does not normalise
    vectors = theirs.encode(held_out[:6], convert_to_numpy=True)
    assert abs(vectors - embed_texts(ours, tok, held_out[:6], **kw)).max() < 1e-5


def test_mlm_distillation_on_prepared_data(pretraining_data, tmp_path):
    import transformers

    from bertkit.heads import BertForPreTraining

    tok = Tokenizer.from_pretrained(pretraining_data / "tok")
    torch.manual_seed(3)
    teacher_dir = tmp_path / "teacher"
    BertForPreTraining(_config(3, vocab_size=len(tok))).save_pretrained(teacher_dir, tok)
    out = tmp_path / "student"
    assert run_cli("distill", "--teacher", teacher_dir, "--task", "mlm", "--student-preset", "teacher",
                   "--student-layers", "2", "--train", pretraining_data / "nsp", "--out", out, "--epochs", "2",
                   "--lr", "1e-3", "--batch-size", "8", "--no-progress") == 0
    report = json.loads((out / "distill.json").read_text())
    assert report["student"]["teacher_layers"] == [2, 3]
    assert {"mlm_accuracy", "teacher_agreement"} <= set(report["student_dev"])
    results = json.loads((out / "results.json").read_text())
    losses = results["seeds"][0]["train_loss"]
    assert sum(losses[-3:]) < sum(losses[:3])
    theirs = transformers.BertForMaskedLM.from_pretrained(out / "model").eval()
    ours = BertForMaskedLM.from_pretrained(out / "model").eval()
    ids = torch.randint(5, len(tok), (2, 6))
    assert (theirs(input_ids=ids).logits - ours(ids).logits).abs().max().item() < 1e-4


def test_an_embedding_student_keeps_its_teachers_normalisation(vocab_dir, tmp_path):
    from bertkit.distill.tasks import EmbeddingDistill
    from bertkit.st import model_normalizes, write_sentence_transformers_files

    teacher = tmp_path / "teacher"
    teacher.mkdir()
    assert not model_normalizes(teacher)  # a plain HF directory
    write_sentence_transformers_files(teacher, "mean", 64, 32, normalize=True)
    assert model_normalizes(teacher)
    task = object.__new__(EmbeddingDistill)  # only what saving needs
    task.pooling, task.max_seq_len, task.normalize = "cls", 64, model_normalizes(teacher)
    tok = Tokenizer.from_pretrained(vocab_dir)
    task.save_model(BertModel(_config(1, vocab_size=len(tok))), tmp_path / "student", tok)
    modules = json.loads((tmp_path / "student" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    assert json.loads((tmp_path / "student" / "1_Pooling" / "config.json").read_text())["pooling_mode_cls_token"]
