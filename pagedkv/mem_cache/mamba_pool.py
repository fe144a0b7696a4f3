"""The state-slot side of a linear-attention hybrid: the state pool and the request table that
gives every request a row and a state slot.

Follows SGLang 0.5.23 ``python/sglang/srt/mem_cache/memory_pool.py`` (``MambaPool``,
``HybridReqToTokenPool``) with ``mem_cache/allocator/mamba.py`` (``MambaSlotAllocator``, here
:class:`~pagedkv.mem_cache.allocator.mamba.MambaSlotAllocator`). A Qwen3-Next request holds
KV only in the few full-attention layers (its row of ``req_to_token`` over the token pool) and,
for every gated-delta-net layer, a fixed-size recurrent state: one slot of the state pool,
taken when the request first gets its row (admission) and kept until it finishes or is
retracted, whatever its length.

Where we simplify: no tensors. :class:`MambaPool` keeps the shapes, dtypes and bytes SGLang
allocates (``size + 1`` slots, the padding slot 0 included), not the tensors; the request ->
slot map (SGLang's ``req_index_to_mamba_index_mapping``, an int32 tensor) is a list of ints; a
request's track slots are a list on the request (SGLang's
``req_index_to_mamba_ping_pong_track_buffer_mapping`` is not kept).
With the mamba radix cache's ``extra_buffer`` strategy (``enable_mamba_extra_buffer``) each
request also holds ping-pong *track* slots (``mamba_ping_pong_track_buffer``: 2 with the
overlap loop, 1 without), taken with its state slot, into which the kernels copy the state at
checkpoint positions; the tree keeps one of them when the request is cached
(:meth:`HybridReqToTokenPool.donate_mamba_ping_pong_slot`, :meth:`free_mamba_cache`).
Not modelled: SGLang's lazy variant (``extra_buffer_lazy``), speculative decoding's
intermediate states, ReplaySSM rings, the int8 checkpoint pool and
the PLE side pools (all off for Qwen3-Next by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pagedkv.configs.mamba_utils import STATE_DTYPE_BYTES, Mamba2CacheParams
from pagedkv.errors import AllocatorError, OutOfMemoryError, bad_value, check_positive_int
from pagedkv.mem_cache.allocator.mamba import MambaSlotAllocator
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.releases import DEFAULT_RELEASE, Release, as_release
from pagedkv.units import GiB

#: SGLang's words when a state slot runs out inside ``HybridReqToTokenPool.alloc``.
NO_MAMBA_SLOT = ("Not enough space for mamba cache, try to increase --mamba-full-memory-ratio "
                 "or --max-mamba-cache-size.")


class MambaPool:
    """What SGLang's ``MambaPool`` allocates for ``size`` slots: per conv tensor a
    ``[layers, size + 1, *conv_shape]`` buffer in ``conv_dtype`` and one
    ``[layers, size + 1, *temporal_shape]`` buffer in ``temporal_dtype`` (slot 0 pads).

    Args:
        size: slots handed out (``max_mamba_cache_size``).
        cache_params: the shapes, layers and dtypes
            (:func:`pagedkv.configs.mamba_utils.gdn_cache_params`).

    Raises:
        ConfigError: ``size`` below 1.
    """

    def __init__(self, size: int, cache_params: Mamba2CacheParams) -> None:
        self.size = check_positive_int("size", size)
        self.cache_params = cache_params
        self.num_mamba_layers = len(cache_params.layers)

    @property
    def conv_state_shapes(self) -> tuple[tuple[int, ...], ...]:
        """The conv buffers' shapes, ``(layers, size + 1, dim, conv_kernel - 1)`` each."""
        return tuple((self.num_mamba_layers, self.size + 1, *shape)
                     for shape in self.cache_params.shape.conv)

    @property
    def temporal_state_shape(self) -> tuple[int, ...]:
        """The recurrent buffer's shape, ``(layers, size + 1, heads, head_dim, state)``."""
        return (self.num_mamba_layers, self.size + 1, *self.cache_params.shape.temporal)

    @property
    def bytes_per_slot(self) -> int:
        """Bytes of one slot over every layer (``mamba_cache_per_req``)."""
        return self.cache_params.mamba_cache_per_req

    @property
    def conv_state_bytes(self) -> int:
        """Bytes of the conv buffers (``size + 1`` slots), as SGLang's log line sums them."""
        return (self.size + 1) * self.cache_params.conv_bytes_per_req

    @property
    def ssm_state_bytes(self) -> int:
        """Bytes of the recurrent buffer (``size + 1`` slots)."""
        return (self.size + 1) * self.cache_params.temporal_bytes_per_req

    @property
    def mem_usage(self) -> float:
        """The pool's size in GiB (SGLang's ``mem_usage``, which it prints as GB)."""
        return (self.conv_state_bytes + self.ssm_state_bytes) / GiB

    @property
    def dtype_bytes(self) -> tuple[int, int]:
        """Bytes per element of the conv and the recurrent state."""
        return (STATE_DTYPE_BYTES[self.cache_params.conv_dtype],
                STATE_DTYPE_BYTES[self.cache_params.temporal_dtype])


