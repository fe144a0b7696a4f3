"""Two pools for a sliding-window hybrid: full-attention slots and sliding-window slots.

Follows SGLang 0.5.23's ``python/sglang/srt/mem_cache/allocator/swa.py:
SWATokenToKVPoolAllocator`` (the paged, non-ring path that gpt-oss and MiMo-V2 run). A model
whose layers are partly full attention and partly sliding-window attention keeps two KV pools:
the full pool (``size`` slots, every token of every request, for the full layers) and the
SWA pool (``size_swa`` slots, for the window layers, which never read a token older than the
window). Every token gets one slot in each; ``full_to_swa_index_mapping[full_slot]`` names its
SWA slot (0: none, its SWA slot was released). Requests are addressed by their full slots
everywhere (``req_to_token`` rows, the radix tree); the window layers read through the mapping
(:class:`~pagedkv.mem_cache.allocator.swa_mapping.FullToSWAMapping`).

The point of the split: once a token has left every running request's window, its SWA slot
goes back (:meth:`free_swa` / :meth:`free_swa_segment`) while its full slot stays. The SWA
pool can therefore be much smaller than the full one.

Both pools page in step: SGLang drives them with the same ``prefix_lens``/``seq_lens``, so
a full page and its SWA peer page hold the same token positions at the same offsets. The free
lists, page 0 and the free orders are those of the single-pool allocators
(:mod:`pagedkv.mem_cache.allocator.base`), one per pool.

Where we differ from SGLang, all outside its arithmetic:

- SGLang checks the pairing only when ``SGLANG_INVARIANT_CHECK`` is set; pagedkv always
  (:class:`~pagedkv.mem_cache.allocator.swa_mapping.FullToSWAMapping`).
- SGLang's ``alloc_decode`` (page size > 1) takes the full pool's pages before it finds the SWA
  pool short, and those pages are lost until restart; its scheduler never gets there (the
  decode check compares the smaller of the two pools first). pagedkv checks both pools before
  taking anything and changes nothing when either is short.
- Not modelled: the per-request SWA ring (``swa_req_ring_size``, DeepSeek-V4), the
  ``need_sort`` staging, ``alloc_extend_swa_tail`` (prefill/decode disaggregation) and the
  all-SWA ``PureSWATokenToKVPoolAllocator``.
"""

from __future__ import annotations

import numpy as np
import torch

from pagedkv.errors import AllocatorError, bad_value, check_positive_int
from pagedkv.mem_cache.allocator.ownership import IntsLike, as_i64
from pagedkv.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from pagedkv.mem_cache.allocator.swa_mapping import FullToSWAMapping, SWAFreeGroup
from pagedkv.mem_cache.allocator.token import TokenToKVPoolAllocator


def _pool(size: int, page_size: int) -> PagedTokenToKVPoolAllocator:
    return TokenToKVPoolAllocator(size) if page_size == 1 else PagedTokenToKVPoolAllocator(size, page_size)


