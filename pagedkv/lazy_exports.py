"""A package's public names, imported from their modules on first access (PEP 562).

``pagedkv.managers`` and ``pagedkv.entrypoints`` re-export names whose modules import torch,
which ``pagedkv size`` must start without; each package passes its name table here and
binds the two functions returned as its module-level ``__getattr__`` and ``__dir__``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import Any


def lazy_exports(package: str, namespace: dict[str, Any], exports: Mapping[str, str],
                 public: Sequence[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``.

    Args:
        package: the package's ``__name__`` (named in the AttributeError).
        namespace: the package's ``globals()``: a loaded name is cached there, so the
            next access does not come back here.
        exports: public name -> the module that defines it.
        public: the package's ``__all__``.

    ``__getattr__`` raises AttributeError for a name not in ``exports``, as Python does.
    """

    def getattr_(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(exports[name]), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *public})

    return getattr_, dir_
