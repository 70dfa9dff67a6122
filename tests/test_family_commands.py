"""Every command that takes `--model`, on a directory of each family transformers writes.

Each family's directory is what a user brings: a tiny random transformers masked LM
(`RobertaForMaskedLM`, `ModernBertForMaskedLM`, ...) saved by transformers beside a tokenizer laid
out as that family's (tests/tokenizer_family_dirs.py: byte-level BPE for RoBERTa and ModernBERT,
Unigram for XLM-R, ALBERT and DeBERTa-v3, WordPiece for DistilBERT), learned from the fine-tuning
tests' sentences. On it: fine-tuning for a sentence task, NER, SQuAD, multi-label and a
bi-encoder, each evaluated again from its saved folder; embed, features, index and search; ONNX
export (fp32 and int8) against PyTorch; distillation; fill-mask; `bertkit info`. Then a real
`bertkit serve` answers /predict, /v1/embeddings and POST / for RoBERTa, DeBERTa-v3 and ModernBERT.
"""

from __future__ import annotations

import json
import random

import httpx
import numpy as np
import pytest

from finetune_helpers import (
    BAD,
    FILLER,
    GOOD,
    NOUNS,
    assert_same_metrics,
    evaluate,
    finetune,
    run_cli,
    sentence,
    write_conll,
    write_squad,
    write_sst2,
)
from serve_helpers import serving

transformers = pytest.importorskip("transformers")
transformers.utils.logging.set_verbosity_error()

# family -> (tokenizer layout in tokenizer_family_dirs, transformers class, its config's arguments)
BASE = dict(hidden_size=32, num_attention_heads=4, intermediate_size=37, num_hidden_layers=2)
FAMILIES = {
    "roberta": ("roberta", "RobertaForMaskedLM", dict(BASE, max_position_embeddings=130, type_vocab_size=1)),
    "xlm-roberta": ("xlmr", "XLMRobertaForMaskedLM", dict(BASE, max_position_embeddings=130, type_vocab_size=1)),
    "distilbert": ("distilbert", "DistilBertForMaskedLM",
                   dict(dim=32, n_heads=4, hidden_dim=37, n_layers=2, max_position_embeddings=128)),
    "albert": ("albert", "AlbertForMaskedLM", dict(BASE, embedding_size=16, max_position_embeddings=128)),
    "deberta-v3": ("deberta", "DebertaV2ForMaskedLM",
                   dict(BASE, max_position_embeddings=128, relative_attention=True, position_buckets=16,
                        max_relative_positions=128, pos_att_type=["p2c", "c2p"], share_att_key=True,
                        norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0)),
    "modernbert": ("modernbert", "ModernBertForMaskedLM",
                   dict(BASE, num_hidden_layers=3, max_position_embeddings=2048, local_attention=8,
                        global_attn_every_n_layers=2)),
}
SERVED = ("roberta", "deberta-v3", "modernbert")


def corpus_lines(n: int = 400) -> list[str]:
    rng = random.Random(0)
    words = GOOD + BAD + NOUNS + FILLER + ["john", "mary", "paris", "berlin", "river", "what", "is", "the", "?"]
    lines = [sentence(rng, i % 2 == 0) for i in range(n)]
    return lines + [" ".join(rng.choice(words) for _ in range(12)) for _ in range(n)]


