"""The package's import graph, read from the source with ``ast``: every ``pagedkv`` import
that runs (module level or inside a function; not one under ``if TYPE_CHECKING:``, which is
for annotations only, as SGLang's own) goes down or sideways in the layer order of
``CONTRIBUTING.md``, never up, and the module-level imports have no circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "pagedkv"

# Bottom-up: a module may import its own layer and those before it. The package's
# ``__init__`` and ``__main__`` sit above everything (they re-export and start the command).
LAYERS: list[tuple[str, ...]] = [
    ("errors", "lazy_exports", "release_behaviours", "releases", "units"),
    ("configs", "presets", "gpus", "weights", "server_args", "dsa_indexer", "kv_cache_configurator",
     "hybrid_pools", "pool_plan", "sizing_checks", "sizing"),
    ("workloads",),
    ("mem_cache",),
    ("layers",),
    ("models",),
    ("model_executor",),
    ("managers",),
    ("metrics",),
    ("entrypoints",),
    ("lessons",),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    """``pagedkv/managers/req.py`` -> ``pagedkv.managers.req`` (a package is its folder)."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_nodes(body: list[ast.stmt], top_level_only: bool) -> list[ast.AST]:
    """The statements of ``body`` that run, with what they contain unless ``top_level_only``
    (``if TYPE_CHECKING:`` blocks left out)."""
    nodes: list[ast.AST] = []
    for stmt in body:
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) in ("TYPE_CHECKING",
                                                                    "typing.TYPE_CHECKING"):
            nodes.extend(runtime_nodes(stmt.orelse, top_level_only))
        elif top_level_only:
            nodes.append(stmt)
        else:
            nodes.append(stmt)
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.stmt):
                    nodes.extend(runtime_nodes([child], top_level_only))
                else:
                    nodes.extend(ast.walk(child))
    return nodes


def imports(path: Path, top_level_only: bool) -> set[str]:
    """The ``pagedkv`` modules ``path`` imports when it runs (``from pagedkv.x import y``
    counts ``pagedkv.x``)."""
    nodes = runtime_nodes(ast.parse(path.read_text()).body, top_level_only)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "pagedkv" or name.startswith("pagedkv.")}


def layer(module: str) -> int | None:
    """The layer of ``pagedkv.<first part>...``; None for the package's ``__init__`` and
    ``__main__`` (importing bare ``pagedkv`` is the sizing layer's re-exports: see
    :func:`dependency_layer`)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] == "__main__":
        return None
    if parts[1] not in RANK:
        raise AssertionError(f"{module}: its top-level name {parts[1]!r} has no layer; add it "
                             "to LAYERS (and to CONTRIBUTING.md's tree)")
    return RANK[parts[1]]


def dependency_layer(module: str) -> int:
    """The layer an import of ``module`` reaches (bare ``pagedkv``: its eager re-exports, the
    sizing layer; ``pagedkv.Engine`` loads only on first use)."""
    found = layer(module)
    return RANK["sizing"] if found is None else found


SOURCES = sorted(ROOT.rglob("*.py"))


def test_every_top_level_module_has_a_layer() -> None:
    for path in SOURCES:
        layer(module_name(path))


def test_no_import_goes_up() -> None:
    upward = []
    for path in SOURCES:
        mod = module_name(path)
        own = layer(mod)
        if own is None:
            continue
        for dep in imports(path, top_level_only=False):
            if dependency_layer(dep) > own:
                upward.append(f"{mod} -> {dep}")
    assert upward == []


def test_module_level_imports_have_no_circle() -> None:
    graph = {module_name(p): imports(p, top_level_only=True) for p in SOURCES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            if dep not in graph:
                continue
            if state.get(dep) == 1:
                pytest.fail("import circle: " + " -> ".join([*path[path.index(dep):], dep]))
            if dep not in state:
                visit(dep, [*path, dep])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
