"""A package's public names imported on first use (PEP 562's module `__getattr__` and `__dir__`),
so importing the package, for its options or its tables, does not import torch through its other
modules."""

from __future__ import annotations

import importlib
import sys


def lazy_exports(package: str, exports: dict[str, str]):
    """The `__getattr__` and `__dir__` of `package`: each name in `exports` (name -> module)
    imported when first read, then kept in the package like an ordinary import; `dir()` lists
    the names not yet imported too."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
