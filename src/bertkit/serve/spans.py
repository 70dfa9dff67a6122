"""The routes that read single tokens: /ner, /qa and /fill-mask (see `serve.routes` for `Work`).

- /ner: a word's tag is its first piece's (as `bertkit.data.ner` reads predictions back);
  words tagged B-X, or I-X after anything but X, start an entity; an entity spans its first
  word's first character to its last word's last, and its score is the mean probability of its
  words' tags. Its kind is both "entity" and "entity_group" (transformers' aggregated pipeline
  and HF's InferenceClient read the latter). A long text read in windows is tagged token by token
  from the window where each has the most context, then decoded whole, so an entity across a
  window's edge comes out whole and offsets count in the whole text.
- /qa: the context cut into windows as for SQuAD (`data.squad.make_features`), the best span of
  any window (`eval.squad.best_span`), its probability the product of the start and end
  softmaxes over its window. The body is {"question", "context"}, or HF's {"inputs": {"question",
  "context"}}.
- /fill-mask: the top-k guesses for each [MASK], from one forward pass over the whole text (in
  windows: each [MASK] from the window where it has the most context).
"""

from __future__ import annotations

import numpy as np

from bertkit.serve.models import ModelSpec
from bertkit.serve.requests import (
    ApiError,
    Limits,
    check_count,
    integer,
    text,
    texts,
)
from bertkit.serve.routes import Work, _softmax, encode


def _word_tags(spec: ModelSpec, encoding, logits: np.ndarray) -> list[tuple[str, float, int, int]]:
    """(tag, probability, start, end) of each word, from its pieces' (n, L) logits."""
    probs = _softmax(logits)
    words: dict[int, list] = {}
    for t, w in enumerate(encoding.word_ids):
        if w is None:
            continue
        a, b = encoding.offsets[t]
        if w not in words:
            best = int(probs[t].argmax())
            words[w] = [spec.labels[best], float(probs[t, best]), a, b]
        else:
            words[w][3] = b
    return [tuple(words[w]) for w in sorted(words)]


def entities(spec: ModelSpec, source: str, encoding, logits: np.ndarray) -> list[dict]:
    found, current = [], None
    for tag, p, a, b in _word_tags(spec, encoding, logits):
        prefix, _, kind = tag.partition("-") if tag[:2] in ("B-", "I-") else ("I", "", tag)
        if tag == "O":
            current = None
            continue
        if prefix == "B" or current is None or current["entity"] != kind:
            current = {"entity": kind, "start": a, "end": b, "scores": []}
            found.append(current)
        current["end"] = b
        current["scores"].append(p)
    out = []
    for e in found:
        scores = e.pop("scores")
        out.append({"entity": e["entity"], "entity_group": e["entity"], "word": source[e["start"]:e["end"]],
                    "start": e["start"], "end": e["end"], "score": float(np.mean(scores))})
    return out


def ner(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """{"inputs": str | [str], "truncate": false} -> entities [{"entity", "entity_group", "word",
    "start", "end", "score"}] (a list per text when a list was sent)."""
    inputs, single = texts(body, "inputs", limits)
    encoded = encode(spec, body, limits, "/ner", inputs, "inputs")

    def finish(out):
        result = []
        for i, rows in enumerate(encoded.group(out)):
            logits = encoded.tokens(i, rows)  # (n + 2, L)
            e = encoded.encodings[i]
            result.append(entities(spec, inputs[i], e, logits[1:1 + len(e.ids)] if encoded.windows else logits))
        return result[0] if single else result

    return Work("tokens", encoded.rows, finish, encoded.headers())


def qa(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """{"question", "context"} -> {"answer", "start", "end", "score"}: the answer as it is in the
    context, context[start:end]; an empty answer (score 0) when no window has a valid span."""
    from bertkit.data.squad import SquadExample, make_features
    from bertkit.eval.squad import best_span

    fields, where = (body["inputs"], "inputs.") if isinstance(body.get("inputs"), dict) else (body, "")
    question = text(fields.get("question"), where + "question", limits)
    context = text(fields.get("context"), where + "context", limits)
    features = make_features([SquadExample("0", "", context, question, [])], spec.tokenizer,
                             max_seq_len=spec.max_length, doc_stride=min(128, spec.max_length // 2))
    check_count(len(features), "context windows", limits)

    def finish(out):
        best = None
        for f, logits in enumerate(out):
            span = best_span(features, f, logits[:, 0], logits[:, 1], n_best=20, max_answer_len=30)
            if span is not None and (best is None or span[0] > best[0][0]):
                best = (span, f, logits)
        if best is None:
            return {"answer": "", "start": 0, "end": 0, "score": 0.0}
        (_, s, e), f, logits = best
        start, end = features.offsets[f][s][0], features.offsets[f][e][1]
        score = _softmax(logits[:, 0])[s] * _softmax(logits[:, 1])[e]
        return {"answer": context[start:end], "start": start, "end": end, "score": float(score)}

    from bertkit.serve.windows import headers

    windows = [(0, len(features))] if len(features) > 1 else []
    return Work("qa", list(zip(features.input_ids, features.token_type_ids)), finish, headers([], windows))


def fill_mask(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """{"inputs": str | [str], "top_k": 5, "truncate": false} -> for each [MASK], its guesses
    [{"token", "id", "score", "sequence"}] best first ("sequence": the text with it filled in)."""
    inputs, single = texts(body, "inputs", limits)
    top_k = integer(body, "top_k", 5, 1, 100)
    encoded = encode(spec, body, limits, "/fill-mask", inputs, "inputs")
    mask_id, tok = spec.tokenizer.mask_id, spec.tokenizer
    for i, e in enumerate(encoded.encodings):
        if mask_id not in e.ids:
            where = "inputs" if single else f"inputs[{i}]"
            raise ApiError(422, f"{where} has no [MASK] token" + (" within the model's tokens" if e.truncated else ""))

    def guesses(e, logits):
        positions = [t for t, i in enumerate(e.ids) if i == mask_id]
        report = []
        for pos, row in zip(positions, _softmax(logits)):
            top = np.argsort(-row, kind="stable")[:top_k]
            filled = []
            for i in top:
                ids = list(e.ids)
                ids[pos] = int(i)
                filled.append({"token": tok.convert_ids_to_tokens([int(i)])[0], "id": int(i),
                               "score": float(row[i]), "sequence": tok.decode(ids)})
            report.append(filled)
        return report

    def finish(out):
        result = [guesses(encoded.encodings[i], _mask_logits(encoded, i, rows, mask_id))
                  for i, rows in enumerate(encoded.group(out))]
        return result[0] if single else result

    return Work("mlm", encoded.rows, finish, encoded.headers())


def _mask_logits(encoded, i: int, outputs: list, mask_id: int) -> np.ndarray:
    """(M, V) the logits of input i's [MASK]s in order: its one row's, or each [MASK]'s from the
    window where it has the most context (a row's outputs hold its [MASK]s in order)."""
    if not encoded.windows:
        return outputs[0]
    plan = encoded.plan
    content, best, first = plan.contents[i], plan.best_rows(i), plan.rows(i).start
    found = []
    for t in np.flatnonzero(content == mask_id).tolist():
        r = int(best[t])
        before = int(np.count_nonzero(content[plan.start[r]:t] == mask_id))  # [MASK]s of row r before t
        found.append(outputs[r - first][before])
    return np.stack(found)
