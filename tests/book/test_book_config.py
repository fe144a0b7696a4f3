"""The book's wiring: one repository address, install cells that agree with it, a complete TOC."""

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def test_colab_launch_buttons_configured():
    assert CONFIG["repository"]["url"].startswith("https://github.com/")
    assert CONFIG["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def test_every_chapter_installs_from_the_configured_repository():
    url = CONFIG["repository"]["url"]
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        first = "".join(json.loads(path.read_text())["cells"][0]["source"])
        assert '"google.colab" in sys.modules' in first, path.name
        assert re.search(rf'%pip install -q "pagedkv @ git\+{re.escape(url)}"', first), path.name


def test_notebooks_are_committed_without_outputs():
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            assert not cell.get("outputs"), f"{path.name} has committed outputs"


def test_every_chapter_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    for path in NOTEBOOKS:
        assert f"book/{path.stem}" in toc, f"{path.name} missing from _toc.yml"


def test_notebooks_are_valid_for_their_nbformat():
    """nbformat 4.5 requires a unique id on every cell; a missing one made the build warn
    (MissingIDFieldWarning: chapter 3 had three such cells)."""
    import warnings

    import nbformat

    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            nbformat.validate(nbformat.from_dict(json.loads(path.read_text())))
        if (nb["nbformat"], nb["nbformat_minor"]) >= (4, 5):
            ids = [cell.get("id") for cell in nb["cells"]]
            assert None not in ids, f"{path.name}: cell {ids.index(None)} has no id"
            assert len(set(ids)) == len(ids), f"{path.name}: duplicate cell ids"


HIDDEN = {"remove-input", "remove-cell"}  # the built page shows neither the code nor a toggle


def _names(source: str) -> tuple[set[str], set[str]]:
    """The names a cell's code binds and the names it reads (``ast``; magics: nothing)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:  # the Colab install cell's %pip
        return set(), set()
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, read


def test_shown_code_uses_no_name_only_removed_code_defines():
    """A reader of the built page sees a shown cell's code (hide-input: behind a toggle) but not
    a removed one's: a shown cell that reads a name only a removed cell binds reads as code
    that cannot run (chapter 1 used `long_context`, bound in a removed cell; chapters 3, 4, 6
    and 9 had six more). Every name a shown cell reads must be bound in that cell or a shown one
    before it, or be bound by no removed cell at all (builtins, IPython's `display`)."""
    found = []
    for path in NOTEBOOKS:
        shown: set[str] = set()
        removed: set[str] = set()
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] != "code":
                continue
            bound, read = _names("".join(cell["source"]))
            if HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
                removed |= bound
                continue
            missing = sorted((read - bound) & removed - shown)
            if missing:
                found.append(f"{path.name} cell {index}: {', '.join(missing)}")
            shown |= bound
    assert not found, found
