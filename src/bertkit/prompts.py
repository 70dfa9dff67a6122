"""sentence-transformers' prompts: a text put before every input, chosen by name or given.

A model directory's config_sentence_transformers.json may hold `prompts` ({name: text}, such
as {"query": "query: ", "passage": "passage: "} for asymmetric retrieval) and a
`default_prompt_name`. What `SentenceTransformer.encode` does with them, bertkit does:

- the prompt is prepended to the text as it is (`prompt + text`, no space added), then the
  whole is tokenized, so the prompt's tokens count towards the length limit;
- an explicit prompt wins; else a prompt name (unknown: an error naming the ones there are);
  else the default prompt name's text, if set; else none;
- a role (`encode_query` / `encode_document`) picks its own prompt when none was asked for: the
  "query" prompt for queries, the first of "document", "passage", "corpus" for passages (index
  uses the passage prompt, search the query prompt), and then never the default;
- mean (and max, cls) pooling reads the prompt's tokens too: sentence-transformers' Pooling
  `include_prompt` is true unless its config says false (Instructor-style models), and bertkit
  refuses such a model with a prompt rather than give other vectors.
"""

from __future__ import annotations

import os
from functools import lru_cache

from bertkit.errors import UserError

ROLES = {"query": ("query",), "document": ("document", "passage", "corpus")}


@lru_cache(maxsize=32)
def _prompts(model_dir: str) -> tuple[tuple[tuple[str, str], ...], str | None]:
    from bertkit.st import model_st_config

    config = model_st_config(model_dir)
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise UserError("prompts must be an object of names to texts", os.path.join(model_dir,
                                                                                  "config_sentence_transformers.json"))
    return tuple(prompts.items()), config.get("default_prompt_name")


def model_prompts(model_dir: str | os.PathLike) -> tuple[dict[str, str], str | None]:
    """(the directory's prompts {name: text}, its default prompt name or None)."""
    prompts, default = _prompts(str(model_dir))
    return dict(prompts), default


def resolve_prompt(model_dir: str | os.PathLike, prompt_name: str | None = None, prompt: str | None = None,
                   role: str | None = None, flag: str = "--prompt-name", text_flag: str = "--prompt") -> str:
    """The text to put before each input ("" for none), as sentence-transformers chooses it;
    a UserError for an unknown name (naming `flag`) or a prompt on a model that pools without it."""
    prompts, default = model_prompts(model_dir)
    if prompt is not None and prompt_name is not None:
        raise UserError(f"{flag} and {text_flag} ask for different things: give one")
    if prompt is None:
        if prompt_name is None and role is not None:
            prompt_name = next((name for name in ROLES[role] if name in prompts), None)
            default = None  # a role without its prompt takes none, not the default
        if prompt_name is not None:
            if prompt_name not in prompts:
                have = ", ".join(repr(p) for p in prompts) or "none"
                raise UserError(f"{flag} {prompt_name!r} is not one of the model's prompts ({have})", model_dir)
            prompt = prompts[prompt_name]
        elif default is not None:
            prompt = prompts.get(default, "")
    if prompt:
        check_pools_prompt(model_dir)
    return prompt or ""


def check_pools_prompt(model_dir: str | os.PathLike) -> None:
    from bertkit.st import pooling_includes_prompt

    if not pooling_includes_prompt(model_dir):
        raise UserError("this model's Pooling leaves the prompt's tokens out (include_prompt false), which bertkit "
                        "does not do: use it without a prompt, or in sentence-transformers", model_dir)


def with_prompt(prompt: str, texts: list[str]) -> list[str]:
    """Each text with `prompt` before it (the list itself when there is none)."""
    return [prompt + t for t in texts] if prompt else texts
