"""Task heads on the encoder, named and computing losses as in transformers.

Each head adds one small output layer (the paper's fine-tuning recipe) and returns a small
dataclass. Losses match transformers' (cross-entropy with ignore index -100, MSE for regression).

The MLM head differs from transformers in one way that matters for speed: given labels, it
computes vocabulary logits only at the labelled positions (~15% of tokens), so `logits` is then
(N, V) for the N labelled positions in row-major order rather than (B, T, V). Unless hidden states
are asked for, the encoder's last layer then also runs only at those positions and [CLS].

Shape legend: B batch, T tokens, C hidden, E embedding width, V vocabulary, N labelled positions,
L labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.config import IGNORE_INDEX, BertConfig
from bertkit.families import family_of
from bertkit.hf import PretrainedMixin
from bertkit.model import ACTIVATIONS, BertModel, EncoderOutput, init_weights


@dataclass
class HeadOutput:
    logits: Tensor | None = None  # task logits (shape per head, see the class)
    loss: Tensor | None = None  # scalar, when labels were given
    hidden_states: tuple[Tensor, ...] | None = None
    pooler_output: Tensor | None = None


@dataclass
class PreTrainingOutput(HeadOutput):
    seq_relationship_logits: Tensor | None = None  # (B, 2): IsNext / NotNext
    mlm_loss: Tensor | None = None
    nsp_loss: Tensor | None = None


@dataclass
class QAOutput(HeadOutput):
    start_logits: Tensor | None = None  # (B, T)
    end_logits: Tensor | None = None  # (B, T)


class MLMHead(nn.Module):
    """transform (dense C -> E, act, LayerNorm) then a decoder tied to the word embeddings + own bias.

    E is the embeddings' width (C in BERT). The transform's activation is the family's
    (`Family.mlm_act`): BERT's hidden_act; always the exact GELU for RoBERTa and for ELECTRA's
    generator (transformers' ElectraGeneratorPredictions); ModernBERT's classifier_activation."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        E = config.embedding_width
        self.dense = nn.Linear(config.hidden_size, E, bias=config.head_bias)
        self.act = ACTIVATIONS[family_of(config.model_type).mlm_act(config)]
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.word_embeddings = word_embeddings  # tied: shares its (V_padded, E) weight
        self.bias = nn.Parameter(torch.zeros(config.padded_vocab_size)) if config.decoder_bias else None
        self.vocab_size = config.vocab_size

    def forward(self, h: Tensor) -> Tensor:  # (..., C) -> (..., V)
        h = self.norm(self.act(self.dense(h)))  # (..., E)
        if not h.is_cuda:
            # On CPU alignment buys little, while slicing (..., V_padded) logits costs a copy of
            # them in the loss and a zero-fill + copy in backward (~6% of a mini step): multiply
            # by the first V rows, a contiguous view, instead.
            V = self.vocab_size
            return F.linear(h, self.word_embeddings.weight[:V], None if self.bias is None else self.bias[:V])
        logits = F.linear(h, self.word_embeddings.weight, self.bias)  # (..., V_padded)
        return logits[..., : self.vocab_size]


class Summary(nn.Module):
    """A family's own layer before a task's output layer (`Family.summary`): dense C -> C, the
    family's activation, and (ModernBERT) a LayerNorm. RoBERTa's, ELECTRA's, DistilBERT's and DeBERTa's
    sequence classifiers read it on the first token; ModernBERT's on the first token or the mean,
    and its token heads on every token."""

    def __init__(self, config: BertConfig):
        super().__init__()
        spec = family_of(config.model_type).summary
        C = config.hidden_size
        self.dense = nn.Linear(C, C, bias=config.head_bias)
        self.act = ACTIVATIONS[spec.act(config)]
        self.norm = nn.LayerNorm(C, eps=config.layer_norm_eps, bias=config.norm_bias) if spec.norm else None

    def forward(self, h: Tensor) -> Tensor:  # (..., C) -> (..., C)
        h = self.act(self.dense(h))
        return self.norm(h) if self.norm is not None else h


def pooled(config: BertConfig, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
    """(B, T, C) -> (B, C): the first token, or (ModernBERT's `classifier_pooling` "mean") the mean
    over the real tokens."""
    if config.classifier_pooling == "cls":
        return hidden[:, 0]
    if attention_mask is None:
        return hidden.mean(1)
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * mask).sum(1) / mask.sum(1)


def _encode_for_mlm(encoder: BertModel, input_ids, attention_mask, token_type_ids, labels: Tensor | None,
                    output_hidden_states: bool) -> tuple[EncoderOutput, Tensor, Tensor | None]:
    """(the encoder's outputs, what the MLM head reads, its labels). Without labels: every
    position (B, T, C), and None. With labels: the labelled positions (N, C) in row-major order
    and their labels (N,); unless hidden states are asked for, the encoder's last layer computes
    only those rows (and [CLS] for the pooler, see `BertModel.forward`'s `rows`)."""
    if labels is None:
        enc = encoder(input_ids, attention_mask, token_type_ids, output_hidden_states)
        return enc, enc.last_hidden_state, None
    flat = labels.reshape(-1)
    labelled = (flat != IGNORE_INDEX).nonzero().squeeze(1)  # (N,)
    if output_hidden_states:  # every layer whole, as asked; the head reads the labelled rows
        enc = encoder(input_ids, attention_mask, token_type_ids, True)
        h = enc.last_hidden_state
        return enc, h.reshape(-1, h.shape[-1])[labelled], flat[labelled]  # (B*T, C) -> (N, C)
    enc = encoder(input_ids, attention_mask, token_type_ids, rows=labelled)
    return enc, enc.last_hidden_state, flat[labelled]


def _mlm_loss(logits: Tensor, labels: Tensor, reduction: str) -> Tensor:
    # Over zero labelled positions transformers' mean is NaN; keep that behaviour.
    return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX, reduction=reduction)


