"""Semantic search: embed a corpus once (`bertkit index`), then answer queries from it (`bertkit search`).

`passages` reads the documents (BEIR's corpus.jsonl, any JSONL with id/text, or one passage per
line) and keeps them in a seekable store; `encoder` embeds with a model directory's own pooling;
`vectors` stores the vectors (fp32, fp16 or int8, always .npy without pickles) and scores them
exactly; `index` builds an index folder in one streaming pass and searches it, through a usearch
HNSW graph above a size threshold; `rerank` rescores the top hits with a one-label cross-encoder;
`evaluate` ranks a BEIR set with a bi-encoder or with the lexical baseline, BM25 (bm25s), and
scores both the same way.
"""
