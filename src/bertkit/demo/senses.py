"""Static vs contextual word vectors: one word, two senses, four models.

For "court" (law vs tennis) and "bank" (money vs river), sentences written for this demo put the
word at a different token position in every sentence, so that a model which only encodes position
cannot look as if it separated meanings (the demo's first sentences had "court" at the same index in
both senses, and a random model gave those two occurrences cosine 0.9995). Each occurrence gets a vector from:
- Word2Vec (gensim), trained in seconds on the demo's training articles: one vector per word, the
  same in every sentence, so no separation by construction;
- a randomly initialised model of the demo's shape: the floor, what token identity and position
  alone give;
- the demo's pretrained model, and all-MiniLM-L6-v2 (loaded through bertkit): the last layer's
  vector of the word (the mean of its pieces when it splits).
`separation` turns an occurrence-by-occurrence cosine matrix into the numbers the demo reports.
"""

from __future__ import annotations

import re

import numpy as np

SENSES = {
    "court": {
        "law": [
            "Court papers show that the judge rejected the appeal against his conviction.",
            "The judge told the court that the trial would resume on Monday.",
            "After hearing the evidence of three witnesses, the court ruled that the contract was void.",
            "Lawyers for the former minister, who denies the fraud charges, told the court he would appeal.",
            "The businessman was found guilty of fraud on Friday and will be sentenced next month at the crown court.",
        ],
        "tennis": [
            "On the court, Nadal broke serve twice in the final set.",
            "The players walked slowly off the court after the second set.",
            "Federer hit a forehand deep into the corner of the court before the umpire called it out.",
            "She served an ace down the middle and then walked back to the baseline of the court.",
            "After losing the first set and arguing with the umpire about a line call, "
            "he smashed his racket on the court.",
        ],
    },
    "bank": {
        "money": [
            "Bank profits rose as lending, deposits and mortgage fees all grew.",
            "Last week the central bank raised interest rates by a quarter point.",
            "She took out a large mortgage from the bank to buy her first house.",
            "Customers queued to withdraw their savings as rumours spread about the bank.",
            "Shares fell sharply on Monday after the accounts showed large losses on bad loans at the bank.",
        ],
        "river": [
            "On the bank of the river, otters play among the reeds.",
            "Fishermen sat quietly on the muddy bank waiting for the tide to turn.",
            "The small boat drifted with the current towards the far bank of the stream.",
            "They walked along the river path at dusk and sat down on the grassy bank.",
            "Reeds and willow trees grew thickly where the water had flooded the low fields beside the old river bank.",
        ],
    },
}

_WORDS = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def occurrences(word: str) -> tuple[list[str], list[str]]:
    """(sentences, sense of each) for `word`, in SENSES order."""
    sentences, senses = [], []
    for sense, group in SENSES[word].items():
        sentences += group
        senses += [sense] * len(group)
    return sentences, senses


def separation(sim: np.ndarray, senses: list[str], k: int | None = None) -> dict:
    """Numbers from an (N, N) cosine matrix of N occurrences and the sense of each.

    within / across: mean cosine over pairs of distinct occurrences of the same sense / of two
    senses; separation = within - across. neighbours_same_sense: for each occurrence, the
    fraction of its k nearest other occurrences (default: the size of its sense minus one) that
    share its sense, averaged. Ties at the k-th place count fractionally (the expected value when
    a tie is broken at random), so identical vectors give the chance level, not an artefact of
    sort order.
    """
    labels = np.asarray(senses)
    n = len(labels)
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(n, dtype=bool)
    within, across = float(sim[same & off].mean()), float(sim[~same].mean())
    purity = []
    for i in range(n):
        others = np.flatnonzero(off[i])
        kk = k if k is not None else int(same[i, others].sum())
        s = sim[i, others]
        hit = same[i, others]
        cut = np.sort(s)[::-1][kk - 1]
        tol = 1e-6
        above, tied = s > cut + tol, np.abs(s - cut) <= tol
        need = kk - int(above.sum())
        purity.append((hit[above].sum() + need * hit[tied].mean()) / kk)
    return {"within": within, "across": across, "separation": within - across,
            "neighbours_same_sense": float(np.mean(purity))}


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    v = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return v @ v.T


