"""Point the book at a fork: set repository.url in _config.yml and every chapter's install cell.

Usage: python scripts/set_repository.py https://github.com/you/pagedkv
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
URL_LINE = re.compile(r"^(  url: )(\S+)$", re.MULTILINE)


def current_url() -> str:
    """The repository address named in _config.yml."""
    match = URL_LINE.search((ROOT / "_config.yml").read_text())
    if not match:
        raise SystemExit("_config.yml has no 'repository: url:' line")
    return match.group(2)


def main(new_url: str) -> None:
    old = current_url()
    config = ROOT / "_config.yml"
    config.write_text(URL_LINE.sub(rf"\g<1>{new_url}", config.read_text()))
    for notebook in sorted((ROOT / "book").glob("*.ipynb")):
        text = notebook.read_text()
        if old in text:
            notebook.write_text(text.replace(f"git+{old}", f"git+{new_url}"))
            print(f"updated {notebook.relative_to(ROOT)}")
    print(f"repository.url: {old} -> {new_url}")


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].startswith("https://"):
        raise SystemExit(__doc__)
    main(sys.argv[1].rstrip("/"))
