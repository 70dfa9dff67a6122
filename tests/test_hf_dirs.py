"""Hugging Face model directories: round trips with transformers, strict loading, safe loading.

- bertkit -> save_pretrained -> transformers loads it with no missing, unexpected or mis-shaped
  key, and computes the same outputs;
- transformers -> bertkit -> save_pretrained writes back the very same tensors;
- a checkpoint that does not fit raises a UserError naming the key; pickled objects are refused;
- a head absent from the checkpoint is initialised (and reported), other tasks' heads skipped;
- the preset parameter counts, counted as save_pretrained writes them.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import bertkit

transformers = pytest.importorskip("transformers")
transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()

B, T, V = 13, 7, 99
HEADS = ["BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification",
         "BertForTokenClassification", "BertForQuestionAnswering"]



def tiny_config(name: str) -> bertkit.BertConfig:
    config = bertkit.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=37, max_position_embeddings=64)
    return config.with_labels(["neg", "neu", "pos"]) if "Classification" in name else config


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    return {"input_ids": torch.randint(5, V, (B, T), generator=g) * mask, "attention_mask": mask,
            "token_type_ids": torch.randint(0, 2, (B, T), generator=g) * mask}


# Our output field -> transformers' field of the same meaning.
SAME_OUTPUTS = [("last_hidden_state", "last_hidden_state"), ("pooler_output", "pooler_output"),
                ("logits", "logits"), ("logits", "prediction_logits"),
                ("seq_relationship_logits", "seq_relationship_logits"),
                ("start_logits", "start_logits"), ("end_logits", "end_logits")]


def max_output_diff(ours, ref, x) -> float:
    """Largest difference over every output both models return."""
    with torch.no_grad():
        a, b = ours(**x), ref(**x)
    pairs = [(getattr(a, m), getattr(b, n)) for m, n in SAME_OUTPUTS
             if getattr(a, m, None) is not None and getattr(b, n, None) is not None]
    assert pairs and all(u.shape == v.shape for u, v in pairs)
    return max((u - v).abs().max().item() for u, v in pairs)


def random_ours(name: str, seed: int = 0, **config_changes) -> torch.nn.Module:
    """Our model with every parameter random (biases and LayerNorms too)."""
    torch.manual_seed(seed)
    model = getattr(bertkit, name)(tiny_config(name).replace(**config_changes))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model.eval()


@pytest.mark.parametrize("name", HEADS + ["BertModel-causal"])
def test_ours_loads_in_transformers(tmp_path, name):
    name, causal = name.removesuffix("-causal"), name.endswith("-causal")
    ours = random_ours(name, attention="causal" if causal else "bidirectional")
    ours.save_pretrained(tmp_path)
    ref, info = getattr(transformers, name).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert not info["error_msgs"], info
    assert ref.config.is_decoder == causal  # our attention="causal" is written as HF's is_decoder
    x = batch(1)
    diff = max_output_diff(ours, ref.eval(), x)
    assert diff <= 1e-5, f"{name}: transformers' outputs differ from ours by {diff:.3g}"


@pytest.mark.parametrize("name", HEADS)
def test_transformers_dir_round_trips_exactly(tmp_path, name):
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=37, max_position_embeddings=64,
                                        num_labels=3 if "Classification" in name else 2)
    ref = getattr(transformers, name)(hf_config)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0.0, 0.2)
    ref.save_pretrained(tmp_path / "hf")
    ours = getattr(bertkit, name).from_pretrained(tmp_path / "hf")
    assert ours.load_report == {"initialized": [], "skipped": []}
    ours.save_pretrained(tmp_path / "ours")
    a, b = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "ours" / "model.safetensors")
    assert sorted(a) == sorted(b)
    unequal = [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
    assert not unequal, f"tensors changed by the round trip: {unequal}"
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"] == [name]


@pytest.fixture
def saved_dir(tmp_path):
    """A tiny BertForSequenceClassification directory and its tensors."""
    random_ours("BertForSequenceClassification").save_pretrained(tmp_path)
    return tmp_path, load_file(tmp_path / "model.safetensors")


def _load_error(path) -> str:
    with pytest.raises(bertkit.UserError) as e:
        bertkit.BertForSequenceClassification.from_pretrained(path)
    return str(e.value)


def test_missing_key_is_named(saved_dir):
    path, state = saved_dir
    del state["bert.encoder.layer.1.output.dense.weight"]
    save_file(state, path / "model.safetensors")
    assert "missing keys: bert.encoder.layer.1.output.dense.weight" in _load_error(path)


def test_unexpected_key_is_named(saved_dir):
    path, state = saved_dir
    state["bert.encoder.layer.7.output.dense.weight"] = torch.zeros(32, 37)
    save_file(state, path / "model.safetensors")
    assert "unexpected keys: bert.encoder.layer.7.output.dense.weight" in _load_error(path)


def test_misshaped_key_is_named(saved_dir):
    path, state = saved_dir
    state["classifier.weight"] = torch.zeros(5, 32)
    save_file(state, path / "model.safetensors")
    msg = _load_error(path)
    assert "mis-shaped keys: classifier.weight (5, 32) vs expected (3, 32)" in msg and "\n" not in msg


def test_not_a_model_directory(tmp_path):
    assert "no such model directory" in _load_error(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    assert "no config.json" in _load_error(tmp_path / "empty")


def test_pytorch_model_bin_loads(saved_dir):
    path, state = saved_dir
    (path / "model.safetensors").unlink()
    torch.save(state, path / "pytorch_model.bin")
    model = bertkit.BertForSequenceClassification.from_pretrained(path)
    assert torch.equal(model.output.weight, state["classifier.weight"])


class Payload:
    """An arbitrary object: torch.load(weights_only=True) must refuse to rebuild it."""

    def __init__(self):
        self.ran = True


def test_pickled_object_is_refused(saved_dir):
    path, state = saved_dir
    (path / "model.safetensors").unlink()
    torch.save({**state, "extra": Payload()}, path / "pytorch_model.bin")
    assert "cannot read weights safely" in _load_error(path)


def test_pretraining_checkpoint_into_classifier(tmp_path):
    pre = random_ours("BertForPreTraining")
    pre.save_pretrained(tmp_path)
    clf = bertkit.BertForSequenceClassification.from_pretrained(tmp_path, id2label={0: "a", 1: "b", 2: "c"})
    report = clf.load_report
    assert report["initialized"] == ["classifier.weight", "classifier.bias"]
    assert report["skipped"] and all(k.startswith("cls.") for k in report["skipped"])
    assert {"cls.seq_relationship.weight", "cls.predictions.bias"} <= set(report["skipped"])
    assert torch.equal(clf.encoder.pooler.weight, pre.encoder.pooler.weight)
    assert torch.equal(clf.encoder.layers[1].qkv.weight, pre.encoder.layers[1].qkv.weight)
    assert clf.output.bias.abs().sum() == 0 and clf.output.weight.std() < 0.05  # BERT's init


def test_encoder_checkpoint_into_masked_lm(minilm_dir):
    model = bertkit.BertForMaskedLM.from_pretrained(minilm_dir)
    report = model.load_report
    # the report names the checkpoint's keys, in HF's names
    assert set(report["initialized"]) == {"cls.predictions.transform.dense.weight",
                                          "cls.predictions.transform.dense.bias",
                                          "cls.predictions.transform.LayerNorm.weight",
                                          "cls.predictions.transform.LayerNorm.bias", "cls.predictions.bias"}
    assert set(report["skipped"]) == {"bert.pooler.dense.weight", "bert.pooler.dense.bias"}
    assert model.mlm.word_embeddings.weight is model.encoder.embeddings.word.weight


def count_without_padding(model: torch.nn.Module) -> int:
    """Parameters as save_pretrained writes them: the tied decoder once, no vocabulary padding
    rows. Works on a meta-device model, so counting BERT-base allocates nothing."""
    extra_rows = model.config.padded_vocab_size - model.config.vocab_size
    total = 0
    for name, t in model.state_dict().items():
        if name.endswith("mlm.word_embeddings.weight"):
            continue  # the same tensor as the word embeddings
        padded = name.endswith(("embeddings.word.weight", "mlm.bias"))
        total += t.numel() - (extra_rows * t[0].numel() if padded else 0)
    return total


def test_preset_parameter_counts(tmp_path):
    tiny = bertkit.BertForPreTraining(bertkit.BertConfig.preset("tiny"))
    tiny.save_pretrained(tmp_path)
    saved = sum(t.numel() for t in load_file(tmp_path / "model.safetensors").values())
    assert saved == count_without_padding(tiny) == 4_433_468
    with torch.device("meta"):
        base = bertkit.BertForPreTraining(bertkit.BertConfig.preset("base"))
    # Google's BERT-base: 109,482,240 in the encoder and pooler, plus the MLM and NSP heads.
    assert count_without_padding(base) == 110_106_428
