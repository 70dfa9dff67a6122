"""SQuAD v1.1 (paper §4.2): start and end logits over the tokens of windows of the context.

Windows come from `bertkit.data.squad` (384 tokens, stride 128, questions cut to 64), unpadded
until a batch is collated; the best span is decoded back to answer text by `bertkit.eval.squad`.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.errors import UserError
from bertkit.finetune.task import HeadTask, Prepared, Runtime, infer
from bertkit.heads import BertForQuestionAnswering


class QATask(HeadTask):
    """Extractive question answering: the best start/end span of any window."""

    head = BertForQuestionAnswering
    targets = ("start_positions", "end_positions")
    prediction_suffix = ".json"
    main_metric = "f1"
    name = "squad"

    def __init__(self, tokenizer, max_seq_len: int = 384, doc_stride: int = 128, max_query_len: int = 64):
        self.tokenizer, self.max_seq_len = tokenizer, max_seq_len
        self.doc_stride, self.max_query_len = doc_stride, max_query_len

    @classmethod
    def from_settings(cls, tokenizer, settings: dict, model_dir: Path | None = None, rt=None) -> QATask:
        task = cls(tokenizer, settings.get("max_seq_len") or 384)
        task.classifier_dropout = settings.get("classifier_dropout")
        return task

    def fit_labels(self, examples) -> None:
        """Span prediction has no label set."""

    def settings(self) -> dict:
        return {"task": self.name, "max_seq_len": self.max_seq_len}

    def read(self, path):
        from bertkit.data.squad import read_squad

        return read_squad(path)

    def prepare(self, examples, train: bool = False) -> Prepared:
        from bertkit.data.squad import make_features

        if not examples:
            raise UserError("no questions to encode")
        windows = make_features(examples, self.tokenizer, max_seq_len=self.max_seq_len,
                                doc_stride=min(self.doc_stride, self.max_seq_len // 2),
                                max_query_len=self.max_query_len)
        features = [{"input_ids": ids, "token_type_ids": types}
                    for ids, types in zip(windows.input_ids, windows.token_type_ids)]
        if train:
            for f, s, e in zip(features, windows.start_positions.tolist(), windows.end_positions.tolist()):
                f["start_positions"], f["end_positions"] = s, e
        return Prepared(examples, features, windows.lengths, decoding=windows)

    def predict(self, model, data: Prepared, rt: Runtime) -> dict[str, str]:
        from bertkit.eval.squad import decode_answers

        starts: list = [None] * len(data.features)
        ends: list = [None] * len(data.features)
        for indices, o in infer(model, self.collate, data, rt):
            s, e = o.start_logits.float().cpu().numpy(), o.end_logits.float().cpu().numpy()  # (B, T)
            for i, srow, erow in zip(indices, s, e):
                starts[i], ends[i] = srow[: data.lengths[i]], erow[: data.lengths[i]]
        return decode_answers(data.examples, data.decoding, starts, ends, n_best=20, max_answer_len=30)

    def score(self, data: Prepared, predictions: dict[str, str]) -> dict:
        from bertkit.eval.squad import evaluate

        return evaluate(data.examples, predictions)

    def write_predictions(self, path: Path, data: Prepared, predictions: dict[str, str]) -> None:
        from bertkit.io import write_json

        write_json(path, predictions)
