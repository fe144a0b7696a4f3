"""Visualizer runs kept on disk, keyed by everything they depend on.

A chapter's visualizer holds up to 90 simulated runs, and chapters share some (chapter 5's
retraction runs are among chapter 7's). :class:`RunCache` keeps each encoded run in a file
named by a SHA-256 of

- the source of every module of ``pagedkv`` and ``pagedkv_widgets`` (any change to the
  simulator, the presets or the encoding makes every key new: nothing stale is read);
- the run's arguments, as the runner spells them (part, settings, page record, workload);
- the ``SGLANG_*`` environment variables the scheduler reads
  (:data:`pagedkv.managers.config.ENV_VARS`).

So a chapter reuses what an earlier chapter of the same build simulated, and a rebuild with
the package unchanged simulates nothing. Where: ``$PAGEDKV_RUN_CACHE``, else
``$PAGEDKV_CACHE/runs``, else ``~/.cache/pagedkv/runs``; ``PAGEDKV_RUN_CACHE=off`` turns it
off. Each source version has its own folder; folders of versions not used for
:data:`KEEP_DAYS` days are removed when a new version's folder is made.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any

import pagedkv
from pagedkv.managers.config import ENV_VARS

KEEP_DAYS = 7


def digest_of(roots: dict[str, Path]) -> str:
    """SHA-256 (hex, 16 digits) of every ``.py``, ``.json`` and ``.jsonl`` file under each
    root (named ``name/relative path``, then the bytes, in name and path order)."""
    digest = hashlib.sha256()
    for name, root in sorted(roots.items()):
        files = sorted(p for ext in ("py", "json", "jsonl") for p in root.rglob(f"*.{ext}"))
        for path in files:
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@cache
def source_digest() -> str:
    """:func:`digest_of` the ``pagedkv`` and ``pagedkv_widgets`` packages (read once per
    process)."""
    return digest_of({"pagedkv": Path(pagedkv.__file__).resolve().parent,
                      "pagedkv_widgets": Path(__file__).resolve().parent})  # this module's package


def default_folder() -> Path | None:
    """Where runs are kept (see the module docstring); None when turned off."""
    chosen = os.environ.get("PAGEDKV_RUN_CACHE")
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "0", "off", "no", "false") else Path(chosen)
    return Path(os.environ.get("PAGEDKV_CACHE", Path.home() / ".cache" / "pagedkv")) / "runs"


class RunCache:
    """Encoded runs in ``folder/<source digest>/<key>.json.gz``.

    Args:
        folder: the cache's root (made on first write).
        digest: the source version (default: :func:`source_digest`).

    Reading a missing or unreadable file gives None (the run is simulated again); a write
    goes to a temporary file first and is renamed into place, so a reader never sees half
    a run.
    """

    def __init__(self, folder: Path, digest: str | None = None) -> None:
        self.folder = Path(folder) / (digest or source_digest())

    @staticmethod
    def key(args: dict[str, Any]) -> str:
        """The file name for a run with ``args`` (JSON-able) under this source version."""
        env = {var: os.environ.get(var) for var in sorted(ENV_VARS)}
        text = json.dumps({"args": args, "env": env}, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def get(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The run kept for ``args``, or None."""
        path = self.folder / f"{self.key(args)}.json.gz"
        try:
            return json.loads(gzip.decompress(path.read_bytes()))
        except (OSError, ValueError, EOFError):
            return None

    def put(self, args: dict[str, Any], run: dict[str, Any]) -> None:
        """Keep ``run`` for ``args``. A folder that cannot be written is skipped silently:
        the cache only saves time, and the run is in hand."""
        try:
            if not self.folder.is_dir():
                self.folder.mkdir(parents=True, exist_ok=True)
                self._prune()
            data = gzip.compress(json.dumps(run, separators=(",", ":")).encode(), 1, mtime=0)
            with tempfile.NamedTemporaryFile(dir=self.folder, suffix=".tmp", delete=False) as f:
                f.write(data)
            os.replace(f.name, self.folder / f"{self.key(args)}.json.gz")
        except OSError:
            return

    def _prune(self) -> None:
        """Remove other source versions' folders not written for :data:`KEEP_DAYS` days."""
        old = time.time() - KEEP_DAYS * 86400
        for other in self.folder.parent.iterdir():
            if other != self.folder and other.is_dir() and other.stat().st_mtime < old:
                shutil.rmtree(other, ignore_errors=True)
