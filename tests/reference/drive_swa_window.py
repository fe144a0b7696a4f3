"""Window-release cases: requests growing by prefill chunks and decode steps on a
sliding-window allocator, releasing the SWA slots of tokens that left their window, then
freeing their rows; run through SGLang 0.5.23's own ``free_swa_out_of_window_slots`` and
``free_kv_row_segments`` (``mem_cache/common.py``, on a real ``Req`` whose ``req.kv`` holds the
cursor) and through pagedkv's (:mod:`pagedkv.mem_cache.swa_window`).

A case: a page size, a window, pool sizes, and per request a tree-owned prefix of whole pages
(``cache_protected_len``, never freed by the request), an eviction floor, then steps:

- ``("grow", rid, n)``: ``n`` more tokens (an extend; ``n == 1``: a decode step).
- ``("release", rid, back, sharing, retain, interval)``: the window release at
  ``pre_len = len - back``, with or without prefix sharing, a ``retain_floor`` (or None) and
  an eviction interval; records the request's new cursor.
- ``("finish", rid, split)``: free the request's own part ``[cache_protected_len, len)`` as
  one range or two adjacent ones (coalesced), the SWA-released part full-side only.

Records after every step: the cursor (for releases), both pools' free-slot counts, both free
lists and the whole full->SWA mapping.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from drive_common import swa_pool_state

from pagedkv.mem_cache import swa_window as W
from pagedkv.mem_cache.allocator import SWATokenToKVPoolAllocator

PAGE_SIZES = (1, 2, 4, 16)


class PagedkvWindow:
    """pagedkv's window release over its sliding-window allocator."""

    def __init__(self, p: int, full: int, swa: int) -> None:
        self.p = p
        self.a = SWATokenToKVPoolAllocator(full, swa, p)
        self.cursor: dict[str, int] = {}
        self.meta: dict[str, tuple[int, int]] = {}

    def extend(self, pre: int, n: int, last: int) -> list[int] | None:
        out = self.a.alloc_extend([pre], [pre + n], [last], n)
        return None if out is None else out.tolist()

    def start(self, rid: str, cpl: int, floor: int) -> None:
        self.cursor[rid], self.meta[rid] = 0, (cpl, floor)

    def release(self, rid: str, row: list[int], pre_len: int, window: int, sharing: bool,
                retain: int | None, interval: int) -> int:
        cpl, floor = self.meta[rid]
        self.cursor[rid] = W.free_swa_out_of_window_slots(
            row, pre_len, self.cursor[rid], cache_protected_len=cpl, sliding_window_size=window,
            allocator=self.a, supports_prefix_sharing=sharing, retain_floor=retain,
            eviction_interval=interval, swa_evict_floor=floor)
        return self.cursor[rid]

    def finish(self, rid: str, row: list[int], ranges: list[tuple[int, int]]) -> None:
        cpl, floor = self.meta.pop(rid)
        W.free_kv_row(self.a, row, ranges, swa_evicted_seqlen=self.cursor.pop(rid),
                      swa_dead_lo=W.swa_dead_lo(cpl, self.p, floor))

    def state(self) -> dict:
        return swa_pool_state(self.a)


def run(case: dict, side_class: type) -> list[dict]:
    """Execute ``case`` on a fresh side; one record per step."""
    p, w = case["page_size"], case["window"]
    side = side_class(p, case["pool_tokens"], case["swa_tokens"])
    prefix = side.extend(0, case["prefix_pages"] * p, -1) or []  # tree-owned pages
    rows: dict[str, list[int]] = {}
    cpl: dict[str, int] = {}
    records = []
    for step in case["steps"]:
        kind, rid, out = step[0], step[1], None
        if kind == "grow":
            if rid not in rows and rid in case["requests"]:
                share, floor = case["requests"][rid]
                share = min(share, len(prefix) // p) * p
                rows[rid], cpl[rid] = list(prefix[:share]), share
                side.start(rid, share, floor)
            if rid in rows:
                row = rows[rid]
                out = side.extend(len(row), step[2], row[-1] if row else -1)
                if out is not None:
                    row += out
        elif kind == "release" and rid in rows:
            back, sharing, retain, interval = step[2:]
            out = side.release(rid, rows[rid], max(len(rows[rid]) - back, 0), w, sharing,
                               retain, interval)
        elif kind == "finish" and rid in rows:
            row, lo = rows.pop(rid), cpl.pop(rid)
            cut = lo + (len(row) - lo) // 2 if step[2] else len(row)
            side.finish(rid, row, [(lo, cut), (cut, len(row))] if cut < len(row) else [(lo, len(row))])
        records.append({"step": step, "out": out, **side.state()})
    return records


def random_case(seed: int) -> dict:
    """A seeded case: page size from ``PAGE_SIZES``, a window of 1..4 pages and a few tokens,
    a full pool of 20..60 pages and an SWA pool of 10..(full) pages, 0..2 tree-owned pages,
    up to 3 requests and 6..30 steps."""
    rng = np.random.default_rng(seed)
    p = int(rng.choice(PAGE_SIZES))
    pages = int(rng.integers(20, 61))
    requests = {f"r{i}": (int(rng.integers(0, 3)), int(rng.integers(0, 3 * p)) if rng.random() < 0.2 else 0)
                for i in range(int(rng.integers(1, 4)))}
    steps: list[tuple[Any, ...]] = []
    for _ in range(int(rng.integers(6, 31))):
        rid = f"r{int(rng.integers(len(requests)))}"
        roll = rng.random()
        if roll < 0.45:
            steps.append(("grow", rid, 1 if rng.random() < 0.6 else int(rng.integers(1, 4 * p + 3))))
        elif roll < 0.9:
            retain = int(rng.integers(0, 8 * p)) if rng.random() < 0.2 else None
            steps.append(("release", rid, int(rng.integers(0, 3)), bool(rng.random() < 0.5),
                          retain, int(rng.integers(1, 4))))
        else:
            steps.append(("finish", rid, bool(rng.random() < 0.5)))
    return {"page_size": p, "window": int(rng.integers(1, 4 * p + 3)), "pool_tokens": pages * p,
            "swa_tokens": int(rng.integers(10, pages + 1)) * p,
            "prefix_pages": int(rng.integers(0, 3)), "requests": requests, "steps": steps}
