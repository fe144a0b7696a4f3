"""Compact, JSON-ready encoding of a scheduler trace for the visualizer's JavaScript.

Input is ``Trace.to_dict()`` from ``pagedkv.managers`` (``meta``, columnar ``steps``,
``events``, optional ``page_tables``, ``log``). Output keeps what the four views draw:

- ``t``: the original step number of each kept sample (a real-scale run has thousands of
  steps; the views need a few hundred), delta-encoded;
- one delta-encoded integer column per step series (``new_token_ratio`` in thousandths,
  ``time_s`` in milliseconds), ``kind`` as one letter per sample;
- ``ev``: per event kind, ``[sample delta, count, ...]`` pairs (events between two samples
  are counted at the later one);
- ``pt``: the page tables as one segment per request lifetime (see :func:`encode_page_tables`);
- ``open``: the sample the visualizer opens on (:func:`opening_sample`).

:func:`decode_trace` inverts it (the JavaScript ``decodeTrace`` is its twin); tests check
that the round trip keeps every kept sample and every page id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pagedkv_widgets.hbm import hbm_layout

INT_COLUMNS = {
    "used": "tokens_used",
    "reserved": "tokens_reserved",
    "pages": "pages_used",
    "running": "num_running",
    "waiting": "num_waiting",
}
EVENT_KINDS = ("admit", "chunk", "finish", "retract", "reprefill")
KIND_LETTERS = {"prefill": "p", "decode": "d", "idle": "i"}
KIND_NAMES = {letter: kind for kind, letter in KIND_LETTERS.items()}


def delta(values: Sequence[int]) -> list[int]:
    """``[a, b, c]`` -> ``[a, b - a, c - b]`` (small numbers serialise short)."""
    arr = np.asarray(values, dtype=np.int64)
    return np.diff(arr, prepend=0).tolist() if arr.size else []


def undelta(values: Sequence[int]) -> list[int]:
    """Inverse of :func:`delta`."""
    return np.cumsum(np.asarray(values, dtype=np.int64)).tolist() if len(values) else []


def sample_steps(num_steps: int, max_samples: int) -> np.ndarray:
    """Indices of at most ``max_samples`` evenly spread steps, always the first and last."""
    if num_steps <= max_samples:
        return np.arange(num_steps)
    return np.unique(np.round(np.linspace(0, num_steps - 1, max_samples)).astype(np.int64))


def encode_events(
    events: Sequence[Sequence[Any]], steps: Sequence[int], kept: np.ndarray
) -> dict[str, list[int]]:
    """Count events per kept sample: ``{kind: [sample delta, count, ...]}``."""
    step_of_sample = np.asarray(steps, dtype=np.int64)[kept]
    out: dict[str, list[int]] = {}
    for kind in EVENT_KINDS:
        at = [int(e[0]) for e in events if e[1] == kind]
        if not at:
            continue
        bins = np.searchsorted(step_of_sample, np.asarray(at, dtype=np.int64), side="left")
        bins = np.minimum(bins, len(step_of_sample) - 1)
        where, counts = np.unique(bins, return_counts=True)
        out[kind] = np.column_stack([delta(where.tolist()), counts]).ravel().tolist()
    return out


def decode_events(encoded: dict[str, list[int]]) -> dict[str, dict[int, int]]:
    """Inverse of :func:`encode_events`: ``{kind: {sample index: count}}``."""
    out = {}
    for kind, flat in encoded.items():
        where = undelta(flat[0::2])
        out[kind] = dict(zip(where, flat[1::2], strict=True))
    return out


def _rle(values: Sequence[int]) -> list[int]:
    """Run-length encode: ``[v, count, v, count, ...]``."""
    out: list[int] = []
    for v in values:
        if out and out[-2] == v:
            out[-1] += 1
        else:
            out += [int(v), 1]
    return out


def _unrle(flat: Sequence[int]) -> list[int]:
    return [v for v, n in zip(flat[0::2], flat[1::2], strict=True) for _ in range(n)]


def encode_page_tables(tables: Sequence[Sequence[Sequence[Any]]]) -> list[list[Any]]:
    """Encode per-sample page tables as request lifetimes.

    A lifetime is a run of consecutive samples in which request ``rid`` holds pages and its
    page list only grows (true in SGLang: pages are appended by prefill chunks and decode
    and freed all at once on finish or retraction). Each lifetime becomes
    ``[rid, first sample, seq_len RLE, page ids (delta), samples at which each page appears
    (delta, relative to the first sample)]``; seq_len is stored as its first value followed
    by the run-length encoded per-sample changes.
    """
    open_: dict[Any, dict[str, Any]] = {}
    done: list[dict[str, Any]] = []
    for i, rows in enumerate(tables):
        seen = set()
        for rid, seq_len, pages in rows:
            seen.add(rid)
            life = open_.get(rid)
            if life is not None and list(pages[: len(life["pages"])]) != life["pages"]:
                done.append(open_.pop(rid))
                life = None
            if life is None:
                life = open_[rid] = {"rid": rid, "s0": i, "lens": [], "pages": [], "at": []}
            life["lens"].append(int(seq_len))
            for page in pages[len(life["pages"]) :]:
                life["pages"].append(int(page))
                life["at"].append(i - life["s0"])
        for rid in [r for r in open_ if r not in seen]:
            done.append(open_.pop(rid))
    done.extend(open_.values())
    done.sort(key=lambda life: (life["s0"], str(life["rid"])))
    return [
        [
            life["rid"],
            life["s0"],
            [life["lens"][0], *_rle(np.diff(life["lens"]).tolist())],
            delta(life["pages"]),
            delta(life["at"]),
        ]
        for life in done
    ]


def decode_page_tables(segments: Sequence[Sequence[Any]], num_samples: int) -> list[list[list]]:
    """Inverse of :func:`encode_page_tables`: per sample, ``[[rid, seq_len, pages], ...]``."""
    tables: list[list[list]] = [[] for _ in range(num_samples)]
    for rid, s0, lens, pages, at in segments:
        seq_lens = undelta([lens[0], *_unrle(lens[1:])])
        page_ids, added = undelta(pages), undelta(at)
        for k, seq_len in enumerate(seq_lens):
            held = [p for p, a in zip(page_ids, added, strict=True) if a <= k]
            tables[s0 + k].append([rid, seq_len, held])
    return tables


def encode_trace(trace: dict[str, Any], max_samples: int) -> dict[str, Any]:
    """Encode ``Trace.to_dict()`` output, keeping at most ``max_samples`` evenly spread steps."""
    steps = trace["steps"]
    kept = sample_steps(len(steps["step"]), max_samples)
    enc: dict[str, Any] = {
        "meta": dict(trace["meta"]),
        "hbm": hbm_layout(trace["meta"]),
        "n": len(steps["step"]),
        "t": delta(np.asarray(steps["step"])[kept].tolist()),
        "time": delta(np.round(np.asarray(steps["time_s"])[kept] * 1000).astype(int).tolist()),
        "ratio": delta(np.round(np.asarray(steps["new_token_ratio"])[kept] * 1000).astype(int)),
        "kind": "".join(KIND_LETTERS[steps["kind"][i]] for i in kept),
        "ev": encode_events(trace["events"], steps["step"], kept),
        "pt": None,
    }
    for short, name in INT_COLUMNS.items():
        enc[short] = delta(np.asarray(steps[name])[kept].tolist())
    if trace.get("page_tables") is not None:
        enc["pt"] = encode_page_tables([trace["page_tables"][i] for i in kept])
    enc["open"] = opening_sample(enc)
    return enc


def opening_sample(enc: dict[str, Any]) -> int:
    """Where a reader should first see the run: a few samples (a second or so of play)
    before the first retraction, when the pool is full and a row is about to be freed; in
    a run without one, the sample where the pool is fullest (in use + reserved)."""
    n = len(enc["t"])
    retracts = decode_events(enc["ev"]).get("retract")
    if retracts:
        return max(0, min(retracts) - max(3, n // 25))
    load = np.asarray(undelta(enc["used"])) + np.asarray(undelta(enc["reserved"]))
    return int(np.argmax(load)) if n else 0


def decode_trace(enc: dict[str, Any]) -> dict[str, Any]:
    """Decode :func:`encode_trace` output into plain per-sample columns (for tests, tools)."""
    out: dict[str, Any] = {
        "meta": enc["meta"],
        "step": undelta(enc["t"]),
        "time_s": [v / 1000 for v in undelta(enc["time"])],
        "new_token_ratio": [v / 1000 for v in undelta(enc["ratio"])],
        "kind": [KIND_NAMES[letter] for letter in enc["kind"]],
        "events": decode_events(enc["ev"]),
        "page_tables": None,
    }
    for short, name in INT_COLUMNS.items():
        out[name] = undelta(enc[short])
    if enc["pt"] is not None:
        out["page_tables"] = decode_page_tables(enc["pt"], len(out["step"]))
    return out
