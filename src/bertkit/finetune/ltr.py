"""Fine-tuning a left-to-right (LTR) model, with or without a BiLSTM on top (paper Table 5).

The paper's "LTR & No NSP" model keeps its left-only attention when fine-tuned, and its
"+ BiLSTM" row adds a randomly initialised BiLSTM on top of it during fine-tuning, which gives
every token right context again (and recovers SQuAD, not GLUE). Under causal attention the
[CLS] vector at position 0 has seen only itself, so the LTR classifier here reads the last real
token instead (as a left-to-right language model such as GPT does); with the BiLSTM it reads the
forward state at the last token and the backward state at the first, which have both seen the
whole input. Span prediction (SQuAD) reads every token, as `BertForQuestionAnswering` does.

`ltr_model(bilstm)` is a `new_model` factory for `finetune.run.run_job`; the saved folder holds
the encoder as an HF `BertModel` plus `ltr_head.safetensors` and `ltr_head.json` (these models
are for the ablation's numbers: `bertkit evaluate` does not load them).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import UserError
from bertkit.heads import HeadOutput, QAOutput, span_loss
from bertkit.model import BertModel

HEAD_WEIGHTS = "ltr_head.safetensors"
HEAD_CONFIG = "ltr_head.json"


class LTRHead(nn.Module):
    """An encoder, an optional BiLSTM over its last layer, and a linear output:
    `kind` "classify" (one vector per input -> labels) or "span" (start/end logits per token)."""

    def __init__(self, encoder: BertModel, kind: str, num_labels: int, bilstm: bool, dropout: float = 0.1):
        super().__init__()
        if kind not in ("classify", "span"):
            raise ValueError(f"kind must be classify or span, not {kind!r}")
        self.encoder, self.kind, self.config = encoder, kind, encoder.config
        C = encoder.config.hidden_size
        self.lstm = nn.LSTM(C, C, batch_first=True, bidirectional=True) if bilstm else None
        width = 2 * C if bilstm else C
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(width, width) if kind == "classify" else None
        self.output = nn.Linear(width, num_labels if kind == "classify" else 2)

    def _states(self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor | None):
        """(B, T, width) token states and the (B,) real lengths."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        h = self.encoder(input_ids, attention_mask, token_type_ids).last_hidden_state  # (B, T, C)
        lengths = attention_mask.sum(1)
        if self.lstm is not None:
            from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

            packed = pack_padded_sequence(h.float(), lengths.cpu().clamp(min=1), batch_first=True,
                                          enforce_sorted=False)
            h, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=h.shape[1])
        return h, lengths

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, start_positions=None,
                end_positions=None):
        h, lengths = self._states(input_ids, attention_mask, token_type_ids)
        if self.kind == "span":
            start, end = self.output(self.dropout(h)).float().unbind(-1)  # (B, T) each
            out = QAOutput(start_logits=start, end_logits=end)
            if start_positions is not None and end_positions is not None:
                out.loss = span_loss(start, end, start_positions, end_positions)
            return out
        rows = torch.arange(h.shape[0], device=h.device)
        last = h[rows, (lengths - 1).clamp(min=0)]  # (B, width): the last real token
        if self.lstm is not None:
            C = h.shape[-1] // 2
            last = torch.cat([last[:, :C], h[:, 0, C:]], dim=-1)  # forward at the end, backward at the start
        logits = self.output(self.dropout(torch.tanh(self.dense(last))))  # (B, L); L = 1: a regression
        loss = None
        if labels is not None and logits.shape[-1] == 1:  # STS-B's scores: MSE, as the BERT head's regression
            loss = F.mse_loss(logits.float().squeeze(-1), labels.float().reshape(-1))
        elif labels is not None:
            loss = F.cross_entropy(logits.float(), labels.reshape(-1))
        return HeadOutput(logits, loss)

    def save_pretrained(self, path, tokenizer=None) -> None:
        from safetensors.torch import save_file

        from bertkit.io import atomic_path, write_json

        path = Path(path)
        self.encoder.save_pretrained(path, tokenizer=tokenizer)
        head = {k: v.contiguous() for k, v in self.state_dict().items() if not k.startswith("encoder.")}
        with atomic_path(path / HEAD_WEIGHTS) as tmp:
            save_file(head, str(tmp))
        write_json(path / HEAD_CONFIG, {"kind": self.kind, "bilstm": self.lstm is not None,
                                        "num_outputs": self.output.out_features})


def ltr_model(bilstm: bool):
    """A `new_model(task, model_dir)` factory: the LTR encoder in `model_dir` with this head."""
    from bertkit.finetune.sequence import SequenceTask
    from bertkit.finetune.squad import QATask

    def build(task, model_dir: Path) -> LTRHead:
        encoder = BertModel.from_pretrained(model_dir)
        if encoder.config.attention != "causal":
            raise UserError("an LTR head needs a left-to-right model (pretrained with --objective ltr)", model_dir)
        if isinstance(task, QATask):
            return LTRHead(encoder, "span", 2, bilstm)
        if isinstance(task, SequenceTask):
            return LTRHead(encoder, "classify", 1 if task.regression else len(task.labels), bilstm)
        raise UserError(f"the LTR heads cover classification, regression and SQuAD, not {task.name}")

    return build
