"""The JSON Schema of every route's request and answer: what /openapi.json publishes.

Written beside nothing else so that each route's shape is stated once; `serve.api.ROUTES` pairs
each schema with the route's `prepare` function, and the app, the OpenAPI document and the tests
all read that table. The validators in `serve.requests` give each refusal its one-line message;
schemathesis checks through a real server (tests/test_serve_schema.py) that answers match these
schemas and that no request, valid or not, gets a 5xx.
"""

from __future__ import annotations


def obj(required: tuple[str, ...] = (), **properties) -> dict:
    """An object with these properties (others allowed: TEI and OpenAI add fields over time)."""
    out = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    return out


def arr(items: dict, min_items: int = 0) -> dict:
    return {"type": "array", "items": items, **({"minItems": min_items} if min_items else {})}


def one_of(*schemas: dict) -> dict:
    """Any of these shapes (anyOf: an empty list may fit two of them)."""
    return {"anyOf": list(schemas)}


STR = {"type": "string", "minLength": 1}
INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}
NULLABLE_INT = {"type": "integer", "nullable": True}
TEXTS = one_of(STR, arr(STR, 1))
# every route that reads text: what a text over the model's tokens gets (`routes.long_inputs`)
LONG = {"long_inputs": {"type": "string", "enum": ["refuse", "truncate", "windows"]},
        "window_stride": {"type": "integer", "minimum": 1}}
TOKEN_IDS = arr({"type": "integer", "minimum": 0}, 1)
VECTOR = arr(NUM)

ERROR = obj(("error", "error_type"), error={"type": "string"}, error_type={"type": "string"})
OPENAI_ERROR = obj(("error",), error=obj(("message", "type"), message={"type": "string"}, type={"type": "string"},
                                         param={"type": "string", "nullable": True},
                                         code={"type": "string", "nullable": True}))

EMBED = obj(("inputs",), inputs=TEXTS, normalize=BOOL, truncate=BOOL, dimensions={"type": "integer", "minimum": 1},
            prompt_name=STR, model=STR, **LONG)
EMBED_OUT = arr(VECTOR)
EMBED_ALL = obj(("inputs",), inputs=TEXTS, truncate=BOOL, prompt_name=STR, model=STR, **LONG)
EMBED_ALL_OUT = arr(arr(VECTOR))
SIMILARITY = obj(("inputs",), inputs=obj(("source_sentence", "sentences"), source_sentence=STR, sentences=arr(STR, 1)),
                 truncate=BOOL, prompt_name=STR, model=STR, **LONG)
SIMILARITY_OUT = arr(NUM)
OPENAI = obj(("input",), input=one_of(STR, arr(STR, 1), TOKEN_IDS, arr(TOKEN_IDS, 1)), model={"type": "string"},
             encoding_format={"type": "string", "enum": ["float", "base64"]},
             dimensions={"type": "integer", "minimum": 1}, prompt_name=STR, user={"type": "string"}, **LONG)
OPENAI_OUT = obj(("object", "data", "model", "usage"), object={"type": "string", "enum": ["list"]},
                 data=arr(obj(("object", "index", "embedding"), object={"type": "string", "enum": ["embedding"]},
                              index=INT, embedding=one_of(VECTOR, {"type": "string"}))),
                 model={"type": "string"}, usage=obj(("prompt_tokens", "total_tokens"), prompt_tokens=INT,
                                                     total_tokens=INT))
RERANK = obj(("query", "texts"), query=STR, texts=arr(STR, 1), return_text=BOOL, raw_scores=BOOL, truncate=BOOL,
             model=STR, **LONG)
RERANK_OUT = arr(obj(("index", "score"), index=INT, score=NUM, text={"type": "string"}))
PREDICT_ONE = one_of(STR, arr(STR, 1))
PREDICT = obj(("inputs",), inputs=one_of(STR, arr(STR, 1), arr(arr(STR, 1), 1)), raw_scores=BOOL, truncate=BOOL,
              model=STR, aggregate={"type": "string", "enum": ["mean", "max"]}, **LONG)
PREDICTION = obj(("label", "score"), label={"type": "string"}, score=NUM)
PREDICT_OUT = one_of(arr(PREDICTION), arr(arr(PREDICTION), 1))  # a multi-label model may give no label
TOKENIZE = obj(("inputs",), inputs=TEXTS, add_special_tokens=BOOL, model=STR)
TOKENIZE_OUT = arr(arr(obj(("id", "text", "special", "start", "stop"), id=INT, text={"type": "string"},
                           special=BOOL, start=NULLABLE_INT, stop=NULLABLE_INT)))
DECODE = obj(("ids",), ids=one_of(TOKEN_IDS, arr(TOKEN_IDS, 1)), skip_special_tokens=BOOL, model=STR)
DECODE_OUT = arr({"type": "string"})
ENTITY = obj(("entity", "entity_group", "word", "start", "end", "score"), entity={"type": "string"},
             entity_group={"type": "string"}, word={"type": "string"}, start=INT, end=INT, score=NUM)
NER = obj(("inputs",), inputs=TEXTS, truncate=BOOL, model=STR, **LONG)
NER_OUT = one_of(arr(ENTITY), arr(arr(ENTITY)))
QA_FIELDS = {"question": STR, "context": STR}
QA = one_of(obj(("question", "context"), **QA_FIELDS, model=STR),
            obj(("inputs",), inputs=obj(("question", "context"), **QA_FIELDS), model=STR))
QA_OUT = obj(("answer", "start", "end", "score"), answer={"type": "string"}, start=INT, end=INT, score=NUM)
GUESS = obj(("token", "id", "score", "sequence"), token={"type": "string"}, id=INT, score=NUM,
            sequence={"type": "string"})
FILL_MASK = obj(("inputs",), inputs=TEXTS, top_k={"type": "integer", "minimum": 1, "maximum": 100}, truncate=BOOL,
                model=STR, **LONG)
FILL_MASK_OUT = one_of(arr(arr(GUESS)), arr(arr(arr(GUESS))))
HF_GUESS = obj(("score", "token", "token_str", "sequence"), score=NUM, token=INT, token_str={"type": "string"},
               sequence={"type": "string"})
ROOT = {"anyOf": [EMBED, SIMILARITY, RERANK, PREDICT, NER, QA, FILL_MASK,
                  obj(("inputs", "parameters"), inputs={}, parameters={"type": "object"})]}
ROOT_OUT = {"anyOf": [EMBED_OUT, SIMILARITY_OUT, RERANK_OUT, PREDICT_OUT, NER_OUT, QA_OUT, FILL_MASK_OUT,
                      arr(arr(PREDICTION)), arr(HF_GUESS), arr(arr(HF_GUESS))]}

SEARCH = obj(("query",), query=TEXTS, top_k={"type": "integer", "minimum": 1, "maximum": 1000}, exact=BOOL,
             truncate=BOOL, prompt_name=STR, model=STR, **LONG)
SEARCH_HITS = obj(("query", "hits"), query={"type": "string"},
                  hits=arr(obj(("rank", "id", "score", "text"), rank=INT, id={"type": "string"}, score=NUM,
                               text={"type": "string"})))
SEARCH_OUT = one_of(SEARCH_HITS, arr(SEARCH_HITS, 1))

HEALTH_OUT = obj(("status",), status={"type": "string"})
INFO_OUT = obj(("version", "phase", "backend", "default_model", "models", "limits"), version={"type": "string"},
               phase={"type": "string"}, backend={"type": "string"}, default_model={"type": "string"},
               models=arr({"type": "object"}), limits={"type": "object"})
