"""POST /search: the passages of a served index nearest each query, as `bertkit search --json` prints them.

`bertkit serve --model DIR --index INDEX` attaches a search index (`search.index.SearchIndex`,
memory-mapped: vectors and graphs are read from disk as queries need them, so an index larger
than memory is served too) to the model it was built with. A query is embedded on the batcher like
/embed's inputs (pooled as the model's files say, unit length), then the index is searched on the
tokenizing thread: through its HNSW graph(s), candidates rescored exactly, or every vector with
"exact". A query takes the model's query prompt (or "prompt_name"'s) and the index's width.
Body {"query": text | [text], "top_k": 10, "exact": false, "prompt_name"}; answer {"query", "hits":
[{"rank", "id", "score", "text"}]}, or a list of those for a list of queries.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bertkit.errors import UserError
from bertkit.serve.models import ModelSpec
from bertkit.serve.requests import Limits, flag, integer, texts
from bertkit.serve.routes import Work, encode, prompted
from bertkit.serve.windows import pooled

MAX_TOP_K = 1000


def search(spec: ModelSpec, body: dict, limits: Limits) -> Work:
    queries, single = texts(body, "query", limits)
    k = integer(body, "top_k", 10, 1, MAX_TOP_K)
    exact = flag(body, "exact", False)
    encoded = encode(spec, body, limits, "/search", prompted(spec, body, queries, role="query"), "query")
    size = spec.index.meta.get("dimensions")  # an index built with --dimensions: queries cut to its width

    def finish(out):
        vectors = np.stack(pooled(encoded, out, size, True))  # (Q, C) unit rows
        positions, scores = spec.index.search(vectors, k, exact=exact)
        found = [{"query": q, "hits": spec.index.hits(positions[i], scores[i])} for i, q in enumerate(queries)]
        return found[0] if single else found

    return Work("embed", encoded.rows, finish, encoded.headers())


def attach_index(specs: list[ModelSpec], entry: tuple[str | None, str]) -> str | None:
    """Open the index `entry` ((model name or None, folder)) on the model it was built with: the
    named one, else the one at the path its meta.json records; a UserError when none fits. The
    line to print when the model encodes queries at another precision than the index's vectors."""
    from bertkit.search.index import SearchIndex, precision_mismatch, read_meta

    name, folder = entry
    meta = read_meta(folder)
    if name is not None:
        chosen = [s for s in specs if s.name == name]
        if not chosen:
            raise UserError(f"--index {name}={folder}: no served model is named {name!r}")
    else:
        chosen = [s for s in specs if Path(s.path).resolve() == Path(meta["model"]).resolve()]
        if not chosen:
            raise UserError(f"built with {meta['model']}, which no --model serves: serve it, or name the model "
                            "(--index NAME=DIR)", folder)
    spec = chosen[0]
    if not spec.embeds:
        raise UserError(f"--index {folder}: model {spec.name!r} gives no sentence vectors (an ONNX head graph)")
    if spec.pooling != meta["pooling"]:
        raise UserError(f"its vectors are {meta['pooling']}-pooled; model {spec.name!r} pools {spec.pooling}", folder)
    if spec.index is not None:
        raise UserError(f"--index {folder}: model {spec.name!r} already serves an index")
    spec.index = SearchIndex(folder)
    line = precision_mismatch(meta, spec.precision)
    return f"--index {folder}: {line}" if line else None