class MambaRequest(Protocol):
    """What the pool reads and sets on a request: its row and its state slot, -1 for none
    (SGLang's ``req.kv.req_pool_idx`` / ``req.kv.mamba_pool_idx``, None for none)."""

    req_pool_idx: int
    mamba_pool_idx: int
    mamba_ping_pong_track_buffer: list[int] | None
    mamba_next_track_idx: int | None
    mamba_last_track_idx: int | None
    mamba_last_track_seqlen: int | None
    mamba_prev_track_seqlen: int | None


class HybridReqToTokenPool(ReqToTokenPool):
    """The request table of a linear-attention hybrid: a row per request, as
    :class:`~pagedkv.mem_cache.memory_pool.ReqToTokenPool`, plus a state slot per request.

    Args:
        size: request rows (``max_running_requests``). mamba_size: state slots.
        max_context_len: columns per row. cache_params: the state's shapes and dtypes.
        padding_row, reuse_last_freed: the rows' release behaviour, as for
            :class:`ReqToTokenPool`; :meth:`for_release` takes a release instead.
        mamba_tracking_slots: the ``extra_buffer`` strategy's track slots per request
            (:func:`pagedkv.hybrid_pools.mamba_tracking_slots`: 2 with the overlap loop, 1
            without); 0: none (no radix cache, or ``no_buffer``).

    Attributes:
        mamba_pool: :class:`MambaPool`. mamba_allocator: the slots' free list.
        req_index_to_mamba_index_mapping: row -> its request's slot (0 where never set).

    Raises:
        ConfigError: a size below 1.
    """

    def __init__(self, size: int, mamba_size: int, max_context_len: int,
                 cache_params: Mamba2CacheParams, device: str = "cpu", *,
                 padding_row: bool = DEFAULT_RELEASE.req_pool_padding_row,
                 reuse_last_freed: bool = DEFAULT_RELEASE.req_pool_reuses_last_freed,
                 mamba_tracking_slots: int = 0) -> None:
        super().__init__(size, max_context_len, device, padding_row=padding_row,
                         reuse_last_freed=reuse_last_freed)
        self.mamba_pool = MambaPool(mamba_size, cache_params)
        self.mamba_allocator = MambaSlotAllocator(mamba_size)
        self.req_index_to_mamba_index_mapping = [0] * self.rows
        if mamba_tracking_slots not in (0, 1, 2):
            raise bad_value("mamba_tracking_slots", mamba_tracking_slots, "0, 1 or 2")
        self.enable_mamba_extra_buffer = mamba_tracking_slots > 0
        # SGLang's mamba_ping_pong_track_buffer_size and mamba_initial_tracking_slots (equal
        # but for the lazy variant, not modelled)
        self.mamba_ping_pong_track_buffer_size = mamba_tracking_slots
        self.mamba_initial_tracking_slots = mamba_tracking_slots

    @classmethod
    def for_release(cls, size: int, max_context_len: int, release: Release | str,  # type: ignore[override]
                    device: str = "cpu", *, mamba_size: int = 1,
                    cache_params: Mamba2CacheParams | None = None,
                    mamba_tracking_slots: int = 0) -> HybridReqToTokenPool:
        """The pool ``release`` builds (its rows' order; the slots' is the same in both).

        Raises:
            ConfigError: an unknown release, a bad size, or no ``cache_params``.
        """
        if cache_params is None:
            raise bad_value("cache_params", None, "a Mamba2CacheParams")
        r = as_release(release)
        return cls(size, mamba_size, max_context_len, cache_params, device,
                   padding_row=r.req_pool_padding_row,
                   reuse_last_freed=r.req_pool_reuses_last_freed,
                   mamba_tracking_slots=mamba_tracking_slots)

    def mamba_slots_needed(self, reqs: Sequence[MambaRequest]) -> int:
        """State slots :meth:`alloc` takes for ``reqs``: one per request holding none, plus
        the track slots of each without a track buffer (SGLang 0.5.23
        ``mem_cache/allocation.py`` ``ensure_mamba_capacity``), checked by the scheduler
        before it binds any row."""
        return sum((req.mamba_pool_idx < 0) + (
            self.mamba_initial_tracking_slots if self.enable_mamba_extra_buffer
            and req.mamba_ping_pong_track_buffer is None else 0) for req in reqs)

    def alloc(self, reqs: Sequence[MambaRequest]) -> list[int] | None:  # type: ignore[override]
        """Give each request of ``reqs`` a row and a state slot, keeping what it holds (a
        chunked request's next chunk keeps both), and return every request's row in order.

        New rows are taken as :meth:`ReqToTokenPool.alloc` takes them and handed to the
        requests without one in list order; new slots come from the front of the slots' free
        list, one request at a time, in list order.

        Returns None, changing nothing, when too few rows are free (SGLang: ``alloc_rows``).

        Raises:
            OutOfMemoryError: too few state slots (SGLang asserts, with these words, after
                it has taken the rows; pagedkv checks first and changes nothing; SGLang's
                scheduler never gets here, ``ensure_mamba_capacity`` having checked).
            AllocatorError: a request names a row that is not allocated, or a free slot.
        """
        for req in reqs:
            if req.req_pool_idx >= 0 and (not self.first_row <= req.req_pool_idx < self.rows
                                          or self._row_free[req.req_pool_idx]):
                raise AllocatorError(f"request row {req.req_pool_idx} is not allocated")
            if req.mamba_pool_idx >= 0 and not self.mamba_allocator.is_allocated(
                    req.mamba_pool_idx):
                raise AllocatorError(f"state slot {req.mamba_pool_idx} is not allocated")
        fresh = [req for req in reqs if req.req_pool_idx < 0]
        if len(fresh) > self.available_size():
            return None
        if self.mamba_slots_needed(reqs) > self.mamba_allocator.available_size():
            raise OutOfMemoryError(
                f"{NO_MAMBA_SLOT} needed {self.mamba_slots_needed(reqs)} state slots, "
                f"{self.mamba_allocator.available_size()} free of {self.mamba_pool.size}")
        rows = super().alloc(len(fresh)) if fresh else []
        assert rows is not None  # checked above
        for req, row in zip(fresh, rows, strict=True):
            req.req_pool_idx = row
        for req in reqs:
            if req.mamba_pool_idx < 0:
                slot = self.mamba_allocator.alloc(1)
                assert slot is not None  # checked above
                req.mamba_pool_idx = slot[0]
            self.req_index_to_mamba_index_mapping[req.req_pool_idx] = req.mamba_pool_idx
            if self.enable_mamba_extra_buffer and req.mamba_ping_pong_track_buffer is None:
                self._alloc_ping_pong_buffer(req)
        return [req.req_pool_idx for req in reqs]

    def _alloc_ping_pong_buffer(self, req: MambaRequest) -> None:
        """A new request's track slots, taken together from the front of the free list;
        the next state is tracked into slot 0 of the buffer, the last one is "in" the other
        (``_alloc_ping_pong_buffer``, not lazy)."""
        slots = self.mamba_allocator.alloc(self.mamba_initial_tracking_slots)
        assert slots is not None  # counted by mamba_slots_needed
        req.mamba_ping_pong_track_buffer = list(slots)
        req.mamba_prev_track_seqlen = None
        req.mamba_next_track_idx = 0
        req.mamba_last_track_idx = self.get_mamba_ping_pong_other_idx(0)

    def get_mamba_ping_pong_other_idx(self, idx: int) -> int:
        """The other track slot's position (the same one with a single track slot)."""
        return 1 - idx if self.mamba_ping_pong_track_buffer_size == 2 else idx

    def donate_mamba_ping_pong_slot(self, req: MambaRequest, new_slot: int) -> int:
        """Hand the track slot holding the last tracked state (``mamba_last_track_idx``) to
        the tree and put ``new_slot`` in its place; returns the donated slot
        (``donate_mamba_ping_pong_slot``)."""
        buf = req.mamba_ping_pong_track_buffer
        assert buf is not None and req.mamba_last_track_idx is not None
        donated = buf[req.mamba_last_track_idx]
        buf[req.mamba_last_track_idx] = new_slot
        return donated

    def get_mamba_indices(self, req_indices: Sequence[int]) -> list[int]:
        """The state slots of rows ``req_indices`` (what the linear-attention layers read)."""
        return [self.req_index_to_mamba_index_mapping[row] for row in req_indices]

    def free_mamba_cache(self, req: MambaRequest, keep: int | None = None) -> None:
        """Return ``req``'s state slot to the back of the slots' free list, then its track
        slots but the one at position ``keep`` (which the tree keeps), in buffer order (its
        row is freed apart, with :meth:`ReqToTokenPool.free`, as SGLang frees the two
        apart); the request's track state is cleared (``free_mamba_cache``).

        Raises:
            AllocatorError: ``req`` holds no slot (SGLang: "double free? mamba_index is None").
        """
        if req.mamba_pool_idx < 0:
            raise AllocatorError("double free? the request holds no state slot")
        self.mamba_allocator.free([req.mamba_pool_idx])
        req.mamba_pool_idx = -1
        if self.enable_mamba_extra_buffer:
            buf = req.mamba_ping_pong_track_buffer or []
            self.mamba_allocator.free([s for i, s in enumerate(buf) if i != keep and s >= 0])
            req.mamba_ping_pong_track_buffer = None
            req.mamba_next_track_idx = req.mamba_last_track_idx = None
            req.mamba_last_track_seqlen = req.mamba_prev_track_seqlen = None

    def check_invariants(self) -> None:
        """The rows' and the slots' invariants, and every mapped slot in ``0 .. mamba_size``."""
        super().check_invariants()
        self.mamba_allocator.check_invariants()
        if any(not 0 <= s <= self.mamba_pool.size for s in self.req_index_to_mamba_index_mapping):
            raise AllocatorError("a request row maps to a state slot outside the pool")
