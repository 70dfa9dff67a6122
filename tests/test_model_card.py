"""Model cards: every kind of model directory bertkit saves holds a README.md whose metadata block
is Hugging Face's (it parses with yaml.safe_load, names the library, its base model where it has
one, its pipeline tag and its metrics with values) and whose prose gives the command that made
it and how to load it. Tiny runs: a few steps each, on the fixtures the other tests use."""

from __future__ import annotations

import json
import random
import shlex
from pathlib import Path

import pytest
import yaml

from bertkit.model_card import Card, command_line, render
from finetune_helpers import run_cli, sentence, write_conll, write_squad, write_sst2, write_stsb
from pretrain_helpers import tiny_args

FT = ("--epochs", "1", "--batch-size", "8", "--seeds", "1", "--no-progress")


def card(folder: Path) -> tuple[dict, str]:
    """(the metadata block, the prose) of `folder`'s README.md."""
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n"), text[:80]
    block, _, prose = text[4:].partition("\n---\n")
    return yaml.safe_load(block), prose


def assert_card(folder: Path, pipeline: str, base: str | None, metrics: dict, *, sentence_transformers=False) -> str:
    meta, prose = card(folder)
    assert meta["library_name"] == "bertkit" and meta["pipeline_tag"] == pipeline
    assert meta.get("base_model") == base
    assert "bertkit" in meta["tags"] and meta["datasets"]
    numeric = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numeric and meta["metrics"] == list(numeric)
    (result,) = meta["model-index"][0]["results"]
    assert result["task"]["type"] == pipeline and result["dataset"]["name"]
    assert {m["type"]: m["value"] for m in result["metrics"]} == pytest.approx(numeric)
    assert "from_pretrained(\"PATH\")" in prose and "```bash\nbertkit " in prose
    assert ("SentenceTransformer(\"PATH\")" in prose) == sentence_transformers
    return prose


def last_val(run: Path) -> dict:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in records if r["kind"] == "val"][-1]
    return {k: v for k, v in val.items() if k not in ("step", "kind")}


def saved_dev(out: Path) -> dict:
    results = json.loads((out / "results.json").read_text())
    return next(r for r in results["seeds"] if r["seed"] == results["saved_seed"])["dev"]


def test_pretrained_and_continued_models_carry_cards_with_the_command_that_made_them(pretraining_data, tmp_path):
    run = tmp_path / "run"
    args = tiny_args(pretraining_data / "nsp", run, "--steps", "4", "--eval-every", "2", "--eval-samples", "8")
    assert run_cli(*args) == 0
    prose = assert_card(run / "model", "fill-mask", None, last_val(run))
    command = next(line for line in prose.splitlines() if line.startswith("bertkit pretrain"))
    words = shlex.split(command)
    assert words[words.index("--objective") + 1] == "mlm+nsp" and words[words.index("--steps") + 1] == "4"
    assert words[words.index("--lr") + 1] == "0.002"
    # continued pretraining names the model it started from
    again = tmp_path / "again"
    assert run_cli("pretrain", "--data", pretraining_data / "nsp", "--out", again, "--init-from", run / "model",
                   "--steps", "2", "--batch-size", "13", "--eval-samples", "8", "--objective", "mlm") == 0
    assert_card(again / "model", "fill-mask", str(run / "model"), last_val(again))


def test_electra_saves_three_folders_each_with_its_card(pretraining_data, tmp_path):
    run = tmp_path / "electra"
    assert run_cli(*tiny_args(pretraining_data / "packed", run, "--objective", "electra", "--precision", "fp32",
                              "--steps", "2", "--eval-samples", "8")) == 0
    for name, pipeline in (("model", "feature-extraction"), ("discriminator", "feature-extraction"),
                           ("generator", "fill-mask")):
        assert_card(run / name, pipeline, None, last_val(run))
    assert "electra" in card(run / "generator")[0]["tags"]


