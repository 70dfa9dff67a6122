"""NER by fine-tuning (paper §5.3): each word's first sub-token -> linear over the tags.

Only first pieces carry labels (the others, [CLS] and [SEP] get IGNORE_INDEX); a word's tag is
read back from its first piece (`bertkit.data.ner`), and scored as conlleval does.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.errors import UserError
from bertkit.finetune.task import HeadTask, Prepared, Runtime, infer
from bertkit.heads import BertForTokenClassification


class TokenTask(HeadTask):
    """CoNLL-style NER: a label for each word's first sub-token."""

    head = BertForTokenClassification
    prediction_suffix = ".conll"
    main_metric = "f1"
    name = "ner"

    def __init__(self, labels: list[str] | None, tokenizer, max_seq_len: int):
        self.tokenizer, self.max_seq_len = tokenizer, max_seq_len
        self._set_labels(list(labels or ()))

    @classmethod
    def from_settings(cls, tokenizer, settings: dict, model_dir: Path | None = None, rt=None) -> TokenTask:
        """The tags given (a fine-tuned model's), else the training set's (`fit_labels`)."""
        task = cls(settings.get("labels"), tokenizer, settings.get("max_seq_len") or 128)
        task.classifier_dropout = settings.get("classifier_dropout")
        return task

    def _set_labels(self, labels: list[str]) -> None:
        self.labels = labels
        self.label2id = {name: i for i, name in enumerate(labels)}

    def fit_labels(self, sentences) -> None:
        from bertkit.data.ner import tag_list

        if not self.labels:
            self._set_labels(tag_list(sentences))

    def settings(self) -> dict:
        return {"task": self.name, "max_seq_len": self.max_seq_len, "labels": self.labels}

    def read(self, path):
        from bertkit.data.ner import read_conll

        return read_conll(path)

    def prepare(self, sentences, train: bool = False) -> Prepared:
        """Features of input ids and first-piece labels; `decoding` holds each one's word ids."""
        from bertkit.data.ner import Sentence, encode_sentences

        if not sentences:
            raise UserError("no sentences to encode")
        if not train:
            # Gold tags may include ones training never saw; prediction needs only the words.
            sentences_to_encode = [Sentence(s.tokens, [self.labels[0]] * len(s.tokens)) for s in sentences]
        else:
            sentences_to_encode = sentences
        encoded = encode_sentences(self.tokenizer, sentences_to_encode, self.label2id, self.max_seq_len)
        features = [{k: f[k] for k in ("input_ids", "token_type_ids", "attention_mask", "labels")} for f in encoded]
        return Prepared(sentences, features, [len(f["input_ids"]) for f in features],
                        decoding=[f["word_ids"] for f in encoded], cut=sum(f["truncated"] for f in encoded))

    def predict(self, model, data: Prepared, rt: Runtime) -> list[list[str]]:
        from bertkit.data.ner import word_predictions

        id2label = dict(enumerate(self.labels))
        out: list = [None] * len(data.features)
        for indices, o in infer(model, self.collate, data, rt):
            for i, row in zip(indices, o.logits.argmax(-1).tolist()):  # (B, T) label ids
                out[i] = word_predictions(data.decoding[i], row, len(data.examples[i].tokens), id2label)
        return out

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
