"""Radix-tree cases over state slots: scripted inserts (each with the state slot for its end),
matches, locks, unlocks and evictions of KV slots and states, run on SGLang 0.5.23's
``UnifiedRadixCache`` with the components ``(FULL, MAMBA)`` and on pagedkv's
:class:`~pagedkv.mem_cache.mamba_radix_cache.MambaRadixCache`, each over its own token
allocator and state-slot allocator.

Steps (plain data, one executor for both sides through :class:`mamba_tree_sglang.SglangMambaTree`
and :class:`PagedkvMambaTree`):

- ``("insert", tokens)``: allocate the key's pages and one state slot, insert its whole pages
  with that slot (the tree frees the KV slots it already held); the caller frees the state
  slot when the key's node had a state already (``mamba_exist``: SGLang's
  ``cleanup_after_caching_req``), and the partial last page. Records
  ``(prefix_len, mamba_exist)``, or None when a pool is short.
- ``("match", tokens)``: the matched length, its KV slots and ``mamba_branching_seqlen``
  (may split a node).
- ``("lock", i, tokens)`` / ``("unlock", i)``: lock the node a match ends on, and release it.
- ``("evict", kv, states)``: the tree's ``evict``; ``("room", kv, states)``: its
  ``evict_for_alloc`` (the shortfalls an allocation found).
- ``("hold", n)`` / ``("give",)``: state slots held outside the tree (running requests'),
  to make the slots short.
- ``("checkpoint", tokens, more)``: a running request's two inserts: its whole pages of
  ``tokens`` with a state, its row repointed at the tree's slots; then ``more`` tokens on
  new slots, the longer key inserted with ``prev_prefix_len`` (the part inserted before) and
  a second state.

Every record holds the step's answer, the four ledgers (KV and states, evictable and
protected), both free counts and both whole free lists (the KV pages and the state slots, in
order).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from drive_common import prefix_sequence

from pagedkv.mem_cache.allocator import MambaSlotAllocator, make_allocator
from pagedkv.mem_cache.mamba_radix_cache import MambaRadixCache

PAGE_SIZES = (1, 4, 16, 64)


class PagedkvMambaTree:
    """pagedkv's ``MambaRadixCache`` over pagedkv's allocators."""

    def __init__(self, page_size: int, pool_tokens: int, slots: int) -> None:
        self.alloc = make_allocator(pool_tokens, page_size)
        self.slots = MambaSlotAllocator(slots)
        self.tree = MambaRadixCache(self.alloc, self.slots)

    def take(self, n: int) -> list[int] | None:
        out = self.alloc.alloc(n)
        return None if out is None else out.tolist()

    def free(self, slots: list[int]) -> None:
        self.alloc.free(slots)

    def take_state(self) -> int | None:
        out = self.slots.alloc(1)
        return None if out is None else out[0]

    def free_state(self, slot: int) -> None:
        self.slots.free([slot])

    def insert(self, tokens: list[int], kv: list[int], state: int,
               prev: int = 0) -> tuple[int, bool, list[int]]:
        had, exist, node = self.tree.insert(tokens, kv, state, prev)
        return had, exist, self.tree.path_full(node).tolist()

    def match(self, tokens: list[int]) -> tuple[list[Any], Any]:
        m = self.tree.match_prefix(tokens)
        n = len(m.device_indices)
        return [n, m.device_indices.tolist(), m.mamba_branching_seqlen], m.last_device_node

    def lock(self, node: Any) -> Any:
        return self.tree.lock(node)

    def unlock(self, handle: Any) -> None:
        self.tree.unlock(handle)

    def evict(self, full: int, mamba: int) -> tuple[int, int]:
        return self.tree.evict(full, mamba)

    def evict_for_alloc(self, full: int, mamba: int) -> tuple[int, int]:
        return self.tree.evict_for_alloc(full, mamba)

    def state(self) -> dict:
        self.tree.check_invariants()
        self.alloc.check_invariants()
        self.slots.check_invariants()
        t = self.tree
        return {"sizes": (t.full_evictable_size(), t.full_protected_size(),
                          t.mamba_evictable_size(), t.mamba_protected_size()),
                "available": (self.alloc.available_size(), self.slots.available_size()),
                "free_kv": self.alloc.free_pages.tolist(),
                "free_states": list(self.slots.free_slots)}


def _insert(tree: Any, p: int, tokens: list[int]) -> list[Any] | None:
    """One finished request's insert (see the module's ``insert`` step)."""
    slots = tree.take(-(-len(tokens) // p) * p)
    if slots is None:
        return None
    state = tree.take_state()
    if state is None:
        tree.free(slots)
        return None
    whole = len(tokens) // p * p
    had, exist, _ = tree.insert(tokens[:whole], slots[:whole], state)
    if exist:
        tree.free_state(state)
    if whole < len(slots):
        tree.free(slots[whole:])
    return [had, exist]


def checkpoint(tree: Any, p: int, tokens: list[int], more: list[int]) -> list[Any] | None:
    """A running request's two inserts (see the module's ``checkpoint`` step)."""
    whole = len(tokens) // p * p
    slots = tree.take(-(-len(tokens) // p) * p)
    if slots is None or not whole:
        if slots is not None:
            tree.free(slots)
        return None
    state = tree.take_state()
    if state is None:
        tree.free(slots)
        return None
    first, exist, row = tree.insert(tokens[:whole], slots[:whole], state)
    if exist:
        tree.free_state(state)
    if whole < len(slots):
        tree.free(slots[whole:])
    new, state2 = tree.take(len(more)), tree.take_state()
    if new is None or state2 is None:
        if new is not None:
            tree.free(new)
        if state2 is not None:
            tree.free_state(state2)
        return [first, exist, -1]
    second, exist2, _ = tree.insert(tokens[:whole] + more, row + new, state2, whole)
    if exist2:
        tree.free_state(state2)
    return [first, exist, second, exist2]


def run(case: dict, tree: Any) -> list[dict]:
    """Execute ``case`` on ``tree`` (a fresh :class:`SglangMambaTree` or
    :class:`PagedkvMambaTree`)."""
    p = case["page_size"]
    locks: dict[int, Any] = {}
    held: list[int] = []
    records = []
    for step in case["steps"]:
        kind, out = step[0], None
        if kind == "insert":
            out = _insert(tree, p, step[1])
        elif kind == "match":
            out = tree.match(step[1])[0]
        elif kind == "lock":
            locks[step[1]] = tree.lock(tree.match(step[2])[1])
        elif kind == "unlock" and step[1] in locks:
            tree.unlock(locks.pop(step[1]))
        elif kind == "evict":
            out = list(tree.evict(step[1], step[2]))
        elif kind == "room":
            out = list(tree.evict_for_alloc(step[1], step[2]))
        elif kind == "hold":
            for _ in range(step[1]):
                s = tree.take_state()
                if s is not None:
                    held.append(s)
        elif kind == "give":
            for s in held:
                tree.free_state(s)
            held.clear()
        elif kind == "checkpoint":
            out = checkpoint(tree, p, step[1], step[2])
        records.append({"step": step, "out": out, **tree.state()})
    return records


def random_case(seed: int) -> dict:
    """A seeded case: page size 1, 4, 16 or 64, a KV pool of 16..60 pages, 3..12 state slots,
    10..40 steps over token sequences that share prefixes (cut anywhere; a small alphabet, so
    keys also diverge inside pages), some long enough to pass a checkpoint grid point."""
    rng = np.random.default_rng(seed)
    p = int(rng.choice(PAGE_SIZES))
    pages = int(rng.integers(16, 61))
    slots = int(rng.integers(3, 13))
    seqs: list[list[int]] = []

    def sequence() -> list[int]:
        s = prefix_sequence(rng, seqs, p)
        if rng.random() < 0.15:  # past the 64-token checkpoint grid
            s = s + rng.integers(1, 5, int(rng.integers(60, 140))).tolist()
        return s[:pages * p // 2]

    steps: list[tuple[Any, ...]] = []
    locked: list[int] = []
    for i in range(int(rng.integers(10, 41))):
        roll = rng.random()
        if roll < 0.32 or not seqs:
            seqs.append(sequence())
            steps.append(("insert", seqs[-1]))
        elif roll < 0.47:
            steps.append(("match", sequence()))
        elif roll < 0.6:
            steps.append(("lock", i, sequence()))
            locked.append(i)
        elif roll < 0.7 and locked:
            steps.append(("unlock", locked.pop(int(rng.integers(len(locked))))))
        elif roll < 0.8:
            steps.append(("evict", int(rng.integers(0, 4 * p + 2)) if rng.random() < 0.5 else 0,
                          int(rng.integers(0, 4))))
        elif roll < 0.86:
            steps.append(("room", int(rng.integers(0, pages * p // 2)) if rng.random() < 0.5
                          else 0, int(rng.integers(0, 4))))
        elif roll < 0.9:
            steps.append(("hold", int(rng.integers(1, 4))))
        elif roll < 0.93:
            steps.append(("give",))
        else:
            more = rng.integers(1, 5, int(rng.integers(1, 4)) * p).tolist()
            steps.append(("checkpoint", sequence(), more))
    return {"page_size": p, "pool_tokens": pages * p, "slots": slots, "steps": steps}
