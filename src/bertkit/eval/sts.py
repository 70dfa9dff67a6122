"""Zero-shot semantic similarity: how well untrained sentence vectors rank sentence pairs.

Each pair's cosine similarity of pooled embeddings ([CLS], or the mean or max over the tokens)
is correlated with the gold similarity scores (Pearson / Spearman x100, as GLUE reports STS-B).
No training: this measures what the pretrained (or contrastively trained) encoder already knows.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.errors import UserError


def read_scored_pairs(task: str, path, text_columns: list[str] | None = None, label_column: str | None = None):
    """(examples, spec) of sentence pairs with gold scores: STS-B, or your own regress table."""
    from bertkit.data.glue import custom_spec, glue_task, read_glue, read_table

    if task == "stsb":
        examples, spec = read_glue("stsb", path), glue_task("stsb")
    elif task == "regress" and text_columns and len(text_columns) == 2 and label_column:
        examples = read_table(path, text_columns, label_column, "regression")
        spec = custom_spec("regress", "regression")
    else:
        raise UserError("zero-shot similarity scores sentence pairs: use --task stsb, or regress with two "
                        "--text-columns and a --label-column")
    if any(e.text_b is None for e in examples) or any(e.label is None for e in examples):
        raise UserError("zero-shot similarity needs sentence pairs with gold scores", path)
    return examples, spec


def zero_shot_similarity(model_dir: str | Path, examples, spec, pooling: str = "mean", batch_size: int = 64,
                         max_length: int = 128, device="cpu", report: dict | None = None, backend: str = "torch",
                         int8: bool = False, precision: str = "fp32", policy=None) -> dict:
    """Pearson and Spearman (x100) of the pairs' embedding cosines against their gold scores;
    `report`, when given, gets how many texts were cut to the token limit (as `embed_texts`).
    `backend` "onnx" runs a `bertkit export` folder; `int8` its int8 graph, or torch's int8 layers;
    `precision` "bf16" the encoder under bf16 autocast; `policy` a `long_inputs.Policy` for long texts."""
    import numpy as np

    from bertkit.embed import embed_texts
    from bertkit.eval.metrics import task_metrics
    from bertkit.export.backend import load_encoder_for
    from bertkit.long_inputs import LongReport, merge_reports

    model, tokenizer = load_encoder_for(Path(model_dir), backend, int8)
    kw = dict(pooling=pooling, normalize=True, batch_size=batch_size, max_length=max_length, device=device,
              precision=precision, policy=policy)
    first, second = {}, {}
    a = np.asarray(embed_texts(model, tokenizer, [e.text_a for e in examples], report=first, **kw), dtype=np.float64)
    b = np.asarray(embed_texts(model, tokenizer, [e.text_b for e in examples], report=second, **kw), dtype=np.float64)
    if report is not None:
        both = merge_reports([LongReport.from_dict(first), LongReport.from_dict(second)], first["policy"],
                             first["limit"])
        report.update(both.as_dict(), cut=first["cut"] + second["cut"], max_length=first["max_length"])
    cosine = (a * b).sum(axis=1)  # unit vectors
    return task_metrics(spec, cosine.tolist(), [float(e.label) for e in examples])
