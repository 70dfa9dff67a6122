"""NER by fine-tuning (paper §5.3): each word's first sub-token -> linear over the tags.

Only first pieces carry labels (the others, [CLS] and [SEP] get IGNORE_INDEX); a word's tag is
read back from its first piece (`bertkit.data.ner`), and scored as conlleval does. A sentence (or
a whole document) longer than `max_seq_len` is cut, or with the windows policy read in
overlapping windows, each token tagged from the window where it has the most context
(`bertkit.long_inputs`), so an entity across a window's edge comes out whole.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.errors import UserError
from bertkit.finetune.task import HeadTask, Prepared, Runtime, infer
from bertkit.heads import BertForTokenClassification
from bertkit.long_inputs import Policy


class TokenTask(HeadTask):
    """CoNLL-style NER: a label for each word's first sub-token."""

    head = BertForTokenClassification
    prediction_suffix = ".conll"
    main_metric = "f1"
    name = "ner"
    weighting = None  # --class-weights as given: "balanced", a JSON file, or the saved {label: weight}

    def __init__(self, labels: list[str] | None, tokenizer, max_seq_len: int, policy: Policy | None = None):
        self.tokenizer, self.max_seq_len, self.policy = tokenizer, max_seq_len, policy or Policy()
        self._set_labels(list(labels or ()))

    @classmethod
    def from_settings(cls, tokenizer, settings: dict, model_dir: Path | None = None, rt=None) -> TokenTask:
        """The tags given (a fine-tuned model's), else the training set's (`fit_labels`)."""
        task = cls(settings.get("labels"), tokenizer, settings.get("max_seq_len") or 128,
                   Policy.from_settings(settings))
        task.classifier_dropout = settings.get("classifier_dropout")
        task.weighting = settings.get("class_weights")
        return task

    def _set_labels(self, labels: list[str]) -> None:
        self.labels = labels
        self.label2id = {name: i for i, name in enumerate(labels)}

    def fit_labels(self, sentences) -> None:
        from collections import Counter

        from bertkit.data.ner import tag_list
        from bertkit.finetune.task import class_weights

        if not self.labels:
            self._set_labels(tag_list(sentences))
        # --class-weights: "balanced" counts the tags of the words (each word's first piece is labelled)
        self.class_weights = class_weights(self.weighting, self.labels, Counter(t for s in sentences for t in s.tags))

    def settings(self) -> dict:
        policy = {k: v for k, v in self.policy.settings().items() if k != "aggregate"}  # tags are per token
        return {"task": self.name, "max_seq_len": self.max_seq_len, "labels": self.labels, **policy,
                **self.class_weight_settings()}

    def read(self, path):
        from bertkit.data.ner import read_conll

        return read_conll(path)

    def prepare(self, sentences, train: bool = False) -> Prepared:
        """A feature per row (a sentence, or a window of one); `decoding` maps rows back to words."""
        from bertkit.data.ner import Sentence, encode_windows

        if not sentences:
            raise UserError("no sentences to encode")
        if not train:
            # Gold tags may include ones training never saw; prediction needs only the words.
            sentences_to_encode = [Sentence(s.tokens, [self.labels[0]] * len(s.tokens)) for s in sentences]
        else:
            sentences_to_encode = sentences
        windowed = encode_windows(self.tokenizer, sentences_to_encode, self.label2id, self.max_seq_len, self.policy)
        report = windowed.plan.report(self.policy.name)
        return Prepared(sentences, windowed.features, windowed.plan.lengths.tolist(), decoding=windowed,
                        cut=0 if self.policy.windows else report.long, long_inputs=report)

    def predict(self, model, data: Prepared, rt: Runtime) -> list[list[str]]:
        from bertkit.data.ner import window_word_predictions

        rows: list = [None] * len(data.features)
        for indices, o in infer(model, self.collate, data, rt):
            for i, row in zip(indices, o.logits.argmax(-1).cpu().numpy()):  # (B, T) label ids
                rows[i] = row
        return window_word_predictions(data.decoding, rows, [len(s.tokens) for s in data.examples],
                                       dict(enumerate(self.labels)))

    def score(self, data: Prepared, predictions: list[list[str]]) -> dict:
        from bertkit.eval.conlleval import evaluate

        return evaluate([s.tags for s in data.examples], predictions)

    def write_predictions(self, path: Path, data: Prepared, predictions: list[list[str]]) -> None:
        write_conll(path, data.examples, predictions)


def write_conll(path: Path, sentences, predictions: list[list[str]]) -> None:
    """`token gold predicted` per line, a blank line between sentences (conlleval's input)."""
    from bertkit.io import write_text

    blocks = ["".join(f"{t} {g} {p}\n" for t, g, p in zip(s.tokens, s.tags, tags))
              for s, tags in zip(sentences, predictions)]
    write_text(path, "\n".join(blocks))
