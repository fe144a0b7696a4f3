"""Radix-tree cases: scripted matches, inserts, locks and evictions, run on SGLang's tree
(0.5.9 ``RadixCache``, 0.5.23 ``UnifiedRadixCache`` with its Rust core) and on pagedkv's
:class:`~pagedkv.mem_cache.radix_cache.RadixCache`, each over its own release's allocator.

Steps (plain data, so one executor drives both through :class:`tree_sglang.SglangTree` and
:class:`PagedkvTree`):

- ``("insert", tokens)``: allocate the key's pages, insert its whole pages, free the slots
  of the part that was already cached (0.5.9: the caller frees ``value[:prefix_len]`` with
  ``free``; 0.5.23: the insert walk frees them node by node, ``free_segment``; pagedkv: the
  insert reports the overlapped ranges and the same frees follow), then free the page the key
  leaves unaligned. Records the already-cached length.
- ``("match", tokens)``: records the matched length and slots (may split a node).
- ``("lock", i, tokens)`` / ``("unlock", i)``: lock the node a match of ``tokens`` ends on
  (0.5.9 ``inc_lock_ref``, 0.5.23 ``lock``; pagedkv ``inc_lock_ref``), and release it.
- ``("evict", n)``: the tree's own ``evict(n)``: LRU leaves until ``n`` are freed.
- ``("room", n)``: ``evict_from_tree_cache(n)``, the scheduler's call before it allocates
  (0.5.9 evicts ``n`` if short; 0.5.23 evicts until ``n`` are free, ``evict_for_alloc``).
- ``("take", pages)`` / ``("give",)``: pages held outside the tree, to make the pool short.

Every record holds the step's answer, the evictable and protected sizes, the free-slot count
and the whole free list, so which slots were freed, and in which order, is compared too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from drive_common import prefix_sequence

from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache

TREE_PAGE_SIZES = (1, 4, 16)


class PagedkvTree:
    """pagedkv's ``RadixCache`` over pagedkv's allocator, following ``version``."""

    def __init__(self, page_size: int, pool_tokens: int, version: str) -> None:
        self.alloc = make_allocator(pool_tokens, page_size)
        self.tree = RadixCache.for_release(ReqToTokenPool(4, 64), self.alloc, version)
        self.old = version == "0.5.9"

    def take(self, n: int) -> list[int] | None:
        out = self.alloc.alloc(n)
        return None if out is None else out.tolist()

    def free(self, slots: list[int]) -> None:
        self.alloc.free(slots)

    def insert(self, tokens: list[int], slots: list[int]) -> int:
        had, _, overlaps = self.tree.insert(tokens, slots)
        if self.old:
            if had:
                self.alloc.free(slots[:had])
        else:
            for start, end in overlaps:
                self.alloc.free_segment(slots[start:end])
        return had

    def match(self, tokens: list[int]) -> tuple[int, list[int], Any]:
        m = self.tree.match_prefix(tokens)
        return len(m.device_indices), m.device_indices.tolist(), m.last_device_node

    def lock(self, node: Any) -> Any:
        self.tree.inc_lock_ref(node)
        return node

    def unlock(self, handle: Any) -> None:
        self.tree.dec_lock_ref(handle)

    def evict(self, n: int) -> int:
        return self.tree.evict(n)

    def room(self, n: int) -> None:
        self.tree.evict_from_tree_cache(n)

    def state(self) -> tuple[int, int, int, list[int]]:
        self.tree.check_invariants()
        return (self.tree.evictable_size(), self.tree.protected_size(),
                self.alloc.available_size(), self.alloc.free_pages.tolist())


def run(case: dict, tree: Any) -> list[dict]:
    """Execute ``case`` on ``tree`` (a fresh :class:`SglangTree` or :class:`PagedkvTree`)."""
    p = case["page_size"]
    locks: dict[int, Any] = {}
    loose: list[list[int]] = []
    records = []
    for step in case["steps"]:
        kind, out = step[0], None
        if kind == "insert":
            tokens = step[1]
            slots = tree.take(-(-len(tokens) // p) * p)
            if slots is not None:
                whole = len(tokens) // p * p
                out = tree.insert(tokens[:whole], slots[:whole]) if whole else 0
                if whole < len(slots):
                    tree.free(slots[whole:])
        elif kind == "match":
            out = list(tree.match(step[1])[:2])
        elif kind == "lock":
            locks[step[1]] = tree.lock(tree.match(step[2])[2])
        elif kind == "unlock" and step[1] in locks:
            tree.unlock(locks.pop(step[1]))
        elif kind == "evict":
            out = tree.evict(step[1])
        elif kind == "room":
            tree.room(step[1])
        elif kind == "take":
            got = tree.take(step[1] * p)
            if got is not None:
                loose.append(got)
            out = got
        elif kind == "give" and loose:
            tree.free(loose.pop(0))
        records.append({"step": step, "out": out, "sizes": tree.state()})
    return records


def random_case(seed: int, old: bool) -> dict:
    """A seeded case: page size 1, 4 or 16, a pool of 24..80 pages, 10..30 steps over token
    sequences that share prefixes (taken from earlier sequences, cut anywhere, and drawn
    from a small alphabet so that keys also diverge inside pages)."""
    rng = np.random.default_rng(seed)
    p = int(rng.choice(TREE_PAGE_SIZES))
    pages = int(rng.integers(24, 81))
    seqs: list[list[int]] = []

    def sequence() -> list[int]:
        return prefix_sequence(rng, seqs, p)

    steps: list[tuple[Any, ...]] = []
    held: list[int] = []
    for i in range(int(rng.integers(10, 31))):
        roll = rng.random()
        if roll < 0.35 or not seqs:
            seqs.append(sequence())
            steps.append(("insert", seqs[-1]))
        elif roll < 0.5:
            steps.append(("match", sequence()))
        elif roll < 0.62:
            steps.append(("lock", i, sequence()))
            held.append(i)
        elif roll < 0.7 and held:
            steps.append(("unlock", held.pop(int(rng.integers(len(held))))))
        elif roll < 0.8:
            steps.append(("evict", int(rng.integers(0, 4 * p + 2))))
        elif roll < 0.9:
            steps.append(("room", int(rng.integers(1, pages * p // 2 + 1))))
        elif roll < 0.96:
            steps.append(("take", int(rng.integers(1, pages // 3 + 1))))
        else:
            steps.append(("give",))
    return {"page_size": p, "pool_tokens": pages * p, "steps": steps}
