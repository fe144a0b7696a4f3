"""Who owns every page after every step, recorded as changes: the visualizer's page events.

At card scale a pool has thousands of pages and a run tens of thousands of steps, so storing
each step's page table is out of the question. A page changes owner only when it is
allocated, freed, taken into the radix cache, locked, unlocked or evicted, so the changes
are few (about two per page a request ever holds). :class:`PageRecorder` works out every
page's owner after a step and keeps the pages whose owner differs from the step before.
A reader (the browser) replays the changes to rebuild any step's pool map.

Owners: a request id (>= 0) for a page only that request holds (its own tokens beyond its
cached prefix); :data:`FREE`; :data:`CACHED` for a page the radix cache holds that no running
request uses (evictable); :data:`SHARED` for a cached page some running request locks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FREE, CACHED, SHARED = -1, -2, -3


class PageRecorder:
    """Page-owner changes of one run, as three int columns.

    Args:
        num_pages: pages in the pool (page ids 1 .. num_pages; page 0 is never used).

    Attributes:
        step, page, owner: ``list[int]`` of equal length, one entry per change.
    """

    def __init__(self, num_pages: int) -> None:
        self._prev = np.full(num_pages + 1, FREE, dtype=np.int64)
        self.step: list[int] = []
        self.page: list[int] = []
        self.owner: list[int] = []

    def observe(self, step: int, owners: np.ndarray) -> None:
        """Record the pages whose owner (int64 ``[num_pages + 1]``) changed since last time."""
        changed = np.flatnonzero(owners != self._prev)
        if len(changed):
            self.step.extend([step] * len(changed))
            self.page.extend(changed.tolist())
            self.owner.extend(owners[changed].tolist())
            self._prev = owners.copy()

    def to_dict(self) -> dict[str, list[int]]:
        return {"step": list(self.step), "page": list(self.page), "owner": list(self.owner)}


def page_owners(sched: Any) -> np.ndarray:
    """Every page's owner now (int64 ``[num_pages + 1]``) from a scheduler's state.

    Requests' own pages are the pages of their row from ``cache_protected_len`` (a whole
    page boundary) to ``kv_committed_len``; the tree's pages are its nodes' slots.
    """
    p = sched.page_size
    owners = np.full(sched.max_total_num_tokens // p + 1, FREE, dtype=np.int64)
    table = sched.req_to_token_pool.req_to_token.numpy()
    b = sched.running
    holders = [r for r, done in zip(b.reqs, b.finished.tolist(), strict=True) if not done]
    b.sync()
    if sched.chunked_req is not None:
        holders.append(sched.chunked_req)
    for r in holders:
        own = table[r.req_pool_idx, r.cache_protected_len:r.kv_committed_len:p]
        owners[own // p] = r.rid
    tree = sched.tree_cache
    if not tree.disable:
        for node in tree.nodes():
            if node is not tree.root_node:
                owners[node.value[::p] // p] = SHARED if node.lock_ref else CACHED
    return owners