def bert_vectors(model, tokenizer, word: str, sentences: list[str]) -> np.ndarray:
    """(N, C): the last layer's vector of `word` in each sentence (the mean of its pieces)."""
    import torch

    rows = []
    for s in sentences:
        enc = tokenizer.encode(s)
        start = s.lower().index(word)
        pieces = [i for i, (a, b) in enumerate(enc.offsets) if b > a >= start and b <= start + len(word)]
        with torch.no_grad():
            hidden = model(torch.tensor([enc.ids])).last_hidden_state[0]  # (T, C)
        rows.append(hidden[pieces].float().mean(0).numpy())
    return np.stack(rows)


def words_of(text: str) -> list[str]:
    return _WORDS.findall(text.lower())


def train_word2vec(texts: list[str], threads: int, seed: int):
    """A skip-gram Word2Vec (100 dimensions, window 5) on the training articles, one sentence per line."""
    from gensim.models import Word2Vec

    sentences = [words_of(line) for t in texts for line in t.splitlines() if line.strip()]
    return Word2Vec(sentences, vector_size=100, window=5, min_count=2, sg=1, epochs=5, workers=threads, seed=seed)


def word2vec_sense_vectors(w2v) -> tuple[dict, dict]:
    """({word: (N, 100) or None}, {word: nearest words}): the word's one vector once per occurrence
    (a static embedding ignores context), None when the training articles had too few occurrences
    of the word to give it a vector; and the words nearest that one vector."""
    vectors, nearest = {}, {}
    for word in SENSES:
        sentences, _ = occurrences(word)
        if word not in w2v.wv:
            vectors[word], nearest[word] = None, []
            continue
        vectors[word] = np.stack([w2v.wv[word] for _ in sentences])
        # the one static vector sits among the words of the sense the training articles use most
        nearest[word] = [w for w, _ in w2v.wv.most_similar(word, topn=6)]
    return vectors, nearest


def word_vectors(model, tokenizer) -> dict:
    """{word: (N, C)}: a BERT's last-layer vector of each occurrence of each word in SENSES."""
    return {word: bert_vectors(model, tokenizer, word, occurrences(word)[0]) for word in SENSES}


def snippet(sentence: str, word: str, around: int = 2) -> str:
    """A few words either side of `word`: a label short enough to read on a heat map axis."""
    words = sentence.rstrip(".").split()
    at = next(i for i, w in enumerate(words) if w.lower().strip(",.") == word)
    lo, hi = max(0, at - around), min(len(words), at + around + 1)
    return ("..." if lo else "") + " ".join(words[lo:hi]) + ("..." if hi < len(words) else "")


def compare_senses(vectors: dict, nearest: dict | None = None) -> dict:
    """For each word: every model's cosine matrix and `separation` numbers.

    `vectors` maps a model name to {word: (occurrences, C) vectors} (`word_vectors`,
    `word2vec_sense_vectors`), in the order the models are reported; `nearest` is Word2Vec's
    nearest words of each word.
    """
    out = {}
    for word in SENSES:
        sentences, senses = occurrences(word)
        models = {name: cosine_matrix(v[word]) for name, v in vectors.items() if v.get(word) is not None}
        out[word] = {
            "senses": senses,
            "labels": [f"{i + 1} {sense}: {snippet(s, word)}" for i, (s, sense) in enumerate(zip(sentences, senses))],
            "sentences": sentences,
            "models": {name: {**separation(sim, senses), "cosine": sim.round(4).tolist()}
                       for name, sim in models.items()},
            "word2vec_nearest": (nearest or {}).get(word, []),
        }
    return out
