"""Embedding a corpus past one file, one process and one machine: `bertkit embed --shards --out DIR`.

`sources` reads the corpus (text, JSONL and Parquet files, folders, globs) and cuts it into shards;
`shards` writes, checks (SHA-256) and reads back a folder of shards and its manifest; `embedder`
holds the settings that decide the vectors and the `Embedder` both engines run; `run` is the
command as one call (plan, keep the intact shards of an earlier run, embed the rest, complete the
manifest); `ray_engine` spreads the shards over a Ray cluster's actors. `search.index` builds an
index from such a folder without embedding again.
"""

from bertkit.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "EmbedSettings": "bertkit.corpus.embedder",
    "Engine": "bertkit.corpus.run",
    "embed_corpus": "bertkit.corpus.run",
    "read_manifest": "bertkit.corpus.shards",
})
__all__ = ["EmbedSettings", "Engine", "embed_corpus", "read_manifest"]
