"""The same numbers as transformers by default, on a CPU that computes bf16 too (issue 51).

The commands whose outputs are compared or stored (embed, index, search, evaluate, serve) run in
fp32 unless `--precision` says otherwise; where the CPU could run bf16 (reported so here:
`devices.cpu_has_bf16` patched, whatever this machine is), the first line says so once. `embed` at
default settings on a directory of every family transformers writes (a tiny random masked LM beside
its family's tokenizer layout and sentence-transformers' mean pooling) gives transformers' own mean
pooled vectors within 1e-5; under bf16 they differ by about 1e-3. An index records the precision
of its vectors, and `search` and `serve --index` say so when queries come at another.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit import devices
from bertkit.cli import main

transformers = pytest.importorskip("transformers")
transformers.utils.logging.set_verbosity_error()

TOL = 1e-5
SENTENCES = ["the movie was good .", "a film about paris", "john was in paris near the river in berlin , "
             "and the movie he saw there was not good at all .", "what is the river ?"]
BASE = dict(hidden_size=32, num_attention_heads=4, intermediate_size=37, num_hidden_layers=2,
            max_position_embeddings=128)
# family -> (tokenizer layout in tokenizer_family_dirs, transformers class prefix, its config's arguments)
FAMILIES = {
    "bert": ("distilbert", "Bert", BASE),
    "electra": ("distilbert", "Electra", dict(BASE, embedding_size=16)),
    "roberta": ("roberta", "Roberta", dict(BASE, max_position_embeddings=130, type_vocab_size=1)),
    "xlm-roberta": ("xlmr", "XLMRoberta", dict(BASE, max_position_embeddings=130, type_vocab_size=1)),
    "distilbert": ("distilbert", "DistilBert", dict(dim=32, n_heads=4, hidden_dim=37, n_layers=2,
                                                    max_position_embeddings=128)),
    "albert": ("albert", "Albert", dict(BASE, embedding_size=16)),
    # position_buckets above the longest sentence: log buckets are issue 51's item 2, tested on their own
    "deberta-v3": ("deberta", "DebertaV2", dict(BASE, relative_attention=True, position_buckets=64,
                                                max_relative_positions=128, pos_att_type=["p2c", "c2p"],
                                                share_att_key=True, norm_rel_ebd="layer_norm",
                                                position_biased_input=False, type_vocab_size=0)),
    "modernbert": ("modernbert", "ModernBert", dict(BASE, num_hidden_layers=3, max_position_embeddings=2048,
                                                    local_attention=8, global_attn_every_n_layers=2)),
}


def _family_dir(family: str, root):
    """A tiny random transformers masked LM of `family`, its tokenizer, and mean pooling declared."""
    from bertkit.st import write_sentence_transformers_files
    from bertkit.tokenizer import Tokenizer
    from finetune_helpers import BAD, FILLER, GOOD, NOUNS
    from tokenizer_family_dirs import CONFIGS, build, save

    layout, prefix, kwargs = FAMILIES[family]
    folder = root / family
    lines = SENTENCES * 4 + [" ".join(GOOD + BAD + NOUNS + FILLER)] * 4
    save(build(layout, lines), folder, CONFIGS[layout])
    tok = Tokenizer.from_pretrained(folder)
    ids = {"pad_token_id": tok.pad_id}
    if family == "modernbert":
        ids.update(cls_token_id=tok.cls_id, sep_token_id=tok.sep_id, bos_token_id=tok.cls_id, eos_token_id=tok.sep_id)
    config = getattr(transformers, prefix + "Config")(vocab_size=len(tok), **kwargs, **ids)
    torch.manual_seed(0)
    getattr(transformers, prefix + "ForMaskedLM")(config).save_pretrained(folder)
    write_sentence_transformers_files(folder, "mean", 128, 32)
    return folder


def _transformers_vectors(folder) -> np.ndarray:
    """transformers' own encoder on bertkit's token ids, one sentence at a time, mean-pooled."""
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(folder)
    model = transformers.AutoModel.from_pretrained(folder).eval()
    rows = []
    with torch.no_grad():
        for text in SENTENCES:
            ids = torch.tensor([tok.encode(text).ids])  # (1, T)
            rows.append(model(input_ids=ids).last_hidden_state[0].double().mean(0).numpy())  # (C,)
    return np.stack(rows)


@pytest.fixture
def bf16_cpu(monkeypatch):
    """This process's CPU reported as computing bf16 natively (AVX512-BF16 / AMX)."""
    monkeypatch.setattr(devices, "cpu_has_bf16", lambda: True)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_embed_at_default_settings_gives_transformers_numbers_where_bf16_would_run(family, bf16_cpu, tmp_path,
                                                                                   capsys):
    folder = _family_dir(family, tmp_path)
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["embed", "--model", str(folder), "--input", str(tmp_path / "in.txt"), "--device", "cpu",
                 "--out", str(tmp_path / "v.npy")]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first == f"bertkit embed: {devices.BF16_NOTE}", first
    ours, ref = np.load(tmp_path / "v.npy").astype(np.float64), _transformers_vectors(folder)
    diff = np.abs(ours - ref)
    assert diff.max() <= TOL, f"{family}: max diff {diff.max():.3g} (mean {diff.mean():.3g}) exceeds {TOL:g}"