def _model_dir(family: str, root):
    from tokenizer_family_dirs import CONFIGS, build, save

    layout, cls, kwargs = FAMILIES[family]
    folder = root / family
    tok = build(layout, corpus_lines())
    save(tok, folder, CONFIGS[layout])
    from bertkit.tokenizer import Tokenizer

    ours = Tokenizer.from_pretrained(folder)
    config_cls = getattr(transformers, cls.replace("ForMaskedLM", "Config"))
    ids = {"pad_token_id": ours.pad_id}
    if family == "modernbert":
        ids.update(cls_token_id=ours.cls_id, sep_token_id=ours.sep_id, bos_token_id=ours.cls_id,
                   eos_token_id=ours.sep_id)
    import torch

    torch.manual_seed(0)
    model = getattr(transformers, cls)(config_cls(vocab_size=len(ours), **kwargs, **ids))
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {family: _model_dir(family, root) for family in FAMILIES}


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("family-tasks")
    write_sst2(root / "sst2.tsv", 48, 1)
    write_conll(root / "ner.txt", 24, 2)
    write_squad(root / "squad.json", 2, 3)
    rng = random.Random(4)
    rows = [(sentence(rng, True), sentence(rng, True)) for _ in range(24)]
    (root / "pairs.tsv").write_text("anchor\tpositive\n" + "".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    labels = ["pos", "neg", "city"]
    lines = []
    for i in range(30):
        text = sentence(rng, i % 2 == 0) + (" in paris" if i % 3 == 0 else "")
        tags = ["pos" if i % 2 == 0 else "neg"] + (["city"] if i % 3 == 0 else [])
        lines.append(json.dumps({"text": text, "labels": tags}))
    (root / "multi.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "sentences.txt").write_text("\n".join(corpus_lines(20)[:20]) + "\n", encoding="utf-8")
    docs = corpus_lines(120)
    (root / "corpus").mkdir()
    for i in range(0, len(docs), 12):  # a file per document
        (root / "corpus" / f"doc{i:03d}.txt").write_text("\n".join(docs[i:i + 12]) + "\n", encoding="utf-8")
    assert labels
    return root


@pytest.mark.parametrize("family", list(FAMILIES))
def test_info_names_the_family_and_fill_mask_runs(family_dirs, family, capsys):
    folder = family_dirs[family]
    assert run_cli("info", "--json", folder) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["family"] == family.replace("deberta-v3", "deberta-v2") and "masked-LM" in info["heads"]
    from bertkit.tokenizer import Tokenizer

    mask = Tokenizer.from_pretrained(folder).convert_ids_to_tokens(
        [Tokenizer.from_pretrained(folder).mask_id])[0]
    assert run_cli("fill-mask", "--model", folder, f"the movie was {mask} .") == 0
    assert "the movie was" in capsys.readouterr().out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_finetune_each_task_and_evaluate_it_again(family_dirs, task_files, family, tmp_path, capsys):
    folder, t = family_dirs[family], task_files
    runs = {
        "sst2": ("sst2", t / "sst2.tsv", ()),
        "ner": ("ner", t / "ner.txt", ()),
        "squad": ("squad", t / "squad.json", ("--max-seq-len", "48")),
        "multilabel": ("multilabel", t / "multi.jsonl", ("--text-columns", "text", "--label-column", "labels")),
        "embedding": ("embedding", t / "pairs.tsv", ()),
    }
    for name, (task, data, extra) in runs.items():
        out = tmp_path / name
        results = finetune(folder, out, task, data, data, *extra)
        assert results["seeds"], f"{family} {task}: no seed finished"
        saved = json.loads((out / "model" / "config.json").read_text())
        assert saved["model_type"] == family.replace("deberta-v3", "deberta-v2"), f"{family} {task} saved as another"
        if task in ("sst2", "ner", "multilabel"):  # the saved folder rescored exactly as training scored it
            assert_same_metrics(results, evaluate(capsys, out / "model", task, data))
        if task in ("sst2", "ner", "squad"):  # each head's ONNX graph, checked against PyTorch by the export
            assert run_cli("export", "--model", out / "model", "--format", "onnx", "--out", out / "onnx") == 0
            report = json.loads((out / "onnx" / "onnx.json").read_text())
            assert max(report["max_abs_diff"].values()) < 1e-4, (family, task, report["max_abs_diff"])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_embed_features_index_search_export_and_distill(family_dirs, task_files, family, tmp_path, capsys):
    folder, t = family_dirs[family], task_files
    assert run_cli("embed", "--model", folder, "--input", t / "sentences.txt", "--pooling", "mean",
                   "--precision", "fp32", "--out", tmp_path / "v.npy") == 0
    vectors = np.load(tmp_path / "v.npy")
    assert vectors.shape == (20, 32) and np.isfinite(vectors).all()
    assert run_cli("features", "--model", folder, "--input", t / "sentences.txt", "--layers", "-1,-2",
                   "--out", tmp_path / "f.npz") == 0
    passages = tmp_path / "docs.jsonl"
    passages.write_text("".join(json.dumps({"id": str(i), "text": s}) + "\n"
                                for i, s in enumerate(corpus_lines(10)[:10])), encoding="utf-8")
    assert run_cli("index", "--model", folder, "--input", passages, "--out", tmp_path / "idx") == 0
    capsys.readouterr()
    assert run_cli("search", "--index", tmp_path / "idx", "the movie", "-k", "2") == 0
    assert capsys.readouterr().out.strip()
    pytest.importorskip("onnxruntime")
    assert run_cli("export", "--model", folder, "--format", "onnx", "--int8", "--graph", "embedding",
                   "--out", tmp_path / "onnx") == 0
    report = json.loads((tmp_path / "onnx" / "onnx.json").read_text())
    assert max(report["max_abs_diff"].values()) < 1e-4, report["max_abs_diff"]  # the export's own check batch
    assert run_cli("embed", "--model", tmp_path / "onnx", "--backend", "onnx", "--input", t / "sentences.txt",
                   "--pooling", "mean", "--out", tmp_path / "o.npy") == 0
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), vectors, atol=5e-4)  # other texts, other padding
    assert run_cli("prepare", "--input", t / "corpus", "--tokenizer", folder, "--max-seq-len", "32",
                   "--format", "packed", "--val-fraction", "0.2", "--out", tmp_path / "data") == 0
    student = tmp_path / "student"
    assert run_cli("distill", "--teacher", folder, "--task", "mlm", "--student-preset", "teacher", "--student-layers",
                   "1", "--train", tmp_path / "data", "--out", student, "--epochs", "1", "--batch-size", "8",
                   "--no-progress") == 0
    saved = json.loads((student / "model" / "config.json").read_text())
    assert saved["model_type"] == family.replace("deberta-v3", "deberta-v2")


