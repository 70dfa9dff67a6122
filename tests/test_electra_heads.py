"""ELECTRA's task heads against transformers' Electra classes, and trained heads never replaced.

A tiny random ElectraForSequenceClassification (its own layer: classifier.dense, the exact GELU,
classifier.out_proj), ElectraForTokenClassification and ElectraForQuestionAnswering, with
embeddings narrower than the layers and as wide, saved by transformers, load strictly in bertkit
(nothing initialised, nothing skipped) and give transformers' logits, loss and every gradient to
1e-5; bertkit's save loads strictly in the same Electra class with the same logits, and
`evaluate` accepts the directory. A file whose class is a task head of the same kind but whose
head is in a layout bertkit does not read is refused in one line, never given a new head.
"""

from __future__ import annotations

import json

import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.errors import UserError
from test_families import COMMON, B, T, V, assert_close, at_real, compare_grads, randomize

transformers = pytest.importorskip("transformers")
transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()

KINDS = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")
WIDTHS = {"projected": 16, "as-wide": 32}  # embedding_size: narrower than hidden 32 (ELECTRA-Small), or not


def reference(kind: str, embedding_size: int, seed: int = 0):
    labels = 2 if kind == "ForQuestionAnswering" else 3
    config = transformers.ElectraConfig(**COMMON, embedding_size=embedding_size, num_labels=labels)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return randomize(getattr(transformers, "Electra" + kind)(config), seed)


def inputs_and_labels(kind: str, seed: int = 1) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    lengths[0], lengths[1] = T, 2
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    if kind == "ForQuestionAnswering":  # the span softmax runs over every position
        mask = torch.ones_like(mask)
    ids = torch.where(mask.bool(), torch.randint(5, V, (B, T), generator=g), 0)
    types = torch.randint(0, 2, (B, T), generator=g) * mask
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if kind == "ForSequenceClassification":
        return inputs, {"labels": torch.randint(0, 3, (B,), generator=g)}
    if kind == "ForQuestionAnswering":
        return inputs, {"start_positions": torch.randint(0, T, (B,), generator=g),
                        "end_positions": torch.randint(0, T, (B,), generator=g)}
    pick = (torch.rand(B, T, generator=g) < 0.4) & mask.bool()
    pick[0, 0] = True
    return inputs, {"labels": torch.where(pick, torch.randint(0, 3, (B, T), generator=g), -100)}


def logits_of(out, kind: str, mask: torch.Tensor) -> torch.Tensor:
    if kind == "ForSequenceClassification":
        return out.logits
    if kind == "ForQuestionAnswering":
        return torch.cat([at_real(out.start_logits, mask), at_real(out.end_logits, mask)])
    return at_real(out.logits, mask)


@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("kind", KINDS)
def test_electra_heads_load_with_transformers_logits_loss_and_gradients(tmp_path, kind, width):
    ref = reference(kind, WIDTHS[width])
    ref.save_pretrained(tmp_path)
    ours = getattr(bertkit, "Bert" + kind).from_pretrained(tmp_path).eval()
    assert ours.load_report == {"initialized": [], "skipped": []}, ours.load_report
    inputs, labels = inputs_and_labels(kind)
    a, b = ours(**inputs, **labels), ref(**inputs, **labels)
    mask = inputs["attention_mask"]
    assert_close(logits_of(a, kind, mask), logits_of(b, kind, mask), f"ELECTRA {kind} logits ({width})")
    assert_close(a.loss, b.loss, f"ELECTRA {kind} loss ({width})")
    a.loss.backward()
    b.loss.backward()
    compare_grads(ours, ref)


@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("kind", KINDS)
def test_bertkit_saves_electra_heads_as_transformers_electra_classes(tmp_path, kind, width):
    ref = reference(kind, WIDTHS[width])
    ref.save_pretrained(tmp_path / "hf")
    getattr(bertkit, "Bert" + kind).from_pretrained(tmp_path / "hf").save_pretrained(tmp_path / "ours")
    saved = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert saved["model_type"] == "electra" and saved["architectures"] == ["Electra" + kind], saved
    back, info = getattr(transformers, "Electra" + kind).from_pretrained(tmp_path / "ours", output_loading_info=True,
                                                                          attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    inputs, _ = inputs_and_labels(kind)
    mask = inputs["attention_mask"]
    assert_close(logits_of(back.eval()(**inputs), kind, mask), logits_of(ref(**inputs), kind, mask),
                 f"ELECTRA {kind} reloaded ({width})")


def test_a_fine_tuned_electra_classifier_is_evaluated(tmp_path, capsys):
    """`evaluate` refused it while its head was replaced by a new one."""
    from bertkit.tokenizer import SPECIAL_TOKENS

    config = transformers.ElectraConfig(**COMMON, embedding_size=16, id2label={0: "0", 1: "1"})
    torch.manual_seed(0)
    randomize(transformers.ElectraForSequenceClassification(config), 0).save_pretrained(tmp_path / "m")
    words = [f"w{i}" for i in range(V - len(SPECIAL_TOKENS))]
    (tmp_path / "m" / "vocab.txt").write_text("\n".join([*SPECIAL_TOKENS, *words]) + "\n", encoding="utf-8")
    rows = ["sentence\tlabel", *(f"w{i} w{i + 3} w{i + 7}\t{i % 2}" for i in range(9))]
    (tmp_path / "dev.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    status = main(["evaluate", "--model", str(tmp_path / "m"), "--task", "sst2", "--data", str(tmp_path / "dev.tsv"),
                   "--max-seq-len", "32", "--precision", "fp32"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "accuracy" in captured.out, captured.out


def test_a_trained_head_in_a_layout_bertkit_does_not_read_is_refused_not_replaced(tmp_path):
    """A BERT encoder under a sequence classifier of another class (RoBERTa's dense + out_proj
    layout): the file is that task's trained model, so loading refuses in one line."""
    from safetensors.torch import load_file, save_file

    ours = bertkit.BertForSequenceClassification(bertkit.BertConfig(**COMMON, id2label={0: "a", 1: "b", 2: "c"}))
    ours.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["classifier.out_proj.weight"] = tensors.pop("classifier.weight")
    tensors["classifier.out_proj.bias"] = tensors.pop("classifier.bias")
    tensors["classifier.dense.weight"], tensors["classifier.dense.bias"] = torch.zeros(32, 32), torch.zeros(32)
    save_file(tensors, tmp_path / "model.safetensors")
    config = json.loads((tmp_path / "config.json").read_text())
    config["architectures"] = ["OtherBertForSequenceClassification"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError) as e:
        bertkit.BertForSequenceClassification.from_pretrained(tmp_path)
    message = str(e.value)
    assert "\n" not in message and "missing keys: classifier.weight, classifier.bias" in message, message
    assert "not a layout bertkit reads: classifier.dense.bias" in message, message
    encoder = bertkit.BertModel.from_pretrained(tmp_path)  # the encoder alone reads it: no head is replaced
    assert set(encoder.load_report["skipped"]) == {f"classifier.{n}.{p}" for n in ("dense", "out_proj")
                                                   for p in ("weight", "bias")}
