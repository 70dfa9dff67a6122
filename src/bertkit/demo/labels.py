"""Pretraining vs no pretraining: topic accuracy from a few labels, with frozen features.

The paper's central claim is that pretraining makes a task learnable from few labels. Every model
here (the demo's shape randomly initialised, the demo's pretrained model, all-MiniLM-L6-v2) is
used the same way: frozen, each article's first `max_len` tokens mean-pooled over the last layer,
and a logistic-regression probe (one linear layer, L-BFGS, sklearn's default L2 strength) trained
on 4, 16, 64 or every training article per topic, scored on the held-out articles. A frozen probe
rather than fine-tuning, because fine-tuning MiniLM does not fit the demo's budget on a CPU, and
the same probe for all three keeps the comparison fair. Each budget below "every article" is drawn
`draws` times (the same draws for every model) and the mean accuracy is reported.
"""

from __future__ import annotations

import numpy as np


def probe_accuracy(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray,
                   max_iter: int = 200) -> float:
    """Held-out accuracy (percent) of a multinomial logistic regression on standardised features.

    Loss: mean cross-entropy + ||W||^2 / (2n), sklearn's LogisticRegression(C=1) per example.
    """
    import torch

    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    x = torch.from_numpy((train_x - mean) / std).float()
    y = torch.from_numpy(np.asarray(train_y)).long()
    classes = int(max(y.max().item(), int(np.max(test_y))) + 1)
    layer = torch.nn.Linear(x.shape[1], classes)
    torch.nn.init.zeros_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    opt = torch.optim.LBFGS(layer.parameters(), lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(layer(x), y) + layer.weight.pow(2).sum() / (2 * len(y))
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        guess = layer(torch.from_numpy((test_x - mean) / std).float()).argmax(1).numpy()
    return float(100.0 * (guess == np.asarray(test_y)).mean())


def budget_draws(train_y: np.ndarray, budget: int | None, draws: int, seed: int) -> list[np.ndarray]:
    """Index sets with `budget` training articles of every class (`draws` of them, different
    seeds); one set of every article when budget is None or at least the smallest class."""
    classes = np.unique(train_y)
    smallest = min(int((train_y == c).sum()) for c in classes)
    if budget is None or budget >= smallest:
        return [np.arange(len(train_y))]
    rng = np.random.default_rng(seed)
    return [np.concatenate([rng.choice(np.flatnonzero(train_y == c), budget, replace=False) for c in classes])
            for _ in range(draws)]


def label_budget_table(features: dict, train_y, test_y, budgets, draws: int, seed: int) -> list[dict]:
    """One row per budget: for each model, the mean held-out accuracy over the draws (percent),
    with the lowest and highest draw. `features` maps a model name to (train_x, test_x)."""
    train_y, test_y = np.asarray(train_y), np.asarray(test_y)
    rows = []
    for budget in [*budgets, None]:
        sets = budget_draws(train_y, budget, draws, seed)
        row = {"per_topic": budget if budget is not None and len(sets) > 1 else "all",
               "labelled_articles": len(sets[0]), "draws": len(sets), "accuracy": {}}
        for name, (train_x, test_x) in features.items():
            accs = [probe_accuracy(train_x[s], train_y[s], test_x, test_y) for s in sets]
            row["accuracy"][name] = {"mean": round(float(np.mean(accs)), 2), "min": round(min(accs), 2),
                                     "max": round(max(accs), 2)}
        rows.append(row)
        if row["per_topic"] == "all":
            break
    return rows


def article_features(model, tokenizer, texts: list[str], max_len: int, precision: str = "fp32") -> np.ndarray:
    """(N, C): each article's first `max_len` tokens, mean-pooled over the last layer (`precision`
    "bf16": under bf16 autocast)."""
    from bertkit.embed import embed_texts

    return embed_texts(model, tokenizer, texts, pooling="mean", max_length=max_len, batch_size=32,
                       precision=precision)
