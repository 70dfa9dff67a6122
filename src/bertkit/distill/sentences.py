"""Sentences to distil an embedding model on, from any of bertkit's corpus files.

An embedding student learns the teacher's vector for each training sentence, so any English text
will do: the files are cut into sentences by `bertkit.data.corpus` (the splitter pretraining
uses), sentences of fewer than `min_words` words (headings, list items, Gutenberg's chapter
numbers) are dropped, and each distinct sentence is kept once, in file order.
"""

from __future__ import annotations

from collections.abc import Sequence

from bertkit.errors import UserError


def read_sentences(paths: str | Sequence[str], min_words: int = 4) -> list[str]:
    """Distinct sentences of at least `min_words` words from files or folders of corpus text."""
    from bertkit.data.corpus import read_documents
    from bertkit.io import expand_inputs

    files = expand_inputs([paths] if isinstance(paths, str) else list(paths))
    seen: dict[str, None] = {}
    for path in files:
        for document in read_documents(path):
            for sentence in document:
                if len(sentence.split()) >= min_words:
                    seen.setdefault(sentence, None)
    if not seen:
        raise UserError(f"no sentence of {min_words} or more words in {', '.join(map(str, files))}")
    return list(seen)
