"""The sentence-transformers layout (`bertkit.st`), and `bertkit embed` taking its pooling from it.

A directory trained by `finetune --task embedding` declares its pooling (1_Pooling/config.json) and
its normalisation (a Normalize module); `embed` without --pooling uses both, as `serve` does, and
gives exactly what the same flags written out give.
"""

from __future__ import annotations

import shutil

import numpy as np

from bertkit.cli import main
from bertkit.st import declared_pooling, model_normalizes, model_pooling, write_sentence_transformers_files


def test_a_written_layout_reads_back(tiny_dir, tmp_path):
    assert declared_pooling(tiny_dir) is None and model_pooling(tiny_dir) == ("mean", 256)
    assert not model_normalizes(tiny_dir)
    st = tmp_path / "st"
    shutil.copytree(tiny_dir, st)
    write_sentence_transformers_files(st, "max", 64, width=32, normalize=True)
    assert declared_pooling(st) == "max" and model_pooling(st) == ("max", 64) and model_normalizes(st)


def _embed(model, source, out, *flags) -> np.ndarray:
    assert main(["embed", "--model", str(model), "--input", str(source), "--out", str(out), "--precision", "fp32",
                 *flags]) == 0
    return np.load(out)


def test_embed_defaults_to_the_directorys_pooling_and_normalisation(tiny_dir, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("the movie was good .\na film\njohn was in paris river .\n", encoding="utf-8")
    for pooling, normalize in (("max", True), ("cls", False)):
        st = tmp_path / f"st-{pooling}"
        shutil.copytree(tiny_dir, st)
        write_sentence_transformers_files(st, pooling, 64, width=32, normalize=normalize)
        default = _embed(st, source, tmp_path / f"{pooling}-default.npy")
        spelled = _embed(st, source, tmp_path / f"{pooling}-flags.npy", "--pooling", pooling,
                         *(["--normalize"] if normalize else []))
        assert np.array_equal(default, spelled), pooling
        norms = np.linalg.norm(default, axis=1)
        assert np.allclose(norms, 1.0, atol=1e-6) == normalize, norms
    # --pooling given: the flags alone decide, as before (no normalisation without --normalize)
    plain = _embed(tmp_path / "st-max", source, tmp_path / "max-plain.npy", "--pooling", "max")
    assert not np.allclose(np.linalg.norm(plain, axis=1), 1.0)


def test_embed_without_pooling_on_a_plain_directory_names_the_flag(tiny_dir, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("a film\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["embed", "--model", str(tiny_dir), "--input", str(source), "--out", str(tmp_path / "v.npy")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--pooling is required: the model directory declares none" in err[0], err
    assert not (tmp_path / "v.npy").exists()