class Head(PretrainedMixin, nn.Module):
    """What every task head shares: an `encoder` (BertModel), new layers at BERT's init, `encode`."""

    def _init_new(self, *modules: nn.Module) -> None:
        for m in modules:
            m.apply(lambda x: init_weights(x, self.config))

    def encode(self, input_ids, attention_mask=None, token_type_ids=None, output_hidden_states=False) -> EncoderOutput:
        return self.encoder(input_ids, attention_mask, token_type_ids, output_hidden_states)


class BertForPreTraining(Head):
    """Masked language modelling + next-sentence prediction (the paper's pretraining).

    The loss is the MLM loss, plus the NSP loss when `next_sentence_label` is given; `reduction`
    "sum" sums both over their rows instead of averaging (the pretraining loop divides by the
    counts of the whole global batch)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.encoder = BertModel(config, add_pooling_layer=True)
        self.mlm = MLMHead(config, self.encoder.embeddings.word)
        self.nsp = nn.Linear(config.hidden_size, 2)
        self._init_new(self.mlm.dense, self.mlm.norm, self.nsp)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                next_sentence_label=None, output_hidden_states=False, reduction: str = "mean") -> PreTrainingOutput:
        enc, h, y = _encode_for_mlm(self.encoder, input_ids, attention_mask, token_type_ids, labels,
                                    output_hidden_states)
        logits = self.mlm(h)  # (B, T, V), or (N, V) at the labelled positions
        nsp_logits = self.nsp(enc.pooler_output)  # (B, 2)
        mlm_loss = nsp_loss = None
        if labels is not None:
            mlm_loss = _mlm_loss(logits, y, reduction)
            if next_sentence_label is not None:
                nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label.reshape(-1), reduction=reduction)
        loss = mlm_loss if nsp_loss is None else mlm_loss + nsp_loss
        return PreTrainingOutput(logits=logits, loss=loss, hidden_states=enc.hidden_states,
                                 pooler_output=enc.pooler_output, seq_relationship_logits=nsp_logits,
                                 mlm_loss=mlm_loss, nsp_loss=nsp_loss)


class BertForMaskedLM(Head):
    """MLM only (the no-NSP ablation; with attention="causal" and shifted labels, the LTR model).
    `reduction` as `BertForPreTraining`'s."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.encoder = BertModel(config, add_pooling_layer=False)
        self.mlm = MLMHead(config, self.encoder.embeddings.word)
        self._init_new(self.mlm.dense, self.mlm.norm)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False, reduction: str = "mean") -> HeadOutput:
        enc, h, y = _encode_for_mlm(self.encoder, input_ids, attention_mask, token_type_ids, labels,
                                    output_hidden_states)
        logits = self.mlm(h)  # (B, T, V), or (N, V) at the labelled positions
        loss = _mlm_loss(logits, y, reduction) if labels is not None else None
        return HeadOutput(logits, loss, enc.hidden_states)


