"""The full pool's slot -> the SWA pool's slot: a sliding-window hybrid's two pools paired,
and the SWA slots released when they leave it.

Follows SGLang 0.5.23's ``python/sglang/srt/mem_cache/allocator/swa.py``
(``SWATokenToKVPoolAllocator.full_to_swa_index_mapping``, ``translate_loc_from_full_to_swa``,
``set_full_to_swa_mapping``, ``clear_full_to_swa_mapping``, ``_expand_to_full_pages``). Entry
``i`` names full slot ``i``'s SWA slot, 0 when it has none (never paired, or its SWA slot was
released once the token left every window); the entry after the last full slot is -1, so a
``last_loc`` of -1 (no prefix) translates to -1. The allocator
(:class:`~pagedkv.mem_cache.allocator.swa.SWATokenToKVPoolAllocator`) pairs slots when it
allocates and unpairs them when it frees; :class:`FullToSWAMapping` keeps the array and
refuses what would corrupt it: SGLang checks ``swa.peer_mapped`` (the slots given to
``free_swa_segment`` still hold an SWA peer) and ``swa.peer_released`` (those given to
``free_full`` do not) only when ``SGLANG_INVARIANT_CHECK`` is set, and a violation then frees
page 0 or strands the peer; pagedkv raises :class:`~pagedkv.errors.AllocatorError` at once.
The SWA slots unpaired are freed at once or, inside a free group, held until its end
(:class:`SWAFreeGroup`).
"""

from __future__ import annotations

import numpy as np
import torch

from pagedkv.errors import AllocatorError, bad_value, check_positive_int
from pagedkv.mem_cache.allocator.ownership import IN_USE, IntsLike, as_i64
from pagedkv.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator


