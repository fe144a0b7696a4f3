"""Every page's owner, pool by pool: what :class:`~pagedkv.managers.page_recorder.PageRecorder`
compares step by step, and the log of its changes.

Owners: a request id (>= 0) for a page only that request holds; :data:`FREE`; :data:`CACHED`
for a page the radix cache holds that no running request locks (evictable); :data:`SHARED`
for a cached page some running request locks.

A sliding-window hybrid (SGLang 0.5.23's ``SWATokenToKVPoolAllocator``) has two pools. Its
requests and its tree address tokens by their *full* slots; a full page's SWA peer page (the
allocator's ``full_to_swa_index_mapping``, page by page: both pools page in step) holds the
same tokens for the window layers until the window moves past them
(``ScheduleBatch.maybe_evict_swa``, a checkpoint, or the tree's SWA eviction) and the peer
goes back to the SWA free list while the full page stays. So an SWA page's owner is its full
peer's owner (:func:`swa_page_owners`), except in the tree, where the SWA side has locks of
its own: a tree node locks the SWA of a request's trailing window only
(``SWARadixTree.lock``), so an SWA page of a locked node outside that window is evictable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

FREE, CACHED, SHARED = -1, -2, -3


class OwnerLog:
    """One pool's owner changes, as int columns.

    Args:
        num_pages: pages in the pool (page ids 1 .. num_pages; page 0 is never used).

    Attributes:
        step, page, owner: ``list[int]`` of equal length, one entry per owner change.
        prev: int64 ``[num_pages + 1]``: every page's owner as last recorded.
    """

    def __init__(self, num_pages: int) -> None:
        self.prev = np.full(num_pages + 1, FREE, dtype=np.int64)
        self.step: list[int] = []
        self.page: list[int] = []
        self.owner: list[int] = []

    def observe(self, step: int, owners: np.ndarray) -> None:
        """Record the pages whose owner (int64 ``[num_pages + 1]``) changed since last time."""
        changed = np.flatnonzero(owners != self.prev)
        if len(changed):
            self.step.extend([step] * len(changed))
            self.page.extend(changed.tolist())
            self.owner.extend(owners[changed].tolist())
            self.prev = owners.copy()

    def to_dict(self) -> dict[str, list[int]]:
        """``{"step", "page", "owner"}``, lists of ints."""
        return {"step": list(self.step), "page": list(self.page), "owner": list(self.owner)}


def tree_pages(tree: Any) -> Iterator[tuple[np.ndarray, bool, np.ndarray | None, bool]]:
    """Every tree node's ``(full slots, full side locked, SWA slots or None, SWA side
    locked)``: a :class:`~pagedkv.mem_cache.radix_cache.RadixCache` (``value``, ``lock_ref``;
    one pool: no SWA side) or a :class:`~pagedkv.mem_cache.swa_cache.SWAPrefixCache`
    (``full``, ``full_lock``, ``swa`` (None: a tombstone), ``swa_lock``), or a
    :class:`~pagedkv.mem_cache.mamba_cache.MambaPrefixCache` (``full``, ``full_lock``; no SWA
    side). Nothing for a disabled cache or a ``ChunkCache``."""
    if tree.disable:
        return
    inner = getattr(tree, "tree", None)  # SWAPrefixCache / MambaPrefixCache: the tree itself
    if inner is not None:
        for n in inner.nodes():
            # a MambaNode's state slots are not KV pages: its KV side only
            swa = getattr(n, "swa", None)
            yield n.full, n.full_lock > 0, swa, swa is not None and n.swa_lock > 0
        return
    for node in tree.nodes():
        if node is not tree.root_node:
            yield node.value, node.lock_ref > 0, None, False


def tree_swa_pages(tree: Any, page_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The SWA pages the tree holds and their owners: ``(pages, owners)``, int64 arrays of
    equal length, :data:`SHARED` where the node's SWA side is locked, else :data:`CACHED`
    (empty for a one-pool tree, a disabled cache or a ``ChunkCache``). Nodes hold whole
    pages, so no page appears twice. It changes only when the SWA tree's ``version`` does,
    so a caller may keep it between steps keyed on that."""
    p = page_size
    firsts, locked = [], []
    for _, _, swa, swa_locked in tree_pages(tree):
        if swa is not None and len(swa):
            firsts.append(swa[::p] // p)
            locked.append(swa_locked)
    if not firsts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    kind = np.where(np.asarray(locked), SHARED, CACHED).astype(np.int64)
    return np.concatenate(firsts).astype(np.int64), np.repeat(kind, [len(f) for f in firsts])


def swa_page_owners(full_owners: np.ndarray, full_to_swa: np.ndarray,
                    tree_pages_owners: tuple[np.ndarray, np.ndarray], page_size: int,
                    num_swa_pages: int) -> np.ndarray:
    """Every SWA page's owner (int64 ``[num_swa_pages + 1]``).

    Args:
        full_owners: every full page's owner now (int64 ``[num_full_pages + 1]``).
        full_to_swa: the allocator's ``full_to_swa_index_mapping`` (int64, full slot ->
            SWA slot, 0: none).
        tree_pages_owners: the tree's SWA pages and their owners (:func:`tree_swa_pages`),
            which override their full peers' owners.
        page_size: tokens per page, the same in both pools.
        num_swa_pages: pages in the SWA pool.
    """
    p = page_size
    owners = np.full(num_swa_pages + 1, FREE, dtype=np.int64)
    # the full pages held, then their first slots' SWA slots: a gather of those pages only (a
    # strided read of every page's first slot cost a cache line per page, every step)
    held = np.flatnonzero(full_owners != FREE)
    peers = full_to_swa[held * p]
    peered = peers > 0
    owners[peers[peered] // p] = full_owners[held[peered]]
    pages, tree_owners = tree_pages_owners
    owners[pages] = tree_owners
    return owners
