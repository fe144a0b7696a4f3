"""A linear-attention hybrid's state slots in the page record, compact for a book page, and
the numbers chapter 9 quotes about them.

:class:`pagedkv.managers.state_slot_recorder.StateSlotLog` keeps the state pool's four parts
(``live``, ``track``, ``tree``, ``free`` slots) after each step whose counts changed. The
encoding (``"state_slots"`` inside :func:`pagedkv_widgets.page_encoding.encode_pages`'s
output, absent without state slots) keeps the steps as deltas and drops ``free`` (the pool
minus the rest):

``{"slots": pool size, "step": [step deltas], "live": [...], "track": [...], "tree": [...]}``

:func:`decode_state_slots` inverts it and :func:`slots_at` reads one step (the JavaScript
``decodeStateSlots`` / ``slotsAt`` are their twins).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pagedkv.errors import bad_value

HELD = ("live", "track", "tree")  # the parts besides "free", in the bar's order


def encode_state_slots(log: dict[str, Any]) -> dict[str, Any]:
    """Encode :meth:`StateSlotLog.to_dict`'s ``{"slots", "step", "live", "track", "tree",
    "free"}`` as above."""
    return {"slots": log["slots"], "step": np.diff(log["step"], prepend=0).tolist(),
            **{k: list(log[k]) for k in HELD}}


def decode_state_slots(enc: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`encode_state_slots` (``free`` computed back)."""
    held = np.array([enc[k] for k in HELD], dtype=np.int64).reshape(len(HELD), -1)
    return {"slots": enc["slots"], "step": np.cumsum(enc["step"], dtype=np.int64).tolist(),
            **{k: held[i].tolist() for i, k in enumerate(HELD)},
            "free": (enc["slots"] - held.sum(axis=0)).tolist()}


def slots_at(series: dict[str, Any], step: int) -> dict[str, int]:
    """``{"live", "track", "tree", "free"}`` slots after ``step`` (before the first
    recorded step: all free)."""
    i = int(np.searchsorted(series["step"], step, side="right")) - 1
    if i < 0:
        return {"live": 0, "track": 0, "tree": 0, "free": series["slots"]}
    return {k: int(series[k][i]) for k in (*HELD, "free")}


def per_step(series: dict[str, Any], steps: int) -> dict[str, np.ndarray]:
    """Every part after each of ``steps`` steps (int64 ``[steps]`` each)."""
    at = np.searchsorted(series["step"], np.arange(steps), side="right") - 1
    out = {}
    for k in (*HELD, "free"):
        col = np.asarray(series[k], dtype=np.int64)
        out[k] = np.where(at >= 0, col[np.maximum(at, 0)] if len(col) else 0,
                          series["slots"] if k == "free" else 0)
    return out


@dataclass(frozen=True)
class StateFacts:
    """A linear-attention hybrid's run: its KV pool and its state slots (counts of slots,
    bytes per slot)."""

    kv_tokens: int
    num_state_slots: int
    state_bytes: int
    steps: int
    live_peak: int  # requests holding a state slot at most, over the run
    live_peak_step: int  # the first step they do
    track_at_peak: int  # track slots held then
    tree_end: int  # states the tree keeps when the run ends
    tree_peak: int
    kv_peak_pages: int  # KV pages in use at most (the trace's tokens_used, in pages)
    num_pages: int


def state_facts(run: dict[str, Any]) -> StateFacts:
    """:class:`StateFacts` of a decoded run (:func:`pagedkv_widgets.encoding.decode_run`)
    with a page record carrying state slots.

    Raises:
        ConfigError: the run has no state slots in its page record.
    """
    pages, meta = run["pages"], run["meta"]
    if pages is None or "state_slots" not in pages:
        raise bad_value("run", meta.get("model"), "a linear-attention hybrid's run with its page record")
    n = len(run["step"])
    s = per_step(pages["state_slots"], n)
    peak = int(np.argmax(s["live"]))
    used = np.asarray(run["tokens_used"], dtype=np.int64)
    return StateFacts(
        kv_tokens=meta["max_total_num_tokens"], num_state_slots=meta["mamba_slots"],
        state_bytes=meta["state_bytes"], steps=n, live_peak=int(s["live"][peak]),
        live_peak_step=peak, track_at_peak=int(s["track"][peak]), tree_end=int(s["tree"][-1]),
        tree_peak=int(s["tree"].max()), kv_peak_pages=-(-int(used.max()) // meta["page_size"]),
        num_pages=meta["num_pages"])
