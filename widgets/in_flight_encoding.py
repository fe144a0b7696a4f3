"""The overlap loop's half-done work in the page record, compact for a book page.

:class:`pagedkv.managers.in_flight_recorder.InFlightRecorder` lists, per step, the slots
allocated ahead where they differ from the rule (after a decode step of the overlap loop,
every row's last slot; after any other step, and in the normal loop, none) and the requests
finished but not yet seen. The encoding (inside :func:`pagedkv_widgets.page_encoding.encode_pages`'s):

- ``loop``: ``"overlap"`` or ``"normal"``;
- ``ahead``: ``[step (delta from the previous entry's), rid, tokens, ...]``;
- ``unseen``: ``[step (delta), rid, ...]``.

:func:`ahead_at` and :func:`unseen_at` read a step from :func:`pagedkv_widgets.page_decoding.decode_pages`
output (the JavaScript ``rowsAt`` is their twin).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _flat_by_step(columns: dict[str, list[int]], names: tuple[str, ...]) -> list[int]:
    """``[step (delta from the previous entry's), *values, ...]`` of step-ordered columns."""
    steps = columns["step"]
    return [v for i, s in enumerate(steps)
            for v in (s - (steps[i - 1] if i else 0), *(columns[n][i] for n in names))]


def _unflat(flat: Sequence[int], width: int) -> list[tuple[int, ...]]:
    """Inverse of :func:`_flat_by_step`: ``[(step, *values)]``."""
    out, step = [], 0
    for i in range(0, len(flat), width + 1):
        step += flat[i]
        out.append((step, *flat[i + 1:i + width + 1]))
    return out


def encode_in_flight(record: dict[str, Any]) -> dict[str, Any]:
    """``{"loop", "ahead", "unseen"}`` of a ``PageRecorder.to_dict()`` (a record without
    them, as from the normal loop's older runs, encodes as the normal loop's)."""
    return {"loop": "overlap" if record.get("overlap") else "normal",
            "ahead": _flat_by_step(record.get("ahead", {"step": []}), ("rid", "tokens")),
            "unseen": _flat_by_step(record.get("unseen", {"step": []}), ("rid",))}


def decode_in_flight(enc: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`encode_in_flight`: ``{"loop", "ahead": [(step, rid, tokens)],
    "unseen": [(step, rid)]}``."""
    return {"loop": enc.get("loop", "normal"), "ahead": _unflat(enc.get("ahead", []), 2),
            "unseen": _unflat(enc.get("unseen", []), 1)}


def ahead_at(pages: dict[str, Any], step: int) -> dict[int, int]:
    """``{rid: tokens}``: the requests whose last ``tokens`` slots are allocated ahead after
    ``step`` (the batch in flight has not written their KV), from ``decode_pages`` output:
    the rule (an overlap loop's decode step: every row's last slot) and the recorded
    exceptions (0: none)."""
    decoded = pages["decoded"]
    is_decode = bool(decoded[step] - (decoded[step - 1] if step else 0))
    out: dict[int, int] = {}
    if pages["loop"] == "overlap" and is_decode:
        out = {life.rid: 1 for life in pages["lifetimes"]
               if life.start <= step and (life.end is None or step < life.end)}
    for s, rid, tokens in pages["ahead"]:
        if s == step:
            out[rid] = tokens
    return {rid: n for rid, n in out.items() if n}


def unseen_at(pages: dict[str, Any], step: int) -> list[int]:
    """Requests finished but not yet seen after ``step`` (their KV is freed a step later)."""
    return [rid for s, rid in pages["unseen"] if s == step]