class BertForSequenceClassification(Head):
    """Pooled [CLS] -> dropout -> linear. num_labels == 1 means regression (MSE). Where the family
    has a summary layer of its own (RoBERTa, ELECTRA, DistilBERT, DeBERTa, ModernBERT) it replaces the
    encoder's pooler: first token (or mean) -> summary -> dropout -> linear."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        own = family_of(config.model_type).summary is not None
        self.encoder = BertModel(config, add_pooling_layer=not own)
        self.summary = Summary(config) if own else None
        self.dropout = nn.Dropout(config.head_dropout)
        self.output = nn.Linear(config.hidden_size, config.num_labels)
        self._init_new(*(m for m in (self.summary, self.output) if m is not None))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False) -> HeadOutput:
        enc = self.encode(input_ids, attention_mask, token_type_ids, output_hidden_states)
        if self.summary is not None:
            enc.pooler_output = self.summary(pooled(self.config, enc.last_hidden_state, attention_mask))  # (B, C)
        logits = self.output(self.dropout(enc.pooler_output))  # (B, L)
        loss = None
        if labels is not None:
            loss = sequence_classification_loss(self.config, logits, labels)
        return HeadOutput(logits, loss, enc.hidden_states, enc.pooler_output)


def sequence_classification_loss(config: BertConfig, logits: Tensor, labels: Tensor) -> Tensor:
    """transformers' rule: regression when one label, single-label CE for integer labels,
    multi-label BCE otherwise (or as `problem_type` says)."""
    kind = config.problem_type
    if kind is None:
        if config.num_labels == 1:
            kind = "regression"
        elif labels.dtype in (torch.long, torch.int):
            kind = "single_label_classification"
        else:
            kind = "multi_label_classification"
    if kind == "regression":
        return F.mse_loss(logits.float().squeeze(-1), labels.float().reshape(-1)) if config.num_labels == 1 \
            else F.mse_loss(logits.float(), labels.float())
    if kind == "single_label_classification":
        return F.cross_entropy(logits.float().view(-1, config.num_labels), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


def _token_summary(config: BertConfig) -> Summary | None:
    """ModernBERT's token heads read every token through its summary layer first."""
    return Summary(config) if family_of(config.model_type).token_summary else None


class BertForTokenClassification(Head):
    """Each token's hidden state (ModernBERT: through its summary layer) -> dropout -> linear (NER);
    label -100 positions are ignored."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.encoder = BertModel(config, add_pooling_layer=False)
        self.summary = _token_summary(config)
        self.dropout = nn.Dropout(config.head_dropout)
        self.output = nn.Linear(config.hidden_size, config.num_labels)
        self._init_new(*(m for m in (self.summary, self.output) if m is not None))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False) -> HeadOutput:
        enc = self.encode(input_ids, attention_mask, token_type_ids, output_hidden_states)
        h = enc.last_hidden_state if self.summary is None else self.summary(enc.last_hidden_state)
        logits = self.output(self.dropout(h))  # (B, T, L)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().view(-1, self.config.num_labels), labels.view(-1),
                                   ignore_index=IGNORE_INDEX)
        return HeadOutput(logits, loss, enc.hidden_states)


class BertForQuestionAnswering(Head):
    """Start and end logits for extractive QA (SQuAD); loss is the mean of the two CEs."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.encoder = BertModel(config, add_pooling_layer=False)
        self.summary = _token_summary(config)
        self.output = nn.Linear(config.hidden_size, 2)
        self._init_new(*(m for m in (self.summary, self.output) if m is not None))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, start_positions=None,
                end_positions=None, output_hidden_states=False) -> QAOutput:
        enc = self.encode(input_ids, attention_mask, token_type_ids, output_hidden_states)
        h = enc.last_hidden_state if self.summary is None else self.summary(enc.last_hidden_state)
        start, end = self.output(h).float().unbind(-1)  # (B, T) each
        out = QAOutput(hidden_states=enc.hidden_states, start_logits=start, end_logits=end)
        if start_positions is not None and end_positions is not None:
            out.loss = span_loss(start, end, start_positions, end_positions)
        return out


def span_loss(start: Tensor, end: Tensor, start_positions: Tensor, end_positions: Tensor) -> Tensor:
    """The mean of the start and end cross-entropies over (B, T) logits; as transformers,
    positions outside the sequence are clamped to T and ignored."""
    T = start.shape[1]
    s = start_positions.reshape(-1).clamp(0, T)
    e = end_positions.reshape(-1).clamp(0, T)
    return (F.cross_entropy(start, s, ignore_index=T) + F.cross_entropy(end, e, ignore_index=T)) / 2


class BiLSTMTagger(nn.Module):
    """The feature-based NER tagger (paper §5.3): word features -> dropout -> 2-layer BiLSTM ->
    linear over the tags; trained on frozen BERT features (`bertkit.finetune.feature_ner`).

    Shapes: B sentences, W words, F feature size (k layers x C), L tags.
    """

    def __init__(self, in_dim: int, hidden: int, num_labels: int, num_layers: int = 2, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(in_dim, hidden, num_layers, batch_first=True, bidirectional=True, dropout=dropout)
        self.output = nn.Linear(2 * hidden, num_labels)

    def forward(self, features: Tensor, lengths: Tensor, labels: Tensor | None = None) -> HeadOutput:
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        W = features.shape[1]
        # Packing keeps padding out of the backward direction's state.
        packed = pack_padded_sequence(self.dropout(features.float()), lengths.cpu().clamp(min=1),
                                      batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=W)  # (B, W, 2*hidden)
        logits = self.output(self.dropout(h))  # (B, W, L)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX)
        return HeadOutput(logits, loss)


HEADS = {cls.__name__: cls for cls in (BertForPreTraining, BertForMaskedLM, BertForSequenceClassification,
                                        BertForTokenClassification, BertForQuestionAnswering)}