def test_the_bf16_note_only_where_the_default_was_left_and_bf16_could_run(tiny_dir, bf16_cpu, tmp_path, capsys,
                                                                           monkeypatch):
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    embed = ["embed", "--model", str(tiny_dir), "--input", str(tmp_path / "in.txt"), "--pooling", "mean",
             "--device", "cpu", "--overwrite", "--out", str(tmp_path / "v.npy")]
    for extra, noted in (((), True), (("--precision", "fp32"), False), (("--precision", "auto"), False),
                         (("--int8",), False)):
        assert main([*embed, *extra]) == 0
        assert (devices.BF16_NOTE in capsys.readouterr().err) is noted, extra
    monkeypatch.setattr(devices, "cpu_has_bf16", lambda: False)
    assert main(embed) == 0
    assert devices.BF16_NOTE not in capsys.readouterr().err
    assert devices.bf16_note("cpu") is None


def test_search_and_serve_say_when_queries_come_at_another_precision_than_the_index(tiny_dir, tmp_path, capsys):
    from bertkit.serve.models import describe
    from bertkit.serve.search import attach_index

    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    index = tmp_path / "idx"
    assert main(["index", "--model", str(tiny_dir), "--input", str(docs), "--out", str(index), "--no-progress",
                 "--device", "cpu", "--precision", "bf16"]) == 0
    assert json.loads((index / "meta.json").read_text())["precision"] == "bf16"
    search = ["search", "--index", str(index), "the movie", "--device", "cpu"]
    mismatch = "the index's vectors were made in bf16, the queries are encoded in fp32"
    for extra, noted in (((), True), (("--precision", "bf16"), False)):
        capsys.readouterr()
        assert main([*search, *extra]) == 0
        captured = capsys.readouterr()
        assert captured.out.startswith("query: the movie")
        assert (mismatch in captured.err) is noted, (extra, captured.err)
    for precision, noted in (("fp32", True), ("bf16", False)):
        line = attach_index([describe("mlm", tiny_dir, precision=precision)], (None, str(index)))
        assert (line is not None and mismatch in line) is noted, (precision, line)


def test_the_training_commands_that_keep_auto_name_what_it_resolved_to(monkeypatch):
    """The demo's first line and summary.json, and ablate's first line, say the precision "auto" became."""
    from types import SimpleNamespace

    from bertkit.cli.ablate import _precision
    from bertkit.demo.pretraining import pretraining_precision

    for native, expected in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(devices, "cpu_has_bf16", lambda native=native: native)
        assert pretraining_precision() == expected
        assert _precision(SimpleNamespace(scale="cpu-small", device="cpu")) == expected  # the budget recipe: auto
        assert _precision(SimpleNamespace(scale="tiny", device="cpu")) == "fp32"  # the tiny scale fixes fp32
