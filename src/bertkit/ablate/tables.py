"""The paper's ablation tables as data: rows, columns and the paper's dev figures.

Figures are transcribed from Devlin et al. (arXiv:1810.04805v2), Tables 5-8 (dev sets). Each
row names the pretraining it needs (a `Variant`) and how each column is fine-tuned (`how`);
each row but a table's first is compared with one other row (`against`): the paper's sign of
that gap is what the report checks at our scale. A row the paper does not have (ELECTRA's
replaced-token detection in Table 5) or a column it does not report (CoNLL-2003 in Table 5) has
no figure: the report shows "-" and our gap to the compared row, with no paper sign to check.
Table 5 comes twice: at equal steps, as the paper's, and at equal wall time (`Variant.budget`
"time": each pretraining gets the minutes the MLM + NSP reference took), where an objective with a
costlier step (LTR's next-token logits at every position, ELECTRA's generator) gets fewer steps.
The paper's Table 8 writes its rules as
MASK/SAME/RND; ours (`--mask-rule`) are MASK/RANDOM/KEEP, so "80% 0% 20%" there is 80/20/0 here.
Where our task is not the paper's (MRPC for the paper's MNLI in Table 8), the column says so.
Table 5's compute axis (`t5-curve`) has its rows built per scale (`curve.curve_table`): each of
`CURVE_LINES` at each of the scale's budgets, at equal FLOPs, compared with MLM + NSP at the same
budget; this module holds its lines and columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# How a column is fine-tuned: the paper's recipe, the LTR heads, or a feature-based tagger
# (FEATURES: layers and how they combine; "all" stands for every layer 1..L). NOT_RUN: an entry
# left out (the LTR heads have no BiLSTM tagger, so "+ BiLSTM" has no NER entry).
FINE_TUNE, LTR, LTR_BILSTM, NOT_RUN = "ft", "ltr", "ltr-bilstm", "n/a"
FEATURES = {
    "fb-embeddings": ((0,), "concat"),
    "fb-second-to-last": ((-2,), "concat"),
    "fb-last": ((-1,), "concat"),
    "fb-sum-last-four": ((-4, -3, -2, -1), "sum"),
    "fb-concat-last-four": ((-4, -3, -2, -1), "concat"),
    "fb-sum-all": ("all", "sum"),
}
TASKS = ("mrpc", "sst2", "squad", "conll", "stsb")


@dataclass(frozen=True)
class Variant:
    """One pretraining: objective, data format, masking rule and model size."""

    name: str
    objective: str = "mlm+nsp"
    format: str = "nsp"
    mask_rule: str = "80/10/10"
    size: str = "reference"  # a key of the scale's `sizes`
    budget: str = "steps"  # "steps": `steps`; "time": Table 5's equal wall-time budget
    steps: int | None = None  # budget "steps": this many (the compute curve's equal FLOPs); None: the scale's


@dataclass(frozen=True)
class Column:
    name: str  # as the table shows it
    task: str  # one of TASKS, or "pretrain" (a pretraining's own validation metric)
    metric: str  # key in the fine-tuning dev metrics (or the pretraining's validation record)
    how: str | None = None  # overrides the row's `how` (Table 8's feature-based column)
    lower_is_better: bool = False


@dataclass(frozen=True)
class Row:
    key: str  # what --only names
    label: str
    variant: Variant
    paper: dict  # column name -> the paper's figure
    how: str = FINE_TUNE
    against: str | None = None  # the row this row's gaps are measured from; None: the table's first; its own key: none
    column_how: dict = field(default_factory=dict)  # column name -> how, where it is not `how` (or NOT_RUN)
    seeds: int | None = None  # fine-tuned with the first N of the run's seeds only; None: every seed


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    note: str = ""
    meta: dict = field(default_factory=dict)


BERT = Variant("bert")
NO_NSP = Variant("no-nsp", objective="mlm", format="packed")
LTR_V = Variant("ltr", objective="ltr", format="packed")
ELECTRA_V = Variant("electra", objective="electra", format="packed")
TIME_REFERENCE = BERT  # its measured pretraining time is the equal-time rows' budget

_T5_COLUMNS = (Column("MRPC (acc)", "mrpc", "accuracy"), Column("SST-2 (acc)", "sst2", "accuracy"),
               Column("SQuAD (F1)", "squad", "f1"), Column("CoNLL-2003 NER (F1)", "conll", "f1"))
_NER = "CoNLL-2003 NER (F1)"
# The paper's Table 5 (no NER column: ours is the task where right-hand context matters most at small scale)
_T5_PAPER = {"bert": {"MRPC (acc)": 86.7, "SST-2 (acc)": 92.7, "SQuAD (F1)": 88.5},
             "no-nsp": {"MRPC (acc)": 86.5, "SST-2 (acc)": 92.6, "SQuAD (F1)": 87.9},
             "ltr": {"MRPC (acc)": 77.5, "SST-2 (acc)": 92.1, "SQuAD (F1)": 77.8},
             "ltr-bilstm": {"MRPC (acc)": 75.7, "SST-2 (acc)": 91.6, "SQuAD (F1)": 84.9}}
# An LTR model tags tokens with the ordinary token head: under its causal attention each token's
# tag is read from its left context only.
_LTR_NER = {_NER: FINE_TUNE}

TABLE5 = Table("t5", "Table 5: pretraining tasks (equal steps)", _T5_COLUMNS, (
    Row("t5-bert", "BERT (MLM + NSP)", BERT, _T5_PAPER["bert"]),
    Row("t5-no-nsp", "No NSP", NO_NSP, _T5_PAPER["no-nsp"]),
    Row("t5-ltr", "LTR & No NSP", LTR_V, _T5_PAPER["ltr"], how=LTR, column_how=_LTR_NER),
    Row("t5-ltr-bilstm", "+ BiLSTM", LTR_V, _T5_PAPER["ltr-bilstm"], how=LTR_BILSTM, against="t5-ltr",
        column_how={_NER: NOT_RUN}),
    Row("t5-electra", "ELECTRA (RTD)", ELECTRA_V, {}),
), note="Every row is compared with BERT, except + BiLSTM, which is compared with LTR & No NSP. ELECTRA "
        "(replaced-token detection, Clark et al. 2020) is not in the paper; it has no NSP, so it has one row. "
        "The paper reports no NER in this table; an LTR model tags each token from its left context (the "
        "ordinary token head under its causal attention); the LTR heads have no BiLSTM tagger (n/a).")

TABLE5_TIME = Table("t5-time", "Table 5 at equal wall time: pretraining tasks", _T5_COLUMNS, (
    Row("t5-time-bert", "BERT (MLM + NSP), sets the time", BERT, _T5_PAPER["bert"]),
    Row("t5-time-no-nsp", "No NSP", Variant("no-nsp-time", "mlm", "packed", budget="time"), _T5_PAPER["no-nsp"]),
    Row("t5-time-ltr", "LTR & No NSP", Variant("ltr-time", "ltr", "packed", budget="time"), _T5_PAPER["ltr"],
        how=LTR, column_how=_LTR_NER),
    Row("t5-time-electra", "ELECTRA (RTD)", Variant("electra-time", "electra", "packed", budget="time"), {}),
), note="Every row is pretrained for the wall time the MLM + NSP reference took (its own row, shared with "
        "the equal-steps table), on the same cores, with the budget recipe's schedule over time; a costlier "
        "step gets fewer steps (the pretraining section lists each one's steps). The paper's figures are its "
        "equal-steps ones. + BiLSTM changes fine-tuning, not pretraining, so it is left to the equal-steps table.")

TABLE6 = Table("t6", "Table 6: model size (same steps, same batch, same data)", (
    Column("LM (ppl)", "pretrain", "ppl", lower_is_better=True), Column("MRPC (acc)", "mrpc", "accuracy"),
    Column("SST-2 (acc)", "sst2", "accuracy")), (
    Row("t6-smaller", "smaller", Variant("size-smaller", size="smaller"),
        {"LM (ppl)": 5.84, "MRPC (acc)": 79.8, "SST-2 (acc)": 88.4}),
    Row("t6-reference", "reference (Table 5's BERT)", BERT, {"LM (ppl)": 3.99, "MRPC (acc)": 86.7, "SST-2 (acc)": 92.9},
        against="t6-smaller"),
    Row("t6-larger", "larger", Variant("size-larger", size="larger"),
        {"LM (ppl)": 3.23, "MRPC (acc)": 87.8, "SST-2 (acc)": 93.7}, against="t6-reference"),
), note="The paper's figures are its rows 3/768/12, 12/768/12 (BERT-base) and 24/1024/16 (BERT-large); "
        "each size is compared with the next smaller one. Every size trains for the same steps on the same "
        "batches, so a larger model also spends more compute. LM (ppl) is our masked-LM perplexity on the "
        "held-out documents (one pretraining per size, so its sign is never resolved by seeds).")

TABLE7 = Table("t7", "Table 7: feature-based CoNLL-2003 NER", (Column("CoNLL-2003 dev (F1)", "conll", "f1"),), (
    Row("t7-fine-tune", "fine-tuning", BERT, {"CoNLL-2003 dev (F1)": 96.4}),
    Row("t7-embeddings", "features: embeddings (first layer)", BERT, {"CoNLL-2003 dev (F1)": 91.0},
        how="fb-embeddings"),
    Row("t7-second-to-last", "features: second-to-last hidden", BERT, {"CoNLL-2003 dev (F1)": 95.6},
        how="fb-second-to-last"),
    Row("t7-last", "features: last hidden", BERT, {"CoNLL-2003 dev (F1)": 94.9}, how="fb-last"),
    Row("t7-sum-last-four", "features: sum of the last four", BERT, {"CoNLL-2003 dev (F1)": 95.9},
        how="fb-sum-last-four"),
    Row("t7-concat-last-four", "features: concat of the last four", BERT, {"CoNLL-2003 dev (F1)": 96.1},
        how="fb-concat-last-four"),
    Row("t7-sum-all", "features: sum of all layers", BERT, {"CoNLL-2003 dev (F1)": 95.5}, how="fb-sum-all"),
), note="Every feature-based row is compared with fine-tuning. The paper's sums are learned weighted sums; "
        "ours are plain sums. The tagger is a two-layer BiLSTM on the frozen features, as in the paper.")

_T8 = (  # our M/R/K rule, the paper's MASK/SAME/RND, MNLI, NER fine-tune, NER feature-based
    ("80/10/10", "80% 10% 10%", 84.2, 95.4, 94.9),
    ("100/0/0", "100% 0% 0%", 84.3, 94.9, 94.0),
    ("80/20/0", "80% 0% 20%", 84.1, 95.2, 94.6),
    ("80/0/20", "80% 20% 0%", 84.4, 95.2, 94.7),
    ("0/80/20", "0% 20% 80%", 83.7, 94.8, 94.6),
    ("0/100/0", "0% 0% 100%", 83.6, 94.9, 94.6),
)
T8_COLUMNS = (Column("MRPC (acc; paper: MNLI)", "mrpc", "accuracy"), Column("NER fine-tune (F1)", "conll", "f1"),
              Column("NER feature-based (F1)", "conll", "f1", how="fb-concat-last-four"))


def _t8_row(rule: str, paper_rule: str, mnli: float, ner: float, ner_fb: float) -> Row:
    key = "t8-" + rule.replace("/", "-")
    variant = BERT if rule == "80/10/10" else Variant("mask-" + rule.replace("/", "-"), mask_rule=rule)
    figures = dict(zip((c.name for c in T8_COLUMNS), (mnli, ner, ner_fb)))
    return Row(key, f"{rule} (paper's MASK/SAME/RND {paper_rule})", variant, figures,
               against=None if rule == "80/10/10" else "t8-80-10-10")


TABLE8 = Table("t8", "Table 8: masking rules (MASK/RANDOM/KEEP of the chosen 15%)", T8_COLUMNS,
               tuple(_t8_row(*r) for r in _T8),
               note="Every rule is compared with 80/10/10. The feature-based column concatenates the last four "
                    "layers, as the paper's does. The paper's sentence-pair column is MNLI; ours is MRPC.")

TABLES = (TABLE5, TABLE5_TIME, TABLE6, TABLE7, TABLE8)
PAPER_TABLES = tuple(t.key for t in TABLES)  # what a run without --only takes, unless its scale says otherwise

CURVE_KEY = "t5-curve"
_STSB = "STS-B (Spearman)"
CURVE_COLUMNS = (Column("SST-2 (acc)", "sst2", "accuracy"), Column("SQuAD (F1)", "squad", "f1"),
                 Column(_NER, "conll", "f1"), Column(_STSB, "stsb", "spearman"))


@dataclass(frozen=True)
class CurveLine:
    """One objective of Table 5 along the compute axis: a line of each task's plot, a row per budget."""

    variant: Variant  # its equal-steps pretraining (Table 5's); the curve's are at the budget's FLOPs
    label: str
    paper: dict  # Table 5's figures: the paper's sign at every budget
    how: str = FINE_TUNE
    column_how: dict = field(default_factory=dict)


# An LTR model fine-tunes with the LTR heads (finetune/ltr.py: its last real token for classification and
# STS-B's regression, every position for SQuAD spans), tags NER with the ordinary token head.
CURVE_LINES = (
    CurveLine(BERT, "MLM + NSP", _T5_PAPER["bert"]),
    CurveLine(NO_NSP, "MLM", _T5_PAPER["no-nsp"]),
    CurveLine(LTR_V, "LTR", _T5_PAPER["ltr"], LTR, {_NER: FINE_TUNE}),
    CurveLine(ELECTRA_V, "ELECTRA (RTD)", {}),
)


def all_rows(tables: tuple[Table, ...] = TABLES) -> dict[str, Row]:
    return {row.key: row for table in tables for row in table.rows}


def cell_how(row: Row, column: Column) -> str:
    """How `row`'s entry in `column` is computed; NOT_RUN when it is left out."""
    return column.how or row.column_how.get(column.name, row.how)
