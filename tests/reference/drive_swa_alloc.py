"""Sliding-window allocator cases: one scripted sequence of allocations, window releases and
frees, run on SGLang's ``SWATokenToKVPoolAllocator`` and on pagedkv's, recording what each
hands out, both free lists and the full->SWA mapping after every step.

As :mod:`drive_alloc` (a case is plain data, one executor, an adapter per side), with the
calls SGLang 0.5.23's scheduler and caches make on a sliding-window hybrid:

- ``("cache", name, pages)``: a cached prefix (an extend of ``pages * p`` tokens that is never
  freed; SGLang's SWA allocator has no ``alloc`` for page size > 1). New requests may start
  on its first pages (whole pages: a prefix hit).
- ``("extend", [(rid, n, share), ...])``: one prefill batch (``alloc`` for page size 1, as
  ``alloc_token_slots`` calls it; ``alloc_extend`` otherwise). Out of memory in either pool is
  part of the comparison.
- ``("decode", [rid, ...])``: one slot each, only when ``available_size()`` (the smaller pool)
  covers the step's need, as ``check_decode_mem`` makes sure first; otherwise recorded as
  ``"short"`` on both sides.
- ``("window", [(rid, keep), ...], group, how)``: the window release of
  ``free_swa_out_of_window_slots``: the request's own tokens before ``len - keep``, in whole
  pages from its release cursor, lose their SWA slots; ``how``: ``"segment"``
  (``free_swa_segment``, what 0.5.23 calls) or ``"swa"`` (``free_swa``); inside one free group
  (as ``maybe_evict_swa``) or not.
- ``("free", [(rid, how), ...], group)``: a request's release, as ``free_kv_row_segments``:
  the window-released part with ``free_full_segment`` (``how="segment"``) or ``free_full``,
  the rest with ``free_segment`` or ``free`` (``"split"``: two ``free`` calls at a page
  boundary).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from drive_common import (
    free_group,
    random_prefill,
    run_extend,
    swa_pool_state,
    take_decode,
)

from pagedkv.mem_cache.allocator import SWATokenToKVPoolAllocator

PAGE_SIZES = (1, 2, 4, 16, 64)


class PagedkvSWAPool:
    """pagedkv's ``SWATokenToKVPoolAllocator`` behind the executor's interface."""

    def __init__(self, page_size: int, size: int, size_swa: int, kernels: str) -> None:
        self.a = SWATokenToKVPoolAllocator(size, size_swa, page_size)

    @staticmethod
    def _out(t: Any) -> list[int] | None:
        return None if t is None else t.tolist()

    def extend(self, pre: list[int], seq: list[int], last: list[int]) -> list[int] | None:
        return self._out(self.a.alloc_extend(pre, seq, last, sum(seq) - sum(pre)))

    def decode(self, seq: list[int], last: list[int]) -> list[int] | None:
        return self._out(self.a.alloc_decode(seq, last))

    def call(self, method: str, slots: list[int], start: int) -> None:
        if method.endswith("segment"):
            getattr(self.a, method)(slots, start)
        else:
            getattr(self.a, method)(slots)

    def group(self, begin: bool) -> None:
        (self.a.free_group_begin if begin else self.a.free_group_end)()

    def available(self) -> int:
        return self.a.available_size()

    def state(self) -> dict:
        return swa_pool_state(self.a)


def _decode_need(lens: list[int], p: int) -> int:
    """Slots the next decode takes (``new_tokens_required_next_decode``): a page for each
    request whose next token starts one."""
    return sum(p for n in lens if n % p == 0)


def run(case: dict, pool_class: type) -> list[dict]:
    """Execute ``case`` on a fresh pool; one record per step."""
    p = case["page_size"]
    pool = pool_class(p, case["pool_tokens"], case["swa_tokens"], case.get("kernels", "torch"))
    rows: dict[str, list[int]] = {}  # request -> its row (shared prefix + own slots)
    start: dict[str, int] = {}  # request -> where its own slots begin (page aligned)
    cursor: dict[str, int] = {}  # request -> end of its window-released part
    cached: dict[str, list[int]] = {}
    records = []
    for step in case["steps"]:
        kind, out = step[0], None
        if kind == "cache":
            out = pool.extend([0], [step[2] * p], [-1])
            if out is not None:
                cached[step[1]] = out
        elif kind == "extend":
            out, batch, new = run_extend(pool, step[1], rows, cached, p)
            start.update(new)
            cursor.update(new)
            step = ("extend", batch)
        elif kind == "decode":
            rids = [r for r in step[1] if r in rows]
            if rids and pool.available() < _decode_need([len(rows[r]) for r in rids], p):
                out = "short"
            elif rids:
                out = pool.decode([len(rows[r]) + 1 for r in rids], [rows[r][-1] for r in rids])
                take_decode(rids, out, rows)
            step = ("decode", rids)
        elif kind == "window":
            wins = [(r, keep) for r, keep in step[1] if r in rows]
            with free_group(pool, step[2]):
                for rid, keep in wins:
                    new = max(cursor[rid], (len(rows[rid]) - keep) // p * p)
                    if new > cursor[rid]:
                        method = "free_swa_segment" if step[3] == "segment" else "free_swa"
                        pool.call(method, rows[rid][cursor[rid]:new], cursor[rid])
                        cursor[rid] = new
            step = ("window", wins, step[2], step[3])
        elif kind == "free":
            frees = [(r, how) for r, how in step[1] if r in rows]
            with free_group(pool, step[2]):
                for rid, how in frees:
                    row, lo, ev = rows.pop(rid), start.pop(rid), cursor.pop(rid)
                    segment = how == "segment"
                    if ev > lo:
                        pool.call("free_full_segment" if segment else "free_full", row[lo:ev], lo)
                    if how == "split":  # two calls at a page boundary
                        cut = min(ev + -(-(len(row) - ev) // 2 // p) * p, len(row))
                        for a, b in ((ev, cut), (cut, len(row))):
                            if b > a:
                                pool.call("free", row[a:b], a)
                    elif len(row) > ev:
                        pool.call("free_segment" if segment else "free", row[ev:], ev)
            step = ("free", frees, step[2])
        records.append({"step": step, "out": out, **pool.state()})
    return records


def random_case(seed: int) -> dict:
    """A seeded case: a page size from ``PAGE_SIZES``, a full pool of 3..40 pages, an SWA
    pool of 2..(full + 4) pages, cached prefixes, then 4..14 random steps over up to 8
    requests."""
    rng = np.random.default_rng(seed)
    p = int(rng.choice(PAGE_SIZES))
    pages = int(rng.integers(3, 41))
    swa_pages = int(rng.integers(2, pages + 5))
    steps: list[tuple[Any, ...]] = [("cache", f"c{i}", int(rng.integers(1, 4)))
                                    for i in range(int(rng.integers(0, 3)))]
    cache_pages = {s[1]: s[2] for s in steps}
    live: list[str] = []
    for n in range(int(rng.integers(4, 15))):
        roll = rng.random()
        if roll < 0.35 or not live:
            steps.append(("extend", random_prefill(rng, live, cache_pages, n, p)))
        elif roll < 0.6:
            steps.append(("decode", rng.permutation(live)[:int(rng.integers(1, 5))].tolist()))
        elif roll < 0.8:
            wins = [(r, int(rng.integers(0, 2 * p + 2))) for r in
                    rng.permutation(live)[:int(rng.integers(1, 4))].tolist()]
            steps.append(("window", wins, bool(rng.random() < 0.6),
                          str(rng.choice(["segment", "swa"]))))
        else:
            gone = rng.permutation(live)[:int(rng.integers(1, 4))].tolist()
            live = [r for r in live if r not in gone]
            steps.append(("free", [(r, str(rng.choice(["free", "split", "segment"]))) for r in gone],
                          bool(rng.random() < 0.5)))
    return {"page_size": p, "pool_tokens": pages * p, "swa_tokens": swa_pages * p, "steps": steps}