def _pairs(path: Path) -> Path:
    nouns = ["movie", "film", "plot", "cast", "story", "show", "city", "river", "team", "paris", "berlin", "john"]
    rows = [(f"the {a}", f"{b} was good", f"{c} was bad") for a, b, c in zip(nouns, nouns[3:] + nouns[:3],
                                                                               nouns[5:] + nouns[:5])]
    path.write_text("anchor\tpositive\tnegative\n" + "".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("task,extra,pipeline", [
    ("sst2", (), "text-classification"),
    ("stsb", (), "text-classification"),
    ("ner", (), "token-classification"),
    ("ner", ("--feature-based", "--layers=-2,-1"), "token-classification"),
    ("squad", ("--max-seq-len", "64"), "question-answering"),
    ("embedding", ("--max-seq-len", "32"), "sentence-similarity"),
    ("rerank", ("--max-seq-len", "32"), "text-ranking"),
])
def test_every_fine_tuned_task_saves_a_card(task, extra, pipeline, tiny_dir, tmp_path):
    if task in ("sst2", "stsb"):
        writer = write_sst2 if task == "sst2" else write_stsb
        train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
        writer(train, 16, 0), writer(dev, 8, 1)
    elif task == "ner":
        train, dev = tmp_path / "train.conll", tmp_path / "dev.conll"
        write_conll(train, 8, 0), write_conll(dev, 4, 1)
    elif task == "squad":
        train, dev = tmp_path / "train.json", tmp_path / "dev.json"
        write_squad(train, 2, 0), write_squad(dev, 1, 1)
    else:
        train = dev = _pairs(tmp_path / "pairs.tsv")
    out = tmp_path / "out"
    assert run_cli("finetune", "--model", tiny_dir, "--task", task, "--train", train, "--dev", dev, "--out", out,
                   *FT, *extra) == 0
    prose = assert_card(out / "model", pipeline, str(tiny_dir), saved_dev(out),
                        sentence_transformers=task == "embedding")
    meta, _ = card(out / "model")
    assert meta["datasets"] == list(dict.fromkeys([str(train), str(dev)]))
    command = next(line for line in prose.splitlines() if line.startswith("bertkit finetune"))
    words = shlex.split(command)
    assert words[words.index("--task") + 1] == task and words[words.index("--model") + 1] == str(tiny_dir)
    assert words[words.index("--report-to") + 1] == "none"
    assert float(words[words.index("--lr") + 1]) == (1e-3 if "--feature-based" in extra else 2e-5)  # resolved
    assert ("--feature-based" in words) == ("--feature-based" in extra)


def test_distilled_students_name_their_teacher(tiny_dir, tmp_path):
    write_sst2(tmp_path / "train.tsv", 16, 0)
    write_sst2(tmp_path / "dev.tsv", 8, 1)
    teacher = tmp_path / "teacher"
    assert run_cli("finetune", "--model", tiny_dir, "--task", "sst2", "--train", tmp_path / "train.tsv",
                   "--dev", tmp_path / "dev.tsv", "--out", teacher, *FT) == 0
    out = tmp_path / "student"
    assert run_cli("distill", "--teacher", teacher / "model", "--task", "sst2", "--student-preset", "teacher",
                   "--student-layers", "1", "--train", tmp_path / "train.tsv", "--dev", tmp_path / "dev.tsv",
                   "--out", out, "--epochs", "1", "--batch-size", "8", "--no-progress") == 0
    prose = assert_card(out / "model", "text-classification", str(teacher / "model"), saved_dev(out))
    assert "distillation" in card(out / "model")[0]["tags"] and "\nbertkit distill --to student --teacher" in prose
    # an embedding student: any encoder as the teacher, sentences to learn its vectors on, STS-B pairs as dev
    rng = random.Random(0)
    (tmp_path / "corpus.txt").write_text("".join(sentence(rng, i % 2 == 0) + "\n" for i in range(24)))
    write_stsb(tmp_path / "sts.tsv", 8, 2)
    out = tmp_path / "embedding"
    assert run_cli("distill", "--teacher", tiny_dir, "--task", "embedding", "--student-preset", "teacher",
                   "--student-layers", "1", "--train", tmp_path / "corpus.txt", "--dev", tmp_path / "sts.tsv",
                   "--out", out, "--epochs", "1", "--batch-size", "8", "--no-progress") == 0
    assert_card(out / "model", "sentence-similarity", str(tiny_dir), saved_dev(out), sentence_transformers=True)


def _code(prose: str, language: str, after: str) -> str:
    """The first ```language block after the line `after` in a card's prose."""
    rest = prose[prose.index(after):]
    return rest.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def test_an_onnx_export_carries_a_card_whose_snippets_run(tiny_dir, tmp_path):
    import numpy as np

    write_sst2(tmp_path / "train.tsv", 16, 0)
    write_sst2(tmp_path / "dev.tsv", 8, 1)
    assert run_cli("finetune", "--model", tiny_dir, "--task", "sst2", "--train", tmp_path / "train.tsv",
                   "--dev", tmp_path / "dev.tsv", "--out", tmp_path / "ft", *FT) == 0
    source, out = tmp_path / "ft" / "model", tmp_path / "onnx"
    assert run_cli("export", "--model", source, "--format", "onnx", "--int8", "--out", out) == 0
    meta, prose = card(out)
    onnx = json.loads((out / "onnx.json").read_text())
    assert meta["library_name"] == "bertkit" and meta["pipeline_tag"] == "text-classification"
    assert meta["base_model"] == str(source) and {"onnx", "sst2"} <= set(meta["tags"])
    (result,) = meta["model-index"][0]["results"]
    assert {m["type"]: m["value"] for m in result["metrics"]} == pytest.approx(
        {"fp32_max_abs_diff_logits": onnx["max_abs_diff"]["logits"],
         "int8_max_abs_diff_logits": onnx["int8"]["max_abs_diff"]["logits"]})
    assert "from_pretrained(\"PATH\")\nmodel = Auto" not in prose  # transformers cannot load the graph
    # the command in the card makes the same folder again, and its ONNX Runtime snippet runs as written
    command = next(line for line in prose.splitlines() if line.startswith("bertkit export"))
    words = shlex.split(command)
    words[words.index("--out") + 1] = str(tmp_path / "again")
    assert run_cli(*words[1:]) == 0
    again = json.loads((tmp_path / "again" / "onnx.json").read_text())
    assert {k: again[k] for k in ("kind", "files", "outputs")} == {k: onnx[k] for k in ("kind", "files", "outputs")}
    names: dict = {}
    exec(_code(prose, "python", "ONNX Runtime:").replace("PATH", str(out)), names)
    assert names["outputs"]["logits"].shape == (1, 2) and np.isfinite(names["outputs"]["logits"]).all()
    usage = _code(prose, "bash", "bertkit:").replace("PATH", str(out)).replace("DEV_FILE", str(tmp_path / "dev.tsv"))
    evaluate = shlex.split(usage.splitlines()[0])
    assert evaluate[:2] == ["bertkit", "evaluate"] and run_cli(*evaluate[1:]) == 0


def test_the_metadata_block_is_yaml_for_any_string():
    """Strings with YAML's special characters, non-ASCII text, odd keys and empty values round-trip."""
    odd = {"f1: macro": 0.5, "ndcg@10": 1, "#x": 2.5e-7, "- y": -3.0}
    c = Card(title="a: b # c", summary="s", pipeline_tag="fill-mask", transformers_class="AutoModel",
             base_model="C:\\models\\{x}\n'quoted' \"too\" é 日本", datasets=["[a]", "*b", "&c", "yes", "null", "1.5"],
             metrics=odd, tags=["on", "~"], bertkit_usage="bertkit info --model PATH")
    meta, _ = card_text(render(c))
    assert meta == {**c.metadata(), "tags": ["bertkit", "bert", "on", "~"]}
    assert meta["base_model"] == c.base_model and meta["datasets"] == c.datasets and meta["metrics"] == list(odd)


def card_text(text: str) -> tuple[dict, str]:
    block, _, prose = text[4:].partition("\n---\n")
    return yaml.safe_load(block), prose


def test_the_command_line_renders_flags_as_argparse_reads_them():
    words = shlex.split(command_line("finetune", {
        "model": "m dir", "seeds": (1, 2), "layers": (-4, -1), "train": ["a", "b"], "feature_based": True,
        "no_progress": False, "dev": None, "config_json": {"a": 1}}))
    assert words == ["bertkit", "finetune", "--model", "m dir", "--seeds", "1,2", "--layers=-4,-1", "--train", "a",
                     "b", "--feature-based", "--config-json", '{"a": 1}']
