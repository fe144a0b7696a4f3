"""A sliding-window hybrid's SWA pool in the page record, compact for a book page.

:class:`pagedkv.managers.page_recorder.PageRecorder` keeps the SWA pool's owner changes
(``record["swa"]``: ``step``, ``page``, ``owner``; at most one change per page a step). The
encoding (``"swa"`` inside :func:`pagedkv_widgets.page_encoding.encode_pages`'s output, absent
for one pool) keeps them as three columns sorted by step, then owner, then page (a step's
frees and a request's new pages sit together, which compresses best of the layouts tried):

``{"step": [step deltas], "page": [page ids], "owner": [owners]}``

:func:`decode_swa` inverts it and :func:`swa_owners_at` reads one step (the JavaScript
``decodeSwa`` / ``trackAt`` are their twins).
"""

from __future__ import annotations

import numpy as np


def encode_swa(log: dict[str, list[int]]) -> dict[str, list[int]]:
    """Encode ``{"step", "page", "owner"}`` (step-ordered owner changes) as above."""
    step, page, owner = (np.asarray(log[k], dtype=np.int64) for k in ("step", "page", "owner"))
    order = np.lexsort((page, owner, step))
    return {"step": np.diff(step[order], prepend=0).tolist() if len(order) else [],
            "page": page[order].tolist(), "owner": owner[order].tolist()}


def decode_swa(enc: dict[str, list[int]]) -> dict[str, list[int]]:
    """Inverse of :func:`encode_swa`: ``{"step", "page", "owner"}`` sorted by step, then
    owner, then page."""
    return {"step": np.cumsum(enc["step"], dtype=np.int64).tolist(),
            "page": list(enc["page"]), "owner": list(enc["owner"])}


def swa_owners_at(changes: dict[str, list[int]], num_swa_pages: int, step: int) -> np.ndarray:
    """Every SWA page's owner after ``step`` (int64 ``[num_swa_pages + 1]``; -1: free)."""
    owners = np.full(num_swa_pages + 1, -1, dtype=np.int64)
    n = int(np.searchsorted(changes["step"], step, side="right"))
    owners[np.asarray(changes["page"][:n], dtype=np.int64)] = changes["owner"][:n]
    return owners


