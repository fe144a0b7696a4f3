"""``pagedkv.managers`` and ``pagedkv.entrypoints`` export their public names lazily (PEP 562),
and every exported name resolves to the object its module defines."""

import importlib

import pytest


@pytest.mark.parametrize("package", ["pagedkv.managers", "pagedkv.entrypoints"])
def test_package_exports_resolve_lazily(package: str) -> None:
    """Every name in ``__all__`` loads from its submodule on first access."""
    pkg = importlib.import_module(package)
    assert set(pkg._EXPORTS) == set(pkg.__all__)
    for name in pkg.__all__:
        assert getattr(pkg, name) is getattr(importlib.import_module(pkg._EXPORTS[name]), name)
    assert set(pkg.__all__) <= set(dir(pkg))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pkg.nope  # noqa: B018