class SWATokenToKVPoolAllocator:
    """The full pool, the SWA pool and the full->SWA slot mapping.

    Args:
        size: full-attention slots (SGLang's ``full_max_total_num_tokens``).
        size_swa: sliding-window slots (``swa_max_total_num_tokens``). Both must be
            multiples of ``page_size`` (SGLang's sizing aligns them).
        page_size: slots per page ``p``, the same in both pools.

    Attributes:
        full_attn_allocator, swa_attn_allocator: the two pools' allocators.
        full_to_swa_index_mapping: int64 ``[size + p + 1]`` (a tensor view: writes through
            it are seen): entry ``i`` is full slot ``i``'s SWA slot, 0 for none; the last
            entry is -1 so that a ``last_loc`` of -1 (no prefix) translates to -1.

    Source: ``mem_cache/allocator/swa.py: SWATokenToKVPoolAllocator`` (SGLang 0.5.23).
    """

    def __init__(self, size: int, size_swa: int, page_size: int) -> None:
        self.page_size = check_positive_int("page_size", page_size)
        self._size_full = check_positive_int("size", size, minimum=page_size)
        self._size_swa = check_positive_int("size_swa", size_swa, minimum=page_size)
        self.full_attn_allocator = _pool(size, page_size)
        self.swa_attn_allocator = _pool(size_swa, page_size)
        self._map = FullToSWAMapping(size, page_size)
        self._swa_frees = SWAFreeGroup(self.swa_attn_allocator)

    # ----- sizes ------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """``min(size_full, size_swa)``, as SGLang's ``size`` property."""
        return min(self._size_full, self._size_swa)

    @property
    def size_full(self) -> int:
        return self._size_full

    @property
    def size_swa(self) -> int:
        return self._size_swa

    def full_available_size(self) -> int:
        """Free full-pool slots, in whole pages."""
        return self.full_attn_allocator.available_size()

    def swa_available_size(self) -> int:
        """Free SWA-pool slots, in whole pages."""
        return self.swa_attn_allocator.available_size()

    def available_size(self) -> int:
        """What a new token can get: the smaller of the two pools' free slots (every token
        takes a slot in each)."""
        return min(self.full_available_size(), self.swa_available_size())

    def evict_to_free_tokens(self, tree_cache: object | None, num_tokens: int) -> None:
        """Before allocating ``num_tokens`` in both pools: ask the prefix cache (anything with
        ``evict_for_alloc(num_tokens, swa_num_tokens)``; None for no cache) for each pool's
        shortfall. Source: ``SWATokenToKVPoolAllocator.evict_to_free_tokens``."""
        check_positive_int("num_tokens", num_tokens, minimum=0)
        full = max(0, num_tokens - self.full_available_size())
        swa = max(0, num_tokens - self.swa_available_size())
        if tree_cache is not None and (full or swa):
            tree_cache.evict_for_alloc(full, swa)

    def check_decode_capacity(self, tree_cache: object | None, num_tokens: int) -> bool:
        """Whether the next decode step's ``num_tokens`` fit after evicting for them.
        Source: ``BaseTokenToKVPoolAllocator.check_decode_capacity``."""
        self.evict_to_free_tokens(tree_cache, num_tokens)
        return self.available_size() >= num_tokens

    @property
    def full_to_swa_index_mapping(self) -> torch.Tensor:
        return torch.from_numpy(self._map.slots)

    def clear(self) -> None:
        """Empty both pools and the mapping (its trailing -1 stays)."""
        self.full_attn_allocator.clear()
        self.swa_attn_allocator.clear()
        self._map.clear()
        self._swa_frees.discard()

    def translate_loc_from_full_to_swa(self, kv_indices: IntsLike) -> torch.Tensor:
        """The SWA slots of full slots ``kv_indices`` (-1 stays -1; 0: released)."""
        return self._map.translate(kv_indices)

    def set_full_to_swa_mapping(self, full_indices: IntsLike, swa_indices: IntsLike) -> None:
        """Point full slots at SWA slots (a cache handing a node another request's SWA
        slots). Source: ``SWATokenToKVPoolAllocator.set_full_to_swa_mapping``."""
        self._map.pair(full_indices, swa_indices, "set_full_to_swa_mapping")

    def clear_full_to_swa_mapping(self, full_indices: IntsLike) -> None:
        """Unpair full slots from their SWA slots, freeing neither.
        Source: ``clear_full_to_swa_mapping``."""
        self._map.unpair(as_i64("full_indices", full_indices))

    # ----- allocation -------------------------------------------------------------------
    def _pair(self, full: torch.Tensor | None, swa: torch.Tensor | None) -> torch.Tensor | None:
        if full is None or swa is None:  # cannot happen: both pools were checked first
            raise AllocatorError("one pool allocated and the other did not")
        self._map.slots[full.numpy()] = swa.numpy()
        return full

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """``need_size`` full slots, each paired with a new SWA slot; page size 1 only
        (SGLang asserts the same). None, changing nothing, when either pool is short."""
        if self.page_size != 1:
            raise bad_value("page_size", self.page_size, "1 for alloc (use alloc_extend)")
        check_positive_int("need_size", need_size, minimum=0)
        if need_size > self.full_available_size() or need_size > self.swa_available_size():
            return None
        return self._pair(self.full_attn_allocator.alloc(need_size),
                          self.swa_attn_allocator.alloc(need_size))

    def alloc_extend(self, prefix_lens: IntsLike, seq_lens: IntsLike, last_loc: IntsLike,
                     extend_num_tokens: int) -> torch.Tensor | None:
        """Slots for tokens ``prefix_len .. seq_len - 1`` of every request, in both pools.

        New pages per request: ``ceil(seq_len/p) - ceil(prefix_len/p)`` in EACH pool; if
        either pool has fewer free pages than their sum, None and nothing changes. The full
        pool is allocated from ``last_loc``, the SWA pool from ``last_loc`` translated
        through the mapping (the SWA slot of each request's last cached token), so a partial
        last page continues in place in both. Page size 1 is ``alloc(extend_num_tokens)``.

        Args and returns as :meth:`PagedTokenToKVPoolAllocator.alloc_extend` (full slots).
        Source: ``SWATokenToKVPoolAllocator.alloc_extend`` (and ``alloc`` for page size 1,
        which SGLang's scheduler calls there).
        """
        pre, seq = as_i64("prefix_lens", prefix_lens), as_i64("seq_lens", seq_lens)
        last = as_i64("last_loc", last_loc)
        if len(seq) != len(pre):  # the paged allocator checks the rest
            raise bad_value("len(prefix_lens), len(seq_lens)", (len(pre), len(seq)), "two equal lengths")
        p = self.page_size
        need = int(np.sum((seq + p - 1) // p - (pre + p - 1) // p)) * p
        if need > self.full_available_size() or need > self.swa_available_size():
            return None
        swa_last = self.translate_loc_from_full_to_swa(last)
        full = self.full_attn_allocator.alloc_extend(pre, seq, last, extend_num_tokens)
        return self._pair(full, self.swa_attn_allocator.alloc_extend(pre, seq, swa_last,
                                                                     extend_num_tokens))

    def alloc_decode(self, seq_lens: IntsLike, last_loc: IntsLike) -> torch.Tensor | None:
        """One full slot and one SWA slot per request for the token being decoded (a new page
        in both pools where ``(seq_len - 1) % p == 0``). None, changing nothing, when either
        pool is short. Source: ``SWATokenToKVPoolAllocator.alloc_decode`` (page size 1:
        ``alloc(bs)``)."""
        seq, last = as_i64("seq_lens", seq_lens), as_i64("last_loc", last_loc)
        p = self.page_size
        need = int(np.count_nonzero((seq - 1) % p == 0)) * p
        if need > self.full_available_size() or need > self.swa_available_size():
            return None
        swa_last = self.translate_loc_from_full_to_swa(last)
        full = self.full_attn_allocator.alloc_decode(seq, last)
        return self._pair(full, self.swa_attn_allocator.alloc_decode(seq, swa_last))

    # ----- free -------------------------------------------------------------------------
    def free_swa(self, free_index: IntsLike) -> None:
        """Release the SWA slots of full slots ``free_index`` and clear their mapping; the
        full slots stay. Page size > 1: the SWA peers of every full page touched (slots
        already released are skipped), sorted unique pages to the front of the SWA free
        list; page size 1: as :meth:`free_swa_segment`. Inside a free group the release
        waits for :meth:`free_group_end`. Source: ``SWATokenToKVPoolAllocator.free_swa``."""
        idx = as_i64("free_index", free_index)
        if len(idx) == 0:
            return
        self._map.check_full(idx, "free_swa")
        if self.page_size == 1:
            self._free_swa_pages(idx)
            return
        self._swa_frees.free_slots(self._map.take_pages(idx))

    def free_swa_segment(self, free_index: IntsLike, start_pos: int) -> None:
        """:meth:`free_swa` for a segment of a request's row that starts on a page boundary
        (``start_pos``, its position in the row): the SWA peer page of each full page, in
        row order, to the front of the SWA free list (the back for page size 1). Every
        page's first slot must still have an SWA peer (AllocatorError otherwise).
        Source: ``free_swa_segment`` / ``_free_swa_pages``; the scheduler's window release
        (``free_swa_out_of_window_slots``) calls it."""
        idx = as_i64("free_index", free_index)
        if start_pos % self.page_size:
            raise bad_value("start_pos", start_pos, f"a multiple of page_size={self.page_size}")
        if len(idx):
            self._map.check_full(idx, "free_swa_segment")
            self._free_swa_pages(idx[::self.page_size])

    def _free_swa_pages(self, reps: np.ndarray) -> None:
        self._swa_frees.free_page_ids(self._map.take_page_peers(reps))

    def free_full(self, free_index: IntsLike) -> None:
        """Free full slots whose SWA slots were released already (by :meth:`free_swa`):
        ``free`` of the full pool. Source: ``SWATokenToKVPoolAllocator.free_full``."""
        idx = as_i64("free_index", free_index)
        if len(idx) == 0:
            return
        self._map.check_full(idx, "free_full")
        self._map.check_released(idx)
        self.full_attn_allocator.free(idx)

    def free_full_segment(self, free_index: IntsLike, start_pos: int) -> None:
        """:meth:`free_full` for a row segment starting on a page boundary (the full pool's
        ``free_segment``: pages in row order). Source: ``free_full_segment``."""
        idx = as_i64("free_index", free_index)
        if len(idx) == 0:
            return
        self._map.check_full(idx, "free_full_segment")
        self._map.check_released(idx)
        if start_pos % self.page_size:
            raise bad_value("start_pos", start_pos, f"a multiple of page_size={self.page_size}")
        self.full_attn_allocator.free_segment(idx)

    def free(self, free_index: IntsLike) -> None:
        """Free full slots and their SWA slots: :meth:`free_swa`, then the full pool's
        ``free``. Source: ``SWATokenToKVPoolAllocator.free``."""
        idx = as_i64("free_index", free_index)
        if len(idx) == 0:
            return
        self.free_swa(idx)
        self.free_full(idx)

    def free_segment(self, free_index: IntsLike, start_pos: int) -> None:
        """Free a row segment in both pools: :meth:`free_swa_segment`, then the full pool's
        ``free_segment`` (pages in row order). Source: ``free_segment``."""
        idx = as_i64("free_index", free_index)
        if len(idx) == 0:
            return
        self.free_swa_segment(idx, start_pos)
        self.full_attn_allocator.free_segment(idx)

    def free_group_begin(self) -> None:
        """Hold frees back until :meth:`free_group_end` (groups do not nest)."""
        self._swa_frees.begin()
        self.full_attn_allocator.free_group_begin()

    def free_group_end(self) -> None:
        """Release the held frees: the SWA pool's (:meth:`SWAFreeGroup.end`), then the full
        pool's own group. Source: ``SWATokenToKVPoolAllocator.free_group_end``."""
        self._swa_frees.end()
        self.full_attn_allocator.free_group_end()

    # ----- checks -----------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise :class:`AllocatorError` unless both pools are consistent (their own checks)
        and the mapping pairs them: only in-use full slots map, each in-use SWA slot is the
        peer of exactly one full slot, at the same offset in its page."""
        self.full_attn_allocator.check_invariants()
        self.swa_attn_allocator.check_invariants()
        self._map.check_invariants(self.full_attn_allocator._state,
                                   self.swa_attn_allocator._state)
