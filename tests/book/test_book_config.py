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
