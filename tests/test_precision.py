"""`--precision auto|fp32|bf16` on the inference commands (embed, evaluate, index, serve): what
"auto" resolves to, what it refuses, and that bf16 autocast gives the fp32 vectors closely
(tiny model; all-MiniLM-L6-v2's STS-B numbers are in bench/README.md)."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import torch

from bertkit import devices
from bertkit.devices import inference_precision, resolve_precision
from bertkit.errors import UserError
from serve_helpers import post_json, serving

TEXTS = ["the movie was good .", "a film", "john was in paris river ."]


def test_auto_is_bf16_only_where_the_hardware_computes_it(monkeypatch):
    cpu = torch.device("cpu")
    for native, expected in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(devices, "cpu_has_bf16", lambda native=native: native)
        assert resolve_precision("auto", cpu) == expected
        assert inference_precision("auto", cpu) == expected
        assert inference_precision("auto", cpu, int8=True) == "fp32"  # int8 and ONNX run their own kernels
        assert inference_precision("auto", cpu, backend="onnx") == "fp32"
    assert resolve_precision("fp32", cpu) == "fp32" and resolve_precision("bf16", cpu) == "bf16"
    with pytest.raises(UserError, match="not with int8"):
        inference_precision("bf16", cpu, int8=True)


def _cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_embed_and_index_in_bf16_stay_close_to_fp32(tiny_dir, tmp_path, capsys):
    from bertkit.cli import main

    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = {}
    for precision in ("fp32", "bf16"):
        out[precision] = tmp_path / f"{precision}.npy"
        assert main(["embed", "--model", str(tiny_dir), "--input", str(tmp_path / "in.txt"), "--pooling", "mean",
                     "--out", str(out[precision]), "--device", "cpu", "--precision", precision]) == 0
        assert f"({precision})" in capsys.readouterr().out
    assert _cosines(np.load(out["bf16"]), np.load(out["fp32"])).min() > 0.999
    assert main(["index", "--model", str(tiny_dir), "--input", str(tmp_path / "in.txt"), "--out",
                 str(tmp_path / "idx"), "--no-progress", "--device", "cpu", "--precision", "bf16"]) == 0
    assert json.loads((tmp_path / "idx" / "meta.json").read_text())["precision"] == "bf16"


def test_serve_in_bf16_answers_every_route_close_to_fp32(tiny_dir):
    from bertkit.serve.app import Service
    from bertkit.serve.models import describe

    vectors = {}
    for precision in ("fp32", "bf16"):
        service = Service([describe("mlm", tiny_dir, precision=precision)], log=lambda line: None)
        with serving(service) as base:
            vectors[precision] = post_json(base, "/embed", {"inputs": TEXTS}).json()
            guesses = post_json(base, "/fill-mask", {"inputs": "a [MASK] film"})
            assert guesses.status_code == 200 and len(guesses.json()[0]) == 5
            hidden = post_json(base, "/embed_all", {"inputs": TEXTS[0]}).json()
            assert np.asarray(hidden).dtype == np.float64  # bf16 inside, float32 numbers out
            assert httpx.get(base + "/info").json()["models"][0]["precision"] == precision
    assert _cosines(vectors["bf16"], vectors["fp32"]).min() > 0.999
