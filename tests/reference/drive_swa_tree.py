"""Sliding-window radix-tree cases: scripted inserts (some with a window-released prefix),
matches, locks, unlocks and evictions of full and SWA slots, run on SGLang 0.5.23's
``UnifiedRadixCache`` with the components ``(FULL, SWA)`` and on pagedkv's
:class:`~pagedkv.mem_cache.swa_radix_cache.SWARadixCache`, each over its own
``SWATokenToKVPoolAllocator``.

Steps (plain data, one executor for both sides through :class:`swa_tree_sglang.SglangSWATree`
and :class:`PagedkvSWATree`):

- ``("insert", tokens, released_pages)``: allocate the key's pages in both pools (an extend),
  release the SWA slots of its first ``released_pages`` pages (``free_swa_segment``, as a
  running request's window release does), insert its whole pages with that
  ``evicted_seqlen`` (the tree frees the slots it already held), then free the partial last
  page. Records the already-cached length, or None when a pool is short.
- ``("match", tokens)``: the matched length and full slots (may split a node).
- ``("lock", i, tokens)`` / ``("unlock", i)``: lock the node a match ends on, and release it.
- ``("evict", full, swa)``: the tree's ``evict`` of ``full`` full and ``swa`` SWA slots.
- ``("checkpoint", tokens, more, released)``: a running request's checkpoint and the next
  one, whose insert passes ``prev_prefix_len`` (see :func:`checkpoint`).
- ``("room", n)``: the decode-memory check before a step that needs ``n`` slots in both pools
  (the allocator's ``check_decode_capacity``: ``evict_to_free_tokens``, which asks the tree's
  ``evict_for_alloc`` for each pool's shortfall, then ``available_size() >= n``).

Every record holds the step's answer, the four ledgers (full and SWA, evictable and
protected), both pools' free-slot counts and both free lists.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from drive_common import prefix_sequence

from pagedkv.mem_cache.allocator import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.swa_radix_cache import SWARadixCache

PAGE_SIZES = (1, 4, 16)


class PagedkvSWATree:
    """pagedkv's ``SWARadixCache`` over pagedkv's sliding-window allocator."""

    def __init__(self, page_size: int, full_tokens: int, swa_tokens: int, window: int) -> None:
        self.alloc = SWATokenToKVPoolAllocator(full_tokens, swa_tokens, page_size)
        self.tree = SWARadixCache(self.alloc, window)

    def take(self, n: int, pre: int = 0, last: int = -1) -> list[int] | None:
        out = self.alloc.alloc_extend([pre], [pre + n], [last], n)
        return None if out is None else out.tolist()

    def insert_path(self, tokens: list[int], slots: list[int], evicted: int,
                    prev: int) -> tuple[int, list[int]]:
        had, node = self.tree.insert_node(tokens, slots, evicted, prev)
        return had, self.tree.path_full(node).tolist()

    def release_swa(self, slots: list[int]) -> None:
        self.alloc.free_swa_segment(slots, 0)

    def free(self, slots: list[int]) -> None:
        self.alloc.free(slots)

    def insert(self, tokens: list[int], slots: list[int], evicted: int) -> int:
        return self.tree.insert(tokens, slots, evicted)

    def match(self, tokens: list[int]) -> tuple[int, list[int], Any]:
        n, slots, node = self.tree.match_prefix(tokens)
        return n, slots.tolist(), node

    def lock(self, node: Any) -> Any:
        return self.tree.lock(node)

    def unlock(self, handle: Any) -> None:
        self.tree.unlock(handle)

    def evict(self, full: int, swa: int) -> tuple[int, int]:
        return self.tree.evict(full, swa)

    def room(self, n: int) -> bool:
        return self.alloc.check_decode_capacity(self.tree, n)

    def state(self) -> dict:
        self.tree.check_invariants()
        self.alloc.check_invariants()
        t, a = self.tree, self.alloc
        return {"sizes": (t.full_evictable_size(), t.full_protected_size(),
                          t.swa_evictable_size(), t.swa_protected_size()),
                "available": (a.full_available_size(), a.swa_available_size()),
                "free_full": a.full_attn_allocator.free_pages.tolist(),
                "free_swa": a.swa_attn_allocator.free_pages.tolist()}


def checkpoint(tree: Any, p: int, tokens: list[int], more: list[int],
               released: int) -> tuple[int, int] | None:
    """A running request's two checkpoints: its whole pages of ``tokens`` inserted, its row
    repointed at the tree's slots; then ``more`` tokens (whole pages) computed on new slots,
    the first ``released`` pages of them window-released, and the longer key inserted with
    ``prev_prefix_len`` (the part inserted before) and that ``evicted_seqlen``. Returns both
    inserts' cached lengths, or None when a pool is short."""
    whole = len(tokens) // p * p
    slots = tree.take(-(-len(tokens) // p) * p)
    if slots is None or not whole:
        if slots is not None:
            tree.free(slots)
        return None
    first, row = tree.insert_path(tokens[:whole], slots[:whole], 0, 0)
    if whole < len(slots):
        tree.free(slots[whole:])
    new = tree.take(len(more), whole, row[-1])
    if new is None:
        return (first, -1)
    evicted = whole + released * p if released else 0
    if released:
        tree.release_swa(new[:released * p])
    second, _ = tree.insert_path(tokens[:whole] + more, row + new, evicted, whole)
    return first, second


def run(case: dict, tree: Any) -> list[dict]:
    """Execute ``case`` on ``tree`` (a fresh :class:`SglangSWATree` or :class:`PagedkvSWATree`)."""
    p = case["page_size"]
    locks: dict[int, Any] = {}
    records = []
    for step in case["steps"]:
        kind, out = step[0], None
        if kind == "insert":
            tokens, released = step[1], step[2]
            slots = tree.take(-(-len(tokens) // p) * p)
            if slots is not None:
                whole = len(tokens) // p * p
                evicted = min(released * p, whole)
                if evicted:
                    tree.release_swa(slots[:evicted])
                out = tree.insert(tokens[:whole], slots[:whole], evicted) if whole else 0
                if whole < len(slots):
                    tree.free(slots[whole:])
        elif kind == "match":
            out = list(tree.match(step[1])[:2])
        elif kind == "lock":
            locks[step[1]] = tree.lock(tree.match(step[2])[2])
        elif kind == "unlock" and step[1] in locks:
            tree.unlock(locks.pop(step[1]))
        elif kind == "evict":
            out = list(tree.evict(step[1], step[2]))
        elif kind == "room":
            out = tree.room(step[1])
        elif kind == "checkpoint":
            out = checkpoint(tree, p, *step[1:])
        records.append({"step": step, "out": out, **tree.state()})
    return records


def random_case(seed: int) -> dict:
    """A seeded case: page size 1, 4 or 16, a window of 1..3 pages and a few tokens, a full
    pool of 16..60 pages and an SWA pool of 8..(full) pages, 10..30 steps over token
    sequences that share prefixes (cut anywhere; a small alphabet, so keys also diverge
    inside pages)."""
    rng = np.random.default_rng(seed)
    p = int(rng.choice(PAGE_SIZES))
    window = int(rng.integers(1, 3 * p + 3))
    pages = int(rng.integers(16, 61))
    swa_pages = int(rng.integers(8, pages + 1))
    seqs: list[list[int]] = []

    def sequence() -> list[int]:
        return prefix_sequence(rng, seqs, p)

    steps: list[tuple[Any, ...]] = []
    held: list[int] = []
    for i in range(int(rng.integers(10, 31))):
        roll = rng.random()
        if roll < 0.35 or not seqs:
            seqs.append(sequence())
            released = int(rng.integers(0, len(seqs[-1]) // p + 1)) if rng.random() < 0.4 else 0
            steps.append(("insert", seqs[-1], released))
        elif roll < 0.5:
            steps.append(("match", sequence()))
        elif roll < 0.65:
            steps.append(("lock", i, sequence()))
            held.append(i)
        elif roll < 0.75 and held:
            steps.append(("unlock", held.pop(int(rng.integers(len(held))))))
        elif roll < 0.87:
            steps.append(("evict", int(rng.integers(0, 4 * p + 2)) if rng.random() < 0.5 else 0,
                          int(rng.integers(0, 6 * p + 2))))
        elif roll < 0.93:
            steps.append(("room", int(rng.integers(1, swa_pages * p + 1))))
        else:
            key = sequence()
            more_pages = int(rng.integers(1, 4))
            more = rng.integers(1, 5, more_pages * p).tolist()
            released = int(rng.integers(0, more_pages + 1)) if rng.random() < 0.5 else 0
            steps.append(("checkpoint", key, more, released))
    return {"page_size": p, "pool_tokens": pages * p, "swa_tokens": swa_pages * p,
            "window": window, "steps": steps}