class FullToSWAMapping:
    """Each full slot's SWA slot.

    Args:
        size: full-pool slots; page_size: slots per page ``p`` (both pools).

    Attributes:
        slots: int64 ``[size + p + 1]``: entry ``i`` is full slot ``i``'s SWA slot (0:
            none); the last entry is -1.
    """

    def __init__(self, size: int, page_size: int) -> None:
        self.page_size = check_positive_int("page_size", page_size)
        self.slots = np.zeros(check_positive_int("size", size) + page_size + 1, dtype=np.int64)
        self.slots[-1] = -1

    def clear(self) -> None:
        """Unpair every slot (the trailing -1 stays)."""
        self.slots[:-1] = 0

    def check_full(self, idx: np.ndarray, what: str) -> None:
        """Raise :class:`AllocatorError` (naming ``what``) unless ``idx`` are full slots."""
        if len(idx) and (idx.min() < 0 or idx.max() >= len(self.slots) - 1):
            raise AllocatorError(f"{what}: slots {idx.tolist()} outside the full pool "
                                 f"[0, {len(self.slots) - 1})")

    def translate(self, kv_indices: IntsLike) -> torch.Tensor:
        """The SWA slots of full slots ``kv_indices`` (-1 stays -1; 0: released).
        Source: ``translate_loc_from_full_to_swa``.

        Raises:
            ConfigError: an index outside ``[-1, len(slots) - 1)``.
        """
        idx = as_i64("kv_indices", kv_indices)
        if len(idx) and (idx.min() < -1 or idx.max() >= len(self.slots) - 1):
            raise bad_value("kv_indices", idx.tolist(), f"full slots in [-1, {len(self.slots) - 1})")
        return torch.from_numpy(self.slots[idx])

    def pair(self, full: IntsLike, swa: IntsLike, what: str) -> None:
        """Point full slots ``full`` at SWA slots ``swa`` (equal lengths).

        Raises:
            ConfigError: the lengths differ; AllocatorError: a slot outside the full pool.
        """
        f, s = as_i64("full_indices", full), as_i64("swa_indices", swa)
        if len(f) != len(s):
            raise bad_value("len(swa_indices)", len(s), f"len(full_indices) = {len(f)}")
        self.check_full(f, what)
        self.slots[f] = s

    def unpair(self, full: np.ndarray) -> None:
        """Full slots ``full`` point nowhere (checked: AllocatorError outside the pool)."""
        self.check_full(full, "clear_full_to_swa_mapping")
        self.slots[full] = 0

    def pages_of(self, slots: np.ndarray) -> np.ndarray:
        """int64 ``[len(slots), p]``: every full slot of the pages holding ``slots``
        (duplicates kept, as SGLang's ``_expand_to_full_pages``)."""
        p = self.page_size
        return ((slots // p) * p)[:, None] + np.arange(p, dtype=np.int64)[None, :]

    def take_pages(self, full: np.ndarray) -> np.ndarray:
        """Unpair every full slot of the pages touched by ``full`` and return the SWA slots
        they held (0 where none): ``free_swa`` at page size > 1."""
        pages = self.pages_of(full).reshape(-1)
        swa = self.slots[pages]
        self.slots[pages] = 0
        return swa

    def take_page_peers(self, reps: np.ndarray) -> np.ndarray:
        """The SWA page ids of full pages whose first slots are ``reps``, their slots
        unpaired: ``_free_swa_pages``.

        Raises:
            AllocatorError: a page whose first slot has no SWA slot (released already).
        """
        swa = self.slots[reps]
        if (swa <= 0).any():
            raise AllocatorError(f"full slots {reps[swa <= 0].tolist()} have no SWA slot "
                                 "(released already; free them with free_full)")
        self.slots[self.pages_of(reps).reshape(-1)] = 0
        return swa // self.page_size

    def check_released(self, idx: np.ndarray) -> None:
        """Raise :class:`AllocatorError` if any of full slots ``idx`` still has an SWA slot."""
        if (self.slots[idx] != 0).any():
            raise AllocatorError(f"full slots {idx[self.slots[idx] != 0].tolist()} still hold "
                                 "an SWA slot: free them with free (or free_swa first)")

    def check_invariants(self, full_state: np.ndarray, swa_state: np.ndarray) -> None:
        """Given each pool's slot states, raise :class:`AllocatorError` unless the mapping
        pairs them: only in-use full slots map, each in-use SWA slot is the peer of exactly
        one full slot, at the same offset in its page."""
        mapped = np.flatnonzero(self.slots[:-1])
        peers = self.slots[mapped]
        if (full_state[mapped] != IN_USE).any():
            raise AllocatorError("a full slot not in use still maps to an SWA slot")
        if len(np.unique(peers)) != len(peers):
            raise AllocatorError("two full slots map to one SWA slot")
        if (peers % self.page_size != mapped % self.page_size).any():
            raise AllocatorError("a full slot and its SWA slot sit at different page offsets")
        if len(peers) != int(np.count_nonzero(swa_state == IN_USE)) or (swa_state[peers] != IN_USE).any():
            raise AllocatorError("in-use SWA slots and mapped full slots do not pair up")


class SWAFreeGroup:
    """The SWA pool's frees, done at once or held between ``free_group_begin`` and
    ``free_group_end``. Source: ``SWATokenToKVPoolAllocator.free_group_begin`` /
    ``free_group_end``, ``_release_swa``.

    Args:
        allocator: the SWA pool's allocator.
    """

    def __init__(self, allocator: PagedTokenToKVPoolAllocator) -> None:
        self.allocator = allocator
        self._by_id: list[np.ndarray] | None = None  # free_swa_segment, and free_swa at p == 1
        self._by_slot: list[np.ndarray] = []  # free_swa at p > 1

    def begin(self) -> None:
        """Hold frees back until :meth:`end`.

        Raises:
            AllocatorError: a group is open already (groups do not nest).
        """
        if self._by_id is not None:
            raise AllocatorError("free groups cannot be nested")
        self._by_id, self._by_slot = [], []

    def discard(self) -> None:
        """Forget the group and what it holds (the pools are cleared)."""
        self._by_id, self._by_slot = None, []

    def free_page_ids(self, pages: np.ndarray) -> None:
        """Free SWA pages by id, in this order (held inside a group)."""
        if self._by_id is not None:
            self._by_id.append(pages)
        else:
            self.allocator.free_page_ids(pages)

    def free_slots(self, swa_slots: np.ndarray) -> None:
        """``_release_swa``: drop the 0s (slots with no peer) and free the rest by slot
        (held inside a group)."""
        if self._by_id is not None:
            self._by_slot.append(swa_slots)
        else:
            self.allocator.free(np.unique(swa_slots[swa_slots > 0]))

    def end(self) -> None:
        """Release the held frees in SGLang's order: the page-id frees as one block in call
        order, then the slot frees (sorted unique pages), each to the front of the free list
        (the back for page size 1).

        Raises:
            AllocatorError: no group is open.
        """
        if self._by_id is None:
            raise AllocatorError("free_group_end without free_group_begin")
        by_id, by_slot = self._by_id, self._by_slot
        self.discard()
        if by_id:
            self.allocator.free_page_ids(np.concatenate(by_id))
        if by_slot:
            self.free_slots(np.concatenate(by_slot))
