"""GLUE metrics in numpy: accuracy, F1, Matthews correlation, Pearson and Spearman correlation.

Definitions follow scikit-learn and scipy (the libraries GLUE's own scoring used) without
depending on them: Matthews is the multi-class R_K statistic (the binary phi coefficient for two
labels), Spearman is Pearson on average ranks (tied values share the mean of their ranks).
A correlation with a constant input is undefined; it is reported as 0.0, the value a
constant predictor deserves, so model selection never sees NaN.

The functions return fractions; `task_metrics` reports them x100, as the GLUE leaderboard and
the BERT paper do.
"""

from __future__ import annotations

import numpy as np


def _pair(preds, labels) -> tuple[np.ndarray, np.ndarray]:
    p, y = np.asarray(preds), np.asarray(labels)
    if p.shape != y.shape:
        raise ValueError(f"predictions {p.shape} and labels {y.shape} differ in shape")
    if p.size == 0:
        raise ValueError("no predictions to score")
    return p, y


def accuracy(preds, labels) -> float:
    p, y = _pair(preds, labels)
    return float(np.mean(p == y))


def f1_binary(preds, labels, positive=1) -> float:
    """F1 of the positive class: 2 TP / (2 TP + FP + FN); 0 when there are no positives at all."""
    p, y = _pair(preds, labels)
    tp = np.sum((p == positive) & (y == positive))
    fp = np.sum((p == positive) & (y != positive))
    fn = np.sum((p != positive) & (y == positive))
    denominator = 2 * tp + fp + fn
    return float(2 * tp / denominator) if denominator else 0.0


def macro_f1(preds, labels) -> float:
    """Unweighted mean of per-class F1 over the classes present in the labels or predictions."""
    p, y = _pair(preds, labels)
    classes = np.unique(np.concatenate([p, y]))
    return float(np.mean([f1_binary(p, y, positive=c) for c in classes]))


def matthews(preds, labels) -> float:
    """Matthews correlation coefficient from the confusion matrix (Gorodkin's R_K)."""
    p, y = _pair(preds, labels)
    classes, inverse = np.unique(np.concatenate([y, p]), return_inverse=True)
    k = len(classes)
    confusion = np.zeros((k, k), dtype=np.float64)
    np.add.at(confusion, (inverse[: len(y)], inverse[len(y):]), 1)
    true_counts, pred_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    n, correct = confusion.sum(), np.trace(confusion)
    numerator = correct * n - pred_counts @ true_counts
    denominator = np.sqrt((n * n - pred_counts @ pred_counts) * (n * n - true_counts @ true_counts))
    return float(numerator / denominator) if denominator else 0.0


def pearson(x, y) -> float:
    a, b = _pair(x, y)
    a = a.astype(np.float64) - np.mean(a)
    b = b.astype(np.float64) - np.mean(b)
    denominator = np.sqrt(np.sum(a * a) * np.sum(b * b))
    return float(np.sum(a * b) / denominator) if denominator else 0.0


def average_ranks(values) -> np.ndarray:
    """1-based ranks; tied values all get the mean of the ranks they occupy."""
    v = np.asarray(values, dtype=np.float64)
    order = np.argsort(v, kind="mergesort")
    sorted_v = v[order]
    # Start index of each run of equal values, and the run each sorted position belongs to.
    starts = np.flatnonzero(np.r_[True, sorted_v[1:] != sorted_v[:-1]])
    run_of = np.cumsum(np.r_[True, sorted_v[1:] != sorted_v[:-1]]) - 1
    ends = np.r_[starts[1:], len(v)]
    mean_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty_like(v)
    ranks[order] = mean_rank[run_of]
    return ranks


def spearman(x, y) -> float:
    a, b = _pair(x, y)
    return pearson(average_ranks(a), average_ranks(b))


def task_metrics(spec, preds, labels) -> dict[str, float]:
    """Every metric of a task (a bertkit.data.glue.TaskSpec), as percentages.

    Classification: `preds` and `labels` are label values (as in spec.labels; compared as
    strings). Regression: numbers.
    """
    if spec.kind == "regression":
        p = np.asarray(preds, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64)
    else:
        p = np.asarray([str(v) for v in preds])
        y = np.asarray([str(v) for v in labels])
    positive = spec.labels[-1] if spec.labels else "1"  # "1" for MRPC and QQP
    functions = {
        "accuracy": lambda: accuracy(p, y),
        "f1": lambda: f1_binary(p, y, positive=positive),
        "macro_f1": lambda: macro_f1(p, y),
        "mcc": lambda: matthews(p, y),
        "pearson": lambda: pearson(p, y),
        "spearman": lambda: spearman(p, y),
    }
    unknown = [m for m in spec.metrics if m not in functions]
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r} for task {spec.name}")
    return {name: 100.0 * functions[name]() for name in spec.metrics}


def best_threshold(probs, gold) -> float:
    """The decision threshold on `probs` (N, L) that maximises micro-F1 against the 0/1 `gold`
    (N, L), a label being predicted when its probability is at least the threshold. Every
    distinct probability is a candidate; the one returned lies halfway between the chosen value
    and the next lower one, so the same predictions recomputed with float noise decide alike.
    The highest such threshold wins a tie (fewer labels predicted)."""
    p = np.asarray(probs, dtype=np.float64).ravel()
    y = np.asarray(gold, dtype=bool).ravel()
    if p.size == 0:
        raise ValueError("no predictions to tune a threshold on")
    order = np.argsort(-p, kind="stable")
    values, hits = p[order], y[order].astype(np.int64)
    last = np.r_[values[1:] != values[:-1], True]  # the last position of each run of equal values
    tp = np.cumsum(hits)[last]  # true positives when every value >= this one is predicted
    predicted = np.flatnonzero(last) + 1
    f1 = 2 * tp / (predicted + y.sum())
    k = int(np.argmax(f1))  # the first maximum: the highest threshold
    chosen, distinct = values[last][k], values[last]
    lower = distinct[k + 1] if k + 1 < len(distinct) else chosen / 2
    return float((chosen + lower) / 2)


def multilabel_metrics(predicted, gold, labels: list[str]) -> dict:
    """Micro-F1, macro-F1 (the unweighted mean of per-label F1; a label with no gold and no
    predicted positives counts 0, as scikit-learn's zero_division default), subset accuracy
    (every label of a row right) and per-label F1, x100, of 0/1 arrays (N, L)."""
    p = np.asarray(predicted, dtype=bool)
    y = np.asarray(gold, dtype=bool)
    if p.shape != y.shape or p.ndim != 2:
        raise ValueError(f"predictions {p.shape} and labels {y.shape} must be the same (N, L) shape")
    tp, fp, fn = (p & y).sum(0), (p & ~y).sum(0), (~p & y).sum(0)  # (L,) each

    def f1(t, f, n):
        return np.divide(2 * t, 2 * t + f + n, out=np.zeros(np.shape(t), dtype=np.float64), where=(2 * t + f + n) > 0)

    per_label = f1(tp, fp, fn)
    return {"micro_f1": 100.0 * float(f1(tp.sum(), fp.sum(), fn.sum())),
            "macro_f1": 100.0 * float(per_label.mean()),
            "subset_accuracy": 100.0 * float((p == y).all(1).mean()),
            "per_label_f1": {name: 100.0 * float(v) for name, v in zip(labels, per_label)}}
