"""GLUE and table readers: every official layout reads with no options, bad rows name file:line,
and `bertkit score` scores a GLUE predictions file through a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bertkit.cli import main as cli
from bertkit.data.glue import GLUE, glue_task, label_list, read_glue, read_predictions, read_table, write_predictions
from bertkit.errors import UserError
from conftest import shared_path


@pytest.mark.parametrize("task,folder,train,dev", [
    ("cola", "CoLA", 8551, 1043),
    ("sst2", "SST-2", 67349, 872),
    ("mrpc", "MRPC", 3668, 408),
    ("stsb", "STS-B", 5749, 1500),
    ("rte", "RTE", 2490, 277),
])
def test_glue_shared_files_read_with_no_options(task, folder, train, dev):
    spec = GLUE[task]
    for split, count in (("train", train), ("dev", dev)):
        examples = read_glue(task, shared_path("glue", folder, f"{split}.tsv"))
        assert len(examples) == count
        assert all(e.text_a for e in examples)
        assert all((e.text_b is not None) == spec.pair for e in examples)
        if spec.kind == "regression":
            assert all(0.0 <= e.label <= 5.0 for e in examples)
        else:
            assert label_list(examples) == list(spec.labels)


def test_glue_layout_details(tmp_path):
    mrpc = read_glue("mrpc", shared_path("glue", "MRPC", "dev.tsv"))  # header starts with a BOM
    assert mrpc[0].text_b.startswith('" The foodservice')  # quotes kept: no csv quoting
    stsb = read_glue("STS-B", shared_path("glue", "STS-B", "dev.tsv"))
    assert (stsb[0].text_a, stsb[0].text_b, stsb[0].label) == (
        "A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0)
    cola = read_glue("CoLA", shared_path("glue", "CoLA", "dev.tsv"))
    assert (cola[0].text_a, cola[0].label) == ("The sailors rode the breeze clear of the rocks.", "1")


def _write(path, rows):
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_other_glue_layouts_and_test_files(tmp_path):
    mnli = _write(tmp_path / "dev_matched.tsv", [
        ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
         "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1", "gold_label"],
        ["0", "1", "1e", "fiction", "( x )", "( y )", "(x)", "(y)", 'He said "hi', "She left.", "neutral", "neutral"],
    ])
    e = read_glue("mnli", mnli)[0]
    assert (e.text_a, e.text_b, e.label) == ('He said "hi', "She left.", "neutral")
    qqp = _write(tmp_path / "qqp.tsv", [["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                                        ["7", "1", "2", "Why?", "How?", "0"]])
    assert read_glue("qqp", qqp)[0].label == "0"
    qnli = _write(tmp_path / "qnli.tsv", [["index", "question", "sentence", "label"],
                                          ["0", "Who?", "Me.", "entailment"]])
    assert read_glue("qnli", qnli)[0].text_b == "Me."
    wnli = _write(tmp_path / "wnli.tsv", [["index", "sentence1", "sentence2", "label"], ["0", "A", "B", "1"]])
    assert read_glue("wnli", wnli)[0].label == "1"
    rte_test = _write(tmp_path / "test.tsv", [["index", "sentence1", "sentence2"], ["0", "A", "B"]])
    assert read_glue("rte", rte_test)[0].label is None
    cola_test = _write(tmp_path / "cola_test.tsv", [["index", "sentence"], ["0", "Who left?"]])
    assert read_glue("cola", cola_test)[0].text_a == "Who left?"


@pytest.mark.parametrize("task,rows,message", [
    ("rte", [["index", "sentence1", "sentence2", "label"], ["0", "A", "B", "entailment"], ["1", "A", "B"]],
     "rows.tsv:3: expected 4 tab-separated columns, found 3"),
    ("rte", [["index", "sentence1", "sentence2", "label"], ["0", "A", "B", "yes"]], "rows.tsv:2: label 'yes'"),
    ("stsb", [["sentence1", "sentence2", "score"], ["A", "B", "4.2"], ["A", "B", "high"]],
     "rows.tsv:3: score 'high' is not a number"),
    ("cola", [["src", "1", "", "Fine."], ["src", "2", "", "Bad label."]], "rows.tsv:2: label '2'"),
    ("sst2", [["text", "label"]], "rows.tsv:1: sst2 header has no column 'sentence'"),
])
def test_malformed_rows_name_file_and_line(tmp_path, task, rows, message):
    path = _write(tmp_path / "rows.tsv", rows)
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        read_glue(task, path)


def test_bad_utf8_names_the_line(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"sentence\tlabel\nok\t1\nbad \xff\t0\n")
    with pytest.raises(UserError, match=r"dev.tsv:3: not valid UTF-8"):
        read_glue("sst2", path)
    with pytest.raises(UserError, match="unknown GLUE task"):
        glue_task("squad")


def test_read_table_tsv_csv_jsonl(tmp_path):
    tsv = _write(tmp_path / "a.tsv", [["text", "other", "label"], ['say "hi', "x", "pos"], ["b", "y", "neg"]])
    examples = read_table(tsv, ["text"], "label", "classification")
    assert [(e.text_a, e.label) for e in examples] == [('say "hi', "pos"), ("b", "neg")]
    assert label_list(examples) == ["neg", "pos"]
    csv_path = tmp_path / "b.csv"
    csv_path.write_text('premise,hypothesis,score\n"A, quoted",B,1.5\nC,D,2\n', encoding="utf-8")
    pairs = read_table(csv_path, ["premise", "hypothesis"], "score", "regression")
    assert [(e.text_a, e.text_b, e.label) for e in pairs] == [("A, quoted", "B", 1.5), ("C", "D", 2.0)]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"t": "x", "y": 3}\n\n{"t": "z", "y": 4}\n', encoding="utf-8")
    assert [e.label for e in read_table(jsonl, ["t"], "y", "classification")] == ["3", "4"]
    assert read_table(jsonl, ["t"], None, "classification")[1].label is None
    jsonl.write_text('{"t": "x", "y": 3}\n{"y": 4}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"c.jsonl:2: no column 't'"):
        read_table(jsonl, ["t"], "y", "classification")
    with pytest.raises(UserError, match=r"b.csv:3: score 'x' is not a number"):
        csv_path.write_text("premise,hypothesis,score\nA,B,1\nC,D,x\n", encoding="utf-8")
        read_table(csv_path, ["premise", "hypothesis"], "score", "regression")


def test_predictions_round_trip_both_layouts(tmp_path):
    path = tmp_path / "pred.txt"
    write_predictions(path, ["entailment", "not_entailment"])
    assert read_predictions(path, GLUE["rte"]) == ["entailment", "not_entailment"]
    write_predictions(path, [1.25, 3.0])
    assert read_predictions(path, GLUE["stsb"]) == [1.25, 3.0]
    path.write_text("index\tprediction\n0\t1\n1\t0\n", encoding="utf-8")
    assert read_predictions(path, GLUE["mrpc"]) == ["1", "0"]
    path.write_text("1\n2\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"pred.txt:2: label '2'"):
        read_predictions(path, GLUE["mrpc"])


def _score(*args):
    return subprocess.run([sys.executable, "-m", "bertkit.cli", "score", *args],
                          capture_output=True, text=True, timeout=120)


def test_score_glue_via_cli(tmp_path, capsys):
    gold = shared_path("glue", "MRPC", "dev.tsv")
    labels = [e.label for e in read_glue("mrpc", gold)]
    flipped = ["0" if y == "1" else "1" for y in labels[:40]] + labels[40:]
    pred = tmp_path / "mrpc.tsv"
    pred.write_text("index\tprediction\n" + "".join(f"{i}\t{p}\n" for i, p in enumerate(flipped)), encoding="utf-8")
    done = _score("--task", "mrpc", "--gold", str(gold), "--pred", str(pred))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["count"] == 408 and result["accuracy"] == pytest.approx(100 * 368 / 408)
    pred.write_text("1\n", encoding="utf-8")
    assert cli(["score", "--task", "mrpc", "--gold", str(gold), "--pred", str(pred)]) == 2
    assert "1 predictions for 408 gold examples" in capsys.readouterr().err


def test_score_squad_ids_must_match_the_gold_file(tmp_path, capsys):
    from finetune_helpers import write_squad

    gold = tmp_path / "dev.json"
    write_squad(gold, 2, 0)  # 12 questions, ids a0-0-0 ... a1-1-2
    ids = [q["id"] for a in json.loads(gold.read_text())["data"] for p in a["paragraphs"] for q in p["qas"]]
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({f"other-{i}": "x" for i in range(5)}), encoding="utf-8")
    assert cli(["score", "--task", "squad", "--gold", str(gold), "--pred", str(pred)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{pred}: none of its 5 question ids" in err and str(gold) in err, err
    # Some match: scored, with one warning giving the counts (the rest score 0, as official).
    pred.write_text(json.dumps({**dict.fromkeys(ids[:4], "x"), "other": "x"}), encoding="utf-8")
    assert cli(["score", "--task", "squad", "--gold", str(gold), "--pred", str(pred)]) == 0
    captured = capsys.readouterr()
    assert captured.err == (f"bertkit score: warning: 4 of the 5 predictions in {pred} match the 12 gold questions of "
                            f"{gold}; 1 are ignored and 8 gold questions without a prediction score 0\n")
    result = json.loads(captured.out)
    assert result["count"] == 12 and result["missing"] == 8
    # All match: no warning.
    pred.write_text(json.dumps(dict.fromkeys(ids, "x")), encoding="utf-8")
    assert cli(["score", "--task", "squad", "--gold", str(gold), "--pred", str(pred)]) == 0
    assert capsys.readouterr().err == ""