def test_modernbert_reads_a_long_text_whole_where_roberta_cuts_it(family_dirs, tmp_path, capsys):
    """Each family's own limit: 1,500 words are one input for this ModernBERT (2,048 positions) and
    are cut for this RoBERTa (128), by `embed`'s default length and by `index`'s."""
    words = (GOOD + NOUNS + FILLER) * 60
    (tmp_path / "long.txt").write_text(" ".join(words[:1500]) + "\n", encoding="utf-8")
    notes = {}
    for family in ("modernbert", "roberta"):
        capsys.readouterr()
        assert run_cli("embed", "--model", family_dirs[family], "--input", tmp_path / "long.txt", "--pooling", "mean",
                       "--out", tmp_path / f"{family}.npy") == 0
        notes[family] = capsys.readouterr().err
    assert "cut" not in notes["modernbert"] and "window" not in notes["modernbert"], notes["modernbert"]
    assert "cut" in notes["roberta"], notes["roberta"]
    from bertkit.st import model_pooling

    assert model_pooling(family_dirs["modernbert"])[1] == 2048 and model_pooling(family_dirs["roberta"])[1] == 256


def library_probabilities(folder, text: str) -> dict[str, float]:
    import torch

    from bertkit import BertForSequenceClassification, Tokenizer

    tok, model = Tokenizer.from_pretrained(folder), BertForSequenceClassification.from_pretrained(folder).eval()
    enc = tok.encode(text)
    with torch.no_grad():
        logits = model(torch.tensor([enc.ids]), torch.tensor([enc.attention_mask]), torch.tensor([enc.type_ids])).logits
    return {model.config.id2label[i]: p for i, p in enumerate(logits.softmax(-1)[0].tolist())}


@pytest.mark.parametrize("family", SERVED)
def test_a_real_server_answers_predict_embeddings_and_post_root(family_dirs, task_files, family, tmp_path):
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe
    from bertkit.serve.requests import Limits

    clf = tmp_path / "clf"
    finetune(family_dirs[family], clf, "sst2", task_files / "sst2.tsv", task_files / "sst2.tsv")
    service = Service([describe("clf", clf / "model"), describe("enc", family_dirs[family])],
                      Limits(max_body_bytes=100_000, max_inputs=64, max_input_chars=2_000), "torch",
                      log=lambda line: None)
    with serving(service) as url:
        r = httpx.post(url + "/predict", json={"model": "clf", "inputs": "the movie was good ."}, timeout=30)
        assert r.status_code == 200, r.text
        served = {p["label"]: p["score"] for p in r.json()}
        assert served == pytest.approx(library_probabilities(clf / "model", "the movie was good ."), abs=1e-5)
        r = httpx.post(url + "/v1/embeddings", json={"model": "enc", "input": ["a good film", "the river"]},
                       timeout=30)
        assert r.status_code == 200, r.text
        assert [len(d["embedding"]) for d in r.json()["data"]] == [32, 32]
        r = httpx.post(url + "/", json={"model": "clf", "inputs": "a dull plot ."}, timeout=30)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("model_type", ["t5", "gpt2", "llama"])
def test_an_unsupported_family_is_one_line_naming_the_supported_ones(tmp_path, model_type, capsys):
    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type, "hidden_size": 8}), encoding="utf-8")
    (folder / "model.safetensors").write_bytes(b"")
    for command in (["info", folder], ["embed", "--model", folder, "--input", folder / "config.json", "--out",
                                       tmp_path / "v.npy"]):
        capsys.readouterr()
        assert run_cli(*command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"model_type '{model_type}' is not supported" in err[0], err
        assert "roberta" in err[0] and "modernbert" in err[0] and "deberta-v2" in err[0]
