"""bench/finetune_conventions.py's pure helpers: the entity-type sets built from CoNLL tags, the
imbalanced SST-2 file, the recipe's flag edits and the seed-spread verdict. (Its runs are smoke-run
by hand: `python bench/finetune_conventions.py SUB --smoke`.)"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def fc():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("finetune_conventions")
    finally:
        sys.path.remove(str(BENCH))


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

The DT B-NP O
end NN I-NP O
-DOCSTART- -X- -X- O

Paris NNP B-NP B-LOC
and CC O O
Lyon NNP B-NP B-LOC
"""


def test_entity_type_sets_keep_empty_sentences(fc, tmp_path):
    path = tmp_path / "snippet.conll"
    path.write_text(CONLL, encoding="utf-8")
    rows = fc.entity_type_rows(path)
    assert rows == [("EU rejects German call", ["MISC", "ORG"]), ("Peter Blackburn", ["PER"]),
                    ("The end", []), ("Paris and Lyon", ["LOC"])]
    assert fc.entity_types(["O", "I-PER", "B-PER", "O"]) == ["PER"]
    table = tmp_path / "sets.tsv"
    fc.write_sets(table, rows)
    assert table.read_text(encoding="utf-8").splitlines() == [
        "text\tlabels", "EU rejects German call\tMISC,ORG", "Peter Blackburn\tPER", "The end\t", "Paris and Lyon\tLOC"]
    from bertkit.data.glue import read_label_sets

    assert [e.label for e in read_label_sets(table, ["text"], "labels")] == [("MISC", "ORG"), ("PER",), (), ("LOC",)]
    assert fc.label_counts(rows) == {"sentences": 4, "LOC": 1, "MISC": 1, "ORG": 1, "PER": 1, "none": 1}


def test_imbalanced_sst2_keeps_ten_positives_per_negative(fc, tmp_path):
    src = tmp_path / "train.tsv"
    src.write_text("sentence\tlabel\n" + "".join(f"good {i} \t1\n" for i in range(50))
                   + "".join(f"bad {i} \t0\n" for i in range(40)), encoding="utf-8")
    out = tmp_path / "imbalanced.tsv"
    data = fc.imbalanced_sst2(src, out, None)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "sentence\tlabel" and len(lines) == 1 + 55
    assert (data["positives"], data["negatives"]) == (50, 5)
    assert sum(line.endswith("\t0") for line in lines) == 5
    again = tmp_path / "again.tsv"
    fc.imbalanced_sst2(src, again, None)
    assert again.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")  # seeded
    assert fc.imbalanced_sst2(src, tmp_path / "small.tsv", 22)["positives"] == 20


def test_recipe_edits_and_verdicts(fc):
    base = fc.recipe()
    assert base[base.index("--epochs") + 1] == "2" and base[-2:] == ["--adam-eps", "1e-6"]
    ten = fc.recipe(epochs=10)
    assert ten[ten.index("--epochs") + 1] == "10" and len(ten) == len(base)
    tuned = fc.recipe(drop=fc.SEARCHED)
    assert not set(fc.SEARCHED) & set(tuned) and "--group-by-length" in tuned and "--max-seq-len" in tuned
    assert [fc.versus_spread(v, [80.0, 82.0]) for v in (83.0, 82.0, 80.0, 79.9)] == ["above", "within", "within",
                                                                                     "below"]
    assert [fc.order(i, ("a", "b")) for i in range(3)] == [("a", "b"), ("b", "a"), ("a", "b")]
