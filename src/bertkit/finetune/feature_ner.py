"""Feature-based NER (paper §5.3): a small tagger on frozen BERT features, no fine-tuning.

The paper feeds the concatenation of the last four hidden layers at each word's first
WordPiece (Table 7 also tries single layers and sums of layers: `combine`) into a randomly
initialised two-layer BiLSTM (768 units per direction for BERT-base) before the classification
layer, and reaches 96.1 dev F1 against 96.4 for fine-tuning. Here the encoder runs once over
every sentence; the word features are kept (in bf16 to halve the memory) and only the tagger
(`bertkit.heads.BiLSTMTagger`) trains. Its LSTM width follows the encoder's hidden size, as the
paper's 768 did for BERT-base.

Saved model folder: the frozen encoder as an HF `BertModel` (config.json, model.safetensors,
vocabulary), plus `tagger.safetensors` and `tagger.json` (labels, layers, sizes).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from bertkit.config import IGNORE_INDEX
from bertkit.errors import UserError
from bertkit.finetune.ner import TokenTask
from bertkit.finetune.task import Batch, Prepared, Runtime, infer
from bertkit.heads import BiLSTMTagger
from bertkit.model import BertModel

TAGGER_WEIGHTS = "tagger.safetensors"
TAGGER_CONFIG = "tagger.json"


DEFAULT_LAYERS = (-4, -3, -2, -1)  # the paper's best: the last four layers, concatenated


class FeatureTaggerTask(TokenTask):
    """NER with the encoder frozen: word features computed once, then a BiLSTM tagger trained."""

    head = None  # its model is a `BiLSTMTagger` on the features, not a BertFor... head

    def __init__(self, labels: list[str] | None, tokenizer, max_seq_len: int, encoder_dir: Path,
                 rt: Runtime, layers: tuple[int, ...] = DEFAULT_LAYERS, combine: str = "concat"):
        from bertkit.embed import COMBINES

        super().__init__(labels, tokenizer, max_seq_len)
        if combine not in COMBINES:
            raise UserError(f"combine must be one of {', '.join(COMBINES)}, not {combine!r}")
        self.layers, self.rt, self.combine = tuple(layers), rt, combine
        self.encoder = BertModel.from_pretrained(encoder_dir).to(rt.device).eval()
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        C = self.encoder.config.hidden_size
        self.in_dim, self.hidden = C * len(self.layers) if combine == "concat" else C, C

    @classmethod
    def from_settings(cls, tokenizer, settings: dict, model_dir: Path | None = None,
                      rt: Runtime | None = None) -> FeatureTaggerTask:
        """The encoder in `model_dir` (run on `rt` while preparing) with `layers` combined by `combine`."""
        if settings.get("long_inputs") == "windows":
            raise UserError("the feature-based tagger reads sentences cut to --max-seq-len: --long-inputs windows "
                            "applies to a fine-tuned tagger")
        return cls(settings.get("labels"), tokenizer, settings.get("max_seq_len") or 128, model_dir, rt,
                   tuple(settings.get("layers") or DEFAULT_LAYERS), settings.get("combine") or "concat")

    @classmethod
    def model_settings(cls, model_dir: Path, config) -> dict:
        """A trained tagger's labels, layers and combination, from its tagger.json."""
        tagger = read_tagger_config(model_dir)
        return {"labels": tagger["labels"], "layers": tuple(tagger["layers"]),
                "combine": tagger.get("combine", "concat")}

    def settings(self) -> dict:
        return {**super().settings(), "feature_based": True, "layers": list(self.layers),
                "combine": self.combine}

    def prepare(self, sentences, train: bool = False) -> Prepared:
        """One feature row per word that has a first piece (not cut off, not empty)."""
        tokens = super().prepare(sentences, train)
        vectors = self._word_features(tokens)
        rows = [tokens.decoding.row_words(i) for i in range(len(tokens.features))]  # one row per sentence
        words = [sorted({w for w in ids if w is not None}) for ids in rows]
        features = []
        for s, x, kept in zip(sentences, vectors, words):
            f = {"features": x}
            if train:
                f["labels"] = [self.label2id[s.tags[w]] for w in kept]
            features.append(f)
        return Prepared(sentences, features, [len(w) for w in words], decoding=words)

    @torch.no_grad()
    def _word_features(self, tokens: Prepared) -> list[Tensor]:
        """(words kept, in_dim) bf16 features on the CPU for each sentence: each word's first piece."""
        from bertkit.embed import select_layers

        out: list[Tensor] = [None] * len(tokens.features)
        # The token features' collate (HeadTask's), not this class's one of word features.
        for indices, enc in infer(self.encoder, super().collate, tokens, self.rt,
                                  output_hidden_states=True):
            h = select_layers(enc.hidden_states, self.layers, self.combine)  # (B, T, in_dim)
            for row, i in zip(h, indices):
                ids = tokens.decoding.row_words(i)
                first = [t for t, w in enumerate(ids) if w is not None and (t == 0 or ids[t - 1] != w)]
                out[i] = row[first].to("cpu", torch.bfloat16)
        return out

    def collate(self, features: list[dict]) -> Batch:
        W = max(max(len(f["features"]) for f in features), 1)
        x = torch.zeros(len(features), W, self.in_dim)
        labels = torch.full((len(features), W), IGNORE_INDEX, dtype=torch.long)
        for b, f in enumerate(features):
            n = len(f["features"])
            x[b, :n] = f["features"].float()
            if "labels" in f:
                labels[b, :n] = torch.tensor(f["labels"], dtype=torch.long)
        inputs = {"features": x, "lengths": torch.tensor([len(f["features"]) for f in features])}
        return Batch(inputs, {"labels": labels} if "labels" in features[0] else {})

    def predict(self, model, data: Prepared, rt: Runtime) -> list[list[str]]:
        out: list = [None] * len(data.features)
        for indices, o in infer(model, self.collate, data, rt):
            for i, row in zip(indices, o.logits.argmax(-1).tolist()):  # (B, W) tag ids
                tags = ["O"] * len(data.examples[i].tokens)
                for w, label in zip(data.decoding[i], row):
                    tags[w] = self.labels[label]
                out[i] = tags
        return out

    def new_model(self, model_dir: Path) -> nn.Module:
        return BiLSTMTagger(self.in_dim, self.hidden, len(self.labels))

    def save_model(self, model: nn.Module, out: Path, tokenizer) -> None:
        from safetensors.torch import save_file

        from bertkit.io import atomic_path, write_json

        self.encoder.to("cpu").save_pretrained(out, tokenizer=tokenizer)
        self.encoder.to(self.rt.device)
        with atomic_path(out / TAGGER_WEIGHTS) as tmp:
            save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp))
        write_json(out / TAGGER_CONFIG, {"labels": self.labels, "layers": list(self.layers),
                                         "combine": self.combine, "in_dim": self.in_dim, "hidden": self.hidden,
                                         "num_layers": 2})

    def load_model(self, model_dir: Path) -> nn.Module:
        from safetensors.torch import load_file

        meta = read_tagger_config(model_dir)
        model = BiLSTMTagger(meta["in_dim"], meta["hidden"], len(meta["labels"]), meta.get("num_layers", 2))
        try:
            model.load_state_dict(load_file(str(Path(model_dir) / TAGGER_WEIGHTS)), strict=True)
        except (RuntimeError, OSError) as e:
            message = f"tagger weights do not fit: {e}".splitlines()[0]
            raise UserError(message, Path(model_dir) / TAGGER_WEIGHTS) from None
        return model


def read_tagger_config(model_dir: Path) -> dict:
    from bertkit.io import read_json

    path = Path(model_dir) / TAGGER_CONFIG
    if not path.exists():
        raise UserError("no tagger.json: not a feature-based NER model", model_dir)
    return read_json(path, "a tagger's settings")
