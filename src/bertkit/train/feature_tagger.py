"""Feature-based NER (paper §5.3): a small tagger on frozen BERT features, no fine-tuning.

The paper feeds the concatenation of the last four hidden layers at each word's first
WordPiece into a randomly initialised two-layer BiLSTM (768 units per direction for BERT-base)
before the classification layer, and reaches 96.1 dev F1 against 96.4 for fine-tuning. Here the
encoder runs once over every sentence; the word features are kept (in bf16 to halve the memory)
and only the BiLSTM + linear layer train. The LSTM width follows the encoder's hidden size, as the
paper's 768 did for BERT-base.

Saved model folder: the frozen encoder as an HF `BertModel` (config.json, model.safetensors,
vocabulary), plus `tagger.safetensors` and `tagger.json` (labels, layers, sizes).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bertkit.errors import UserError
from bertkit.heads import IGNORE, HeadOutput
from bertkit.model import BertModel
from bertkit.train.finetune_tasks import Runtime, TokenTask, collate, to_device

TAGGER_WEIGHTS = "tagger.safetensors"
TAGGER_CONFIG = "tagger.json"


class BiLSTMTagger(nn.Module):
    """Word features -> dropout -> 2-layer BiLSTM -> linear over the tags.

    Shapes: B sentences, W words, F feature size (k layers x C), L tags.
    """

    def __init__(self, in_dim: int, hidden: int, num_labels: int, num_layers: int = 2, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(in_dim, hidden, num_layers, batch_first=True, bidirectional=True, dropout=dropout)
        self.classifier = nn.Linear(2 * hidden, num_labels)

    def forward(self, features: Tensor, lengths: Tensor, labels: Tensor | None = None) -> HeadOutput:
        W = features.shape[1]
        # Packing keeps padding out of the backward direction's state.
        packed = pack_padded_sequence(self.dropout(features.float()), lengths.cpu().clamp(min=1),
                                      batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=W)  # (B, W, 2*hidden)
        logits = self.classifier(self.dropout(h))  # (B, W, L)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE)
        return HeadOutput(logits, loss)


class FeatureTaggerTask(TokenTask):
    """NER with the encoder frozen: word features computed once, then a BiLSTM tagger trained."""

    def __init__(self, labels: list[str] | None, tokenizer, max_seq_len: int, encoder_dir: Path,
                 rt: Runtime, layers: tuple[int, ...] = (-4, -3, -2, -1)):
        super().__init__(labels, tokenizer, max_seq_len)
        self.layers, self.rt = tuple(layers), rt
        self.encoder = BertModel.from_pretrained(encoder_dir).to(rt.device).eval()
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        C = self.encoder.config.hidden_size
        self.in_dim, self.hidden = C * len(self.layers), C

    @torch.no_grad()
    def _word_features(self, features: list[dict], word_ids: list[list]) -> list[Tensor]:
        """(words kept, k*C) bf16 features on the CPU for each sentence: each word's first piece."""
        from tqdm import tqdm

        from bertkit.embed import select_layers

        out: list[Tensor] = []
        rt = self.rt
        for i in tqdm(range(0, len(features), rt.eval_batch_size), desc="BERT features", unit="batch",
                      leave=False, disable=not rt.progress):
            chunk = [{k: f[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
                     for f in features[i : i + rt.eval_batch_size]]
            batch = to_device(collate(chunk, self.tokenizer.pad_id), rt.device)
            with rt.autocast():
                enc = self.encoder(**batch, output_hidden_states=True)
            h = select_layers(enc.hidden_states, self.layers, "concat")  # (B, T, k*C)
            for row, ids in zip(h, word_ids[i : i + rt.eval_batch_size]):
                first = [t for t, w in enumerate(ids) if w is not None and (t == 0 or ids[t - 1] != w)]
                out.append(row[first].to("cpu", torch.bfloat16))
        return out

    def prepare(self, sentences, train: bool = False) -> dict:
        data = super().prepare(sentences, train)
        vectors = self._word_features(data["features"], data["word_ids"])
        # The words that have a first piece (not cut off, not empty), in order: one feature row each.
        words = [sorted({w for w in ids if w is not None}) for ids in data["word_ids"]]
        features = []
        for s, x, kept in zip(sentences, vectors, words):
            f = {"features": x}
            if train:
                f["labels"] = [self.label2id[s.tags[w]] for w in kept]
            features.append(f)
        return {**data, "features": features, "words": words}

    def collate(self, features: list[dict]) -> dict[str, Tensor]:
        W = max(max(len(f["features"]) for f in features), 1)
        x = torch.zeros(len(features), W, self.in_dim)
        labels = torch.full((len(features), W), IGNORE, dtype=torch.long)
        for b, f in enumerate(features):
            n = len(f["features"])
            x[b, :n] = f["features"].float()
            if "labels" in f:
                labels[b, :n] = torch.tensor(f["labels"], dtype=torch.long)
        batch = {"features": x, "lengths": torch.tensor([len(f["features"]) for f in features])}
        if "labels" in features[0]:
            batch["labels"] = labels
        return batch

    @torch.no_grad()
    def predict(self, model, data: dict, rt: Runtime) -> list[list[str]]:
        model.eval()
        out: list[list[str]] = []
        features = data["features"]
        for i in range(0, len(features), rt.eval_batch_size):
            chunk = [{"features": f["features"]} for f in features[i : i + rt.eval_batch_size]]
            batch = to_device(self.collate(chunk), rt.device)
            with rt.autocast():
                best = model(**batch).logits.argmax(-1).tolist()  # (B, W)
            for f, row in zip(chunk, best):
                j = len(out)
                tags = ["O"] * len(data["examples"][j].tokens)
                for w, label in zip(data["words"][j], row[: len(f["features"])]):
                    tags[w] = self.labels[label]
                out.append(tags)
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
                                         "in_dim": self.in_dim, "hidden": self.hidden, "num_layers": 2})

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
    path = Path(model_dir) / TAGGER_CONFIG
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError("no tagger.json: not a feature-based NER model", model_dir) from None
    except json.JSONDecodeError as e:
        raise UserError(f"not valid JSON ({e})", path) from None
