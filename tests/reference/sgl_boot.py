"""Import SGLang's own scheduler-memory classes on a CPU, without its server.

SGLang is installed ``--no-deps`` (``scripts/sglang_reference.sh``), so its package
``__init__`` (the language frontend, the HTTP server, model patches) cannot run and is never
imported: ``sglang`` is registered as an empty package over the installed files, and only
the ``sglang.srt`` modules the tests drive are imported. What those modules import at load
time but never call on these code paths (CUDA kernels, vision and tokenizer libraries) is
served by inert stand-ins. ``TRITON_INTERPRET=1`` is set before anything imports triton, so
SGLang's Triton allocation kernels run in Triton's interpreter on CPU tensors.

Two further adaptations, both outside SGLang's arithmetic:

- 0.5.9's paged ``alloc_extend`` / ``alloc_decode`` launch their kernel before checking that
  enough pages are free, and the kernels read ``free_pages`` past its end when the pool is
  short (harmless on a GPU, whose result is then discarded; a wild read in the interpreter).
  Every launch gets a copy of ``free_pages`` padded with zeros; the first ``len(free_pages)``
  values are the same and the allocator's own list is untouched, so results do not change.
- The server arguments: 0.5.9 reads a global ``ServerArgs``, for which a small stand-in with
  the few fields these paths read is published; 0.5.23 reads a runtime context, for which
  SGLang's own test hook (``override_server_args``) publishes a real ``ServerArgs``.

Use: ``load()`` once (the conftest does), then import ``sglang.srt...`` as usual.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import types
from typing import Any

# Imported at module level by the srt modules we load, never called on their memory paths
# (the second line: by the scheduler's module, 0.5.23, for its process title, tensor
# reshapes and HTTP pieces).
INERT_MODULES = ("sgl_kernel", "torchvision", "IPython", "sentencepiece", "compressed_tensors",
                 "gguf", "tvm_ffi",
                 "setproctitle", "einops", "aiohttp", "accelerate", "uvicorn", "fastapi")
RELEASES = ("0.5.9", "0.5.23")


def installed_version() -> str | None:
    """The installed SGLang release, or None when SGLang is not installed here."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


VERSION = installed_version()


# ----- inert stand-ins ---------------------------------------------------------------------
class _AnythingMeta(type):
    """Class-level attribute access and subscripting (``X.y``, ``X[int]``, ``X | None``)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything

    def __getitem__(cls, key: object) -> Any:
        return Anything

    def __or__(cls, other: object) -> Any:
        return Anything

    __ror__ = __or__


class Anything(metaclass=_AnythingMeta):
    """Stands for any name of an inert module: a class to subclass, a decorator, a value."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __call__(self, *args: object, **kwargs: object) -> Any:
        return Anything()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything()


class _InertModule(types.ModuleType):
    # transformers asks the version of optional packages; a very old one turns them off.
    __version__ = "0.0.0"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every module under the ``INERT_MODULES`` top-level names as an inert package."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if fullname.partition(".")[0] in INERT_MODULES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _InertModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


# ----- loading -------------------------------------------------------------------------------
_loaded = False


def unavailable_reason() -> str | None:
    """Why the reference tests cannot run in this interpreter, or None if they can."""
    if VERSION is None:
        return ("SGLang is not installed in this interpreter; build a reference venv with "
                "`bash scripts/sglang_reference.sh 0.5.23` and run "
                "`.venv-sglang-0.5.23/bin/python -m pytest tests/reference`")
    if VERSION not in RELEASES:
        return f"SGLang {VERSION} is installed; the reference tests know {', '.join(RELEASES)}"
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        return "triton was imported before TRITON_INTERPRET=1 could be set"
    return None


def load() -> None:
    """Make ``sglang.srt`` importable (idempotent); raise ImportError if it cannot be."""
    global _loaded
    if _loaded:
        return
    reason = unavailable_reason()
    if reason:
        raise ImportError(reason)
    os.environ["TRITON_INTERPRET"] = "1"
    sys.meta_path.insert(0, _InertFinder())
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations is not None
    shell = types.ModuleType("sglang")
    shell.__path__ = list(spec.submodule_search_locations)
    shell.__file__ = spec.origin
    sys.modules["sglang"] = shell
    _loaded = True
    if VERSION == "0.5.9":
        _pad_free_pages_0509()


# ----- 0.5.9: padded free_pages for the kernel launches ---------------------------------------
class _PaddedLaunch:
    """``kernel[grid](*args)`` with argument ``free_arg`` (``free_pages``) replaced by a copy
    followed by ``pad(args)`` zeros."""

    def __init__(self, kernel: Any, free_arg: int, pad: Any) -> None:
        self.kernel, self.free_arg, self.pad = kernel, free_arg, pad

    def __getitem__(self, grid: Any) -> Any:
        launch = self.kernel[grid]

        def run(*args: Any, **kwargs: Any) -> Any:
            import torch

            args = list(args)
            free = args[self.free_arg]
            padded = torch.zeros(len(free) + self.pad(args), dtype=free.dtype)
            padded[:len(free)] = free
            args[self.free_arg] = padded
            return launch(*args, **kwargs)

        return run


def _pad_free_pages_0509() -> None:
    mod = importlib.import_module("sglang.srt.mem_cache.allocator")
    # alloc_extend_kernel(pre_lens, seq_lens, last_loc, free_pages, out, bs_upper, page_size,
    # max_num_extend_tokens) reads at most one page per page of output plus one per request;
    # alloc_decode_kernel(seq_lens, last_loc, free_pages, out, bs_upper, page_size) one per
    # request.
    mod.alloc_extend_kernel = _PaddedLaunch(
        mod.alloc_extend_kernel, 3, lambda a: len(a[4]) // int(a[6]) + len(a[1]) + 2)
    mod.alloc_decode_kernel = _PaddedLaunch(mod.alloc_decode_kernel, 2, lambda a: len(a[0]) + 2)


def require() -> None:
    """In a test module, before it imports SGLang: skip the module, saying why, when SGLang
    cannot be loaded here; load it otherwise."""
    import pytest

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason, allow_module_level=True)
    load()
