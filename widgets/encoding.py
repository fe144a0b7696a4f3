"""Compact, JSON-ready encoding of a scheduler run for the visualizer's JavaScript.

Input is ``Trace.to_dict()`` from ``pagedkv.managers`` (``meta``, columnar ``steps``,
``events``, optional ``page_events``). Output keeps every step (the step control moves one
real scheduler step), each column delta-encoded so that a column that moves by the same
amount every decode step compresses to almost nothing:

- ``n``: steps; ``kind``: one letter per step (``p`` prefill, ``d`` decode, ``i`` idle);
- one integer column per step series of :data:`INT_COLUMNS` (tokens, requests),
  ``time`` in milliseconds and ``ratio`` (``new_token_ratio``) in thousandths;
- ``ev``: per event kind, ``[step deltas, rids]``;
- ``pages``: the page record (:mod:`pagedkv_widgets.page_encoding`), or None;
- ``hbm``: the HBM bar's constant part (:func:`pagedkv_widgets.hbm.hbm_layout`);
- ``open``: the step the visualizer opens on (:func:`opening_step`).

:func:`decode_run` inverts it (the JavaScript ``decodeRun`` is its twin); tests check that
the round trip keeps every step of every column, every event and every page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pagedkv.managers.trace import EVENT_KINDS, Event
from pagedkv_widgets.hbm import hbm_layout
from pagedkv_widgets.page_decoding import decode_pages
from pagedkv_widgets.page_encoding import encode_pages

INT_COLUMNS = {
    "used": "tokens_used",
    "reserved": "tokens_reserved",
    "free": "tokens_free",
    "evictable": "tokens_evictable",
    "protected": "tokens_protected",
    "running": "num_running",
    "waiting": "num_waiting",
}
KIND_LETTERS = {"prefill": "p", "decode": "d", "idle": "i"}
KIND_NAMES = {letter: kind for kind, letter in KIND_LETTERS.items()}


def delta(values: Sequence[int] | np.ndarray) -> list[int]:
    """``[a, b, c]`` -> ``[a, b - a, c - b]`` (small numbers serialise short)."""
    arr = np.asarray(values, dtype=np.int64)
    return np.diff(arr, prepend=0).tolist() if arr.size else []


def undelta(values: Sequence[int]) -> list[int]:
    """Inverse of :func:`delta`."""
    return np.cumsum(np.asarray(values, dtype=np.int64)).tolist() if len(values) else []


def encode_events(events: Sequence[Sequence[Any]]) -> dict[str, list[list[int]]]:
    """``{kind: [step deltas, rids]}`` for the kinds of :data:`EVENT_KINDS` that occur;
    ``events`` as a trace's ``to_dict()`` lists them (``[step, kind, rid, extra]``)."""
    typed = [Event(*e) for e in events]
    out: dict[str, list[list[int]]] = {}
    for kind in EVENT_KINDS:
        hits = [(int(e.step), int(e.rid)) for e in typed if e.kind == kind]
        if hits:
            out[kind] = [delta([s for s, _ in hits]), [r for _, r in hits]]
    return out


def decode_events(encoded: dict[str, list[list[int]]]) -> dict[str, list[tuple[int, int]]]:
    """Inverse of :func:`encode_events`: ``{kind: [(step, rid), ...]}`` in step order."""
    return {kind: list(zip(undelta(steps), rids, strict=True))
            for kind, (steps, rids) in encoded.items()}


def encode_run(trace: dict[str, Any]) -> dict[str, Any]:
    """Encode ``Trace.to_dict()`` output, every step kept (see the module docstring).

    Raises ``KeyError`` if the trace lacks a column of :data:`INT_COLUMNS`.
    """
    steps = trace["steps"]
    enc: dict[str, Any] = {
        "meta": dict(trace["meta"]),
        "hbm": hbm_layout(trace["meta"]),
        "n": len(steps["step"]),
        "kind": "".join(KIND_LETTERS[k] for k in steps["kind"]),
        "time": delta(np.round(np.asarray(steps["time_s"]) * 1000).astype(np.int64)),
        "ratio": delta(np.round(np.asarray(steps["new_token_ratio"]) * 1000).astype(np.int64)),
        "ev": encode_events(trace["events"]),
    }
    for short, name in INT_COLUMNS.items():
        enc[short] = delta(np.round(np.asarray(steps[name])).astype(np.int64))
    page_events = trace.get("page_events")
    enc["pages"] = None if page_events is None else encode_pages(
        page_events, steps["kind"], trace["meta"]["page_size"])
    enc["open"] = opening_step(enc)
    return enc


def opening_step(enc: dict[str, Any]) -> int:
    """Where a reader should first see the run: a page's worth of decode steps before the
    first retraction (``page_size`` steps, at least 8), when the pool is full and a row is
    about to be freed; in a run without one, the step where in use + reserved peaks."""
    retracts = enc["ev"].get("retract")
    if retracts:
        return max(0, retracts[0][0] - max(8, enc["meta"]["page_size"]))
    load = np.asarray(undelta(enc["used"])) + np.asarray(undelta(enc["reserved"]))
    return int(np.argmax(load)) if load.size else 0


def decode_run(enc: dict[str, Any]) -> dict[str, Any]:
    """Decode :func:`encode_run` output into plain per-step columns (for tests, chapters):
    ``meta``, ``step``, ``kind``, ``time_s``, ``new_token_ratio``, the trace names of
    :data:`INT_COLUMNS`, ``events`` (``{kind: [(step, rid)]}``) and ``pages``
    (:func:`pagedkv_widgets.page_decoding.decode_pages`, or None)."""
    n = enc["n"]
    out: dict[str, Any] = {
        "meta": enc["meta"],
        "step": list(range(n)),
        "kind": [KIND_NAMES[letter] for letter in enc["kind"]],
        "time_s": [v / 1000 for v in undelta(enc["time"])],
        "new_token_ratio": [v / 1000 for v in undelta(enc["ratio"])],
        "events": decode_events(enc["ev"]),
        "open": enc["open"],
    }
    for short, name in INT_COLUMNS.items():
        out[name] = undelta(enc[short])
    out["pages"] = None if enc["pages"] is None else decode_pages(
        enc["pages"], enc["kind"], enc["meta"]["page_size"], enc["meta"]["num_pages"])
    return out


def count_events(run: dict[str, Any], kind: str) -> int:
    """Events of ``kind`` in an encoded (or ``{"error": ...}``: 0) run."""
    return len(run.get("ev", {}).get(kind, [[], []])[1])
