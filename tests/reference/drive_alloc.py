"""Allocator cases: one scripted sequence of allocations and frees, run on SGLang's allocator
and on pagedkv's, recording what each hands out and its free list after every step.

A case is plain data (:func:`random_case`), so one executor (:func:`run`) drives both
allocators through an adapter (:class:`alloc_sglang.SglangPool`, :class:`PagedkvPool`)
and the records compare with ``==``. Steps, as the scheduler makes them:

- ``("cache", name, pages)``: ``alloc(pages * p)``, a cached prefix's slots (tree-owned,
  never freed here; new requests may start on its first pages, as on a prefix hit).
- ``("extend", [(rid, n, share), ...])``: one prefill batch; a new ``rid`` first takes
  ``share = (cache name, pages)`` as its prefix (or none), an existing one continues its
  chunk (its last page may be partial). Page size 1: SGLang's scheduler calls ``alloc(n)``
  for the batch (``alloc_token_slots``); pagedkv calls ``alloc_extend`` for every page size.
  Otherwise both call ``alloc_extend(prefix_lens, seq_lens, last_loc, n)``.
- ``("decode", [rid, ...])``: one slot each (``alloc(bs)`` / ``alloc_decode``).
- ``("free", [(rid, how), ...], group)``: release requests' own slots, inside one free
  group or not; ``how``: ``"free"`` (one ``free`` call, sorted pages), ``"split"`` (two
  ``free`` calls split at a page boundary, as 0.5.9 frees a retracted request), ``"segment"``
  (0.5.23's ``free_segment``: pages in row order, as its caches free).

Steps naming a request that does not exist (its prefill ran out of memory) are skipped by
both sides alike. Out of memory is part of the comparison: both must answer None and change
nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from drive_common import free_group, random_prefill, run_extend, take_decode

from pagedkv.mem_cache.allocator import make_allocator

PAGE_SIZES = (1, 2, 4, 16, 64)


class PagedkvPool:
    """pagedkv's allocator behind the executor's interface (``alloc_extend`` for every page
    size, as pagedkv's scheduler calls it)."""

    def __init__(self, page_size: int, size: int, kernels: str) -> None:
        self.a = make_allocator(size, page_size)

    def alloc(self, n: int) -> list[int] | None:
        out = self.a.alloc(n)
        return None if out is None else out.tolist()

    def extend(self, pre: list[int], seq: list[int], last: list[int]) -> list[int] | None:
        out = self.a.alloc_extend(pre, seq, last, sum(seq) - sum(pre))
        return None if out is None else out.tolist()

    def decode(self, seq: list[int], last: list[int]) -> list[int] | None:
        out = self.a.alloc_decode(seq, last)
        return None if out is None else out.tolist()

    def free(self, slots: list[int], how: str, start: int) -> None:
        if how == "segment":
            self.a.free_segment(slots)
        else:
            self.a.free(slots)

    def group(self, begin: bool) -> None:
        (self.a.free_group_begin if begin else self.a.free_group_end)()

    def state(self) -> tuple[int, list[int]]:
        self.a.check_invariants()
        return self.a.available_size(), self.a.free_pages.tolist()


def run(case: dict, pool_class: type) -> list[dict]:
    """Execute ``case`` on a fresh pool; one record per step."""
    p = case["page_size"]
    pool = pool_class(p, case["pool_tokens"], case.get("kernels", "torch"))
    rows: dict[str, list[int]] = {}  # request -> its row (shared prefix + own slots)
    shared: dict[str, int] = {}  # request -> length of its row's cached prefix
    cached: dict[str, list[int]] = {}
    records = []
    for step in case["steps"]:
        kind, out = step[0], None
        if kind == "cache":
            out = pool.alloc(step[2] * p)
            if out is not None:
                cached[step[1]] = out
        elif kind == "extend":
            out, batch, new = run_extend(pool, step[1], rows, cached, p)
            shared.update(new)
            step = ("extend", batch)
        elif kind == "decode":
            rids = [r for r in step[1] if r in rows]
            out = pool.decode([len(rows[r]) + 1 for r in rids], [rows[r][-1] for r in rids]) if rids else None
            take_decode(rids, out, rows)
            step = ("decode", rids)
        elif kind == "free":
            frees = [(r, how) for r, how in step[1] if r in rows]
            with free_group(pool, step[2]):
                for rid, how in frees:
                    row, start = rows.pop(rid), shared.pop(rid)
                    if how == "split":  # two calls at a page boundary inside the own part
                        cut = min(start + -(-(len(row) - start) // 2 // p) * p, len(row))
                        pool.free(row[start:cut], "free", start)
                        pool.free(row[cut:], "free", cut)
                    elif len(row) > start:
                        pool.free(row[start:], how, start)
            step = ("free", frees, step[2])
        available, free_list = pool.state()
        records.append({"step": step, "out": out, "available": available, "free": free_list})
    return records


def random_case(seed: int, old: bool) -> dict:
    """A seeded case: a page size from ``PAGE_SIZES``, a pool of 3..40 pages, cached prefixes,
    then 4..10 random steps over up to 6 requests."""
    rng = np.random.default_rng(seed)
    p = int(rng.choice(PAGE_SIZES))
    pages = int(rng.integers(3, 41))
    steps: list[tuple[Any, ...]] = [("cache", f"c{i}", int(rng.integers(1, 4)))
                                    for i in range(int(rng.integers(0, 3)))]
    cache_pages = {s[1]: s[2] for s in steps}
    live: list[str] = []
    hows = ["free", "split"] if old else ["free", "split", "segment"]
    for n in range(int(rng.integers(4, 11))):
        roll = rng.random()
        if roll < 0.45 or not live:
            steps.append(("extend", random_prefill(rng, live, cache_pages, n, p)))
        elif roll < 0.75:
            steps.append(("decode", rng.permutation(live)[:int(rng.integers(1, 5))].tolist()))
        else:
            gone = rng.permutation(live)[:int(rng.integers(1, 4))].tolist()
            live = [r for r in live if r not in gone]
            steps.append(("free", [(r, str(rng.choice(hows))) for r in gone], bool(rng.random() < 0.5)))
    return {"page_size": p, "pool_tokens": pages * p, "steps": steps}
