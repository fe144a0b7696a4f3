"""The two memory pools: the page table (request -> slots) and the K/V tensors themselves.

Follows SGLang's ``python/sglang/srt/mem_cache/memory_pool.py`` (``ReqToTokenPool``,
``MHATokenToKVPool``). Which slots are free is the allocator's business
(:mod:`pagedkv.mem_cache.allocator`); these classes only store.
"""

from __future__ import annotations

import numpy as np
import torch

from pagedkv.errors import AllocatorError, bad_value, check_positive_int
from pagedkv.releases import DEFAULT_RELEASE, Release, as_release


class ReqToTokenPool:
    """The page table: row = request row, column = logical token position, value = KV slot.

    Args:
        size: request rows handed out (SGLang's ``max_num_reqs``). max_context_len: columns
            per row. padding_row: add row 0, never handed out (``Release.req_pool_padding_row``).
        reuse_last_freed: take rows from the back of the free list
            (``Release.req_pool_reuses_last_freed``). Both default to 0.5.23's;
            :meth:`for_release` takes a release instead.

    Attributes:
        req_to_token: int32 ``[rows, max_context_len]``, zero-initialised, so an unused row
            maps every position to slot 0, the reserved dummy slot.
        rows: rows of ``req_to_token``: ``size``, plus the padding row.
        free_slots: free row ids, in the order SGLang keeps them.

    The two releases differ in the rows (``python/sglang/srt/mem_cache/memory_pool.py``,
    ``ReqToTokenPool``):

    - 0.5.9: ``size`` rows, all handed out; ``alloc`` takes rows from the FRONT of the free
      list, ``free`` appends at the back, so a freed row waits behind every never-used one;
    - 0.5.23: ``size + 1`` rows; row 0 is a padding row that is never handed out (CUDA-graph
      padded batches point at it); ``alloc_rows`` takes rows from the BACK of the free list
      (``free_slots[-n:]``), ``free_rows`` appends there, so the row freed last is reused
      first.

    Where we simplify: SGLang adds a few spare columns (``context_len + 4``) and does not
    check writes; we reject writes past a row and writes into a free row. For speed, a
    bool array ``_row_free`` mirrors ``free_slots`` so that ``free`` and ``write`` check a
    row in O(1); :meth:`check_invariants` checks that the two agree.

    Raises:
        ConfigError: ``size`` or ``max_context_len`` below 1.
    """

    def __init__(self, size: int, max_context_len: int, device: str = "cpu", *,
                 padding_row: bool = DEFAULT_RELEASE.req_pool_padding_row,
                 reuse_last_freed: bool = DEFAULT_RELEASE.req_pool_reuses_last_freed) -> None:
        self.size = check_positive_int("size", size)
        self.max_context_len = check_positive_int("max_context_len", max_context_len)
        self.reuse_last_freed = bool(reuse_last_freed)
        self.first_row = int(bool(padding_row))  # the padding row is row 0
        self.rows = size + self.first_row
        self.req_to_token = torch.zeros((self.rows, max_context_len), dtype=torch.int32,
                                        device=device)
        self.free_slots: list[int] = list(range(self.first_row, self.rows))
        self._row_free = np.zeros(self.rows, dtype=bool)
        self._row_free[self.first_row:] = True

    @classmethod
    def for_release(cls, size: int, max_context_len: int, release: Release | str,
                    device: str = "cpu") -> ReqToTokenPool:
        """The pool ``release`` (a :class:`Release` or its name) builds.

        Raises:
            ConfigError: an unknown release, or a bad size.
        """
        r = as_release(release)
        return cls(size, max_context_len, device, padding_row=r.req_pool_padding_row,
                   reuse_last_freed=r.req_pool_reuses_last_freed)

    def available_size(self) -> int:
        """Free request rows."""
        return len(self.free_slots)

    def alloc(self, need_size: int = 1) -> list[int] | None:
        """Take ``need_size`` rows, or None if short: from the front of the free list
        (0.5.9) or from its back, in list order (0.5.23, ``free_slots[-need_size:]``)."""
        check_positive_int("need_size", need_size)
        if need_size > len(self.free_slots):
            return None
        if self.reuse_last_freed:
            rows = self.free_slots[-need_size:]
            del self.free_slots[-need_size:]
        else:
            rows = self.free_slots[:need_size]
            del self.free_slots[:need_size]
        self._row_free[rows] = False
        return rows

    def free(self, free_index: int | list[int]) -> None:
        """Return rows to the back of the free list; AllocatorError for a free/unknown row."""
        if isinstance(free_index, int) and self.first_row <= free_index < self.rows \
                and not self._row_free[free_index]:  # one good row (the common case), checked
            self._row_free[free_index] = True
            self.free_slots.append(free_index)
            return
        rows = [free_index] if isinstance(free_index, int) else list(free_index)
        idx = np.asarray(rows, dtype=np.int64)
        lo = self.first_row
        if len(rows) and (idx.min() < lo or idx.max() >= self.rows or self._row_free[idx].any()
                          or len(set(rows)) != len(rows)):
            for row in rows:  # find the first bad row, for the message
                if not lo <= row < self.rows:
                    raise AllocatorError(f"cannot free request row {row}: "
                                         f"outside [{lo}, {self.rows})")
                if self._row_free[row] or rows.count(row) > 1:
                    raise AllocatorError(f"cannot free request row {row}: it is already free")
        self._row_free[idx] = True
        self.free_slots.extend(rows)

    def write(self, req_idx: int, positions: torch.Tensor | list[int],
              slots: torch.Tensor | list[int]) -> None:
        """``req_to_token[req_idx, positions] = slots`` (int32 storage, int64 accepted).

        Raises :class:`AllocatorError` if the row is free or a position is past the row
        (``>= max_context_len``), ConfigError on a shape mismatch.
        """
        if not self.first_row <= req_idx < self.rows or self._row_free[req_idx]:
            raise AllocatorError(f"cannot write to request row {req_idx}: not an allocated row")
        pos = torch.as_tensor(positions, dtype=torch.int64)
        slots = torch.as_tensor(slots)
        if len(pos) and (int(pos.min()) < 0 or int(pos.max()) >= self.max_context_len):
            raise AllocatorError(f"cannot write positions up to {int(pos.max())} into a row of "
                                 f"max_context_len={self.max_context_len}")
        if slots.shape != pos.shape:
            raise bad_value("slots.shape", tuple(slots.shape), f"{tuple(pos.shape)} (positions)")
        self.req_to_token[req_idx, pos] = slots.to(torch.int32)

    def check_invariants(self) -> None:
        """Free rows are unique and in range, and ``_row_free`` marks exactly them."""
        if len(set(self.free_slots)) != len(self.free_slots):
            raise AllocatorError("a request row is on the free list twice")
        if any(not self.first_row <= r < self.rows for r in self.free_slots):
            raise AllocatorError(f"free list holds rows outside [{self.first_row}, {self.rows})")
        if sorted(self.free_slots) != np.flatnonzero(self._row_free).tolist():
            raise AllocatorError("the free list and the free-row marks disagree")


class MHATokenToKVPool:
    """The K and V tensors, one pair per layer, indexed by KV slot.

    Layout (SGLang): per layer ``k_buffer[l]`` and ``v_buffer[l]`` of shape
    ``[size + page_size, head_num, head_dim]``, dtype ``dtype``; rows ``0 .. page_size-1``
    are page 0, the dummy page. mini-sglang allocates one tensor
    ``[2, layer_num, num_pages, page_size, head_num, head_dim]`` instead: reshaping one
    layer's ``[num_pages * page_size, head_num, head_dim]`` K block gives the same bytes in
    the same order, so a slot ``s`` is row ``s`` of either layout.

    Args:
        size: usable slots; page_size: slots per page; head_num: KV heads on this rank;
        head_dim: elements per head; layer_num: layers.
    """

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, head_num: int,
                 head_dim: int, layer_num: int, device: str = "cpu") -> None:
        self.size = check_positive_int("size", size)
        self.page_size = check_positive_int("page_size", page_size)
        self.head_num = check_positive_int("head_num", head_num)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.layer_num = check_positive_int("layer_num", layer_num)
        self.dtype = dtype
        shape = (size + page_size, head_num, head_dim)
        self.k_buffer = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layer_num)]
        self.v_buffer = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layer_num)]

    def _layer(self, layer_id: int) -> int:
        if isinstance(layer_id, bool) or not isinstance(layer_id, int) or not (
                0 <= layer_id < self.layer_num):
            raise bad_value("layer_id", layer_id, f"an integer in [0, {self.layer_num})")
        return layer_id

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        """Layer ``layer_id``'s K, ``[size + page_size, head_num, head_dim]`` (a view)."""
        return self.k_buffer[self._layer(layer_id)]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        """Layer ``layer_id``'s V, ``[size + page_size, head_num, head_dim]`` (a view)."""
        return self.v_buffer[self._layer(layer_id)]

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor,
                      cache_v: torch.Tensor, *, check_loc: bool = True) -> None:
        """Scatter ``cache_k``/``cache_v`` (``[n, head_num, head_dim]``) to slots ``loc``.

        ``loc`` is int64 ``[n]`` in ``[0, size + page_size)``; values are cast to
        ``dtype`` as SGLang does. ConfigError on a bad layer, shape or slot.
        ``check_loc=False``: the caller checked ``loc``'s slots already (a model's pass
        checks them once on the host, ``backend.init_forward_metadata``); reading them here
        would sync the device in every layer.
        Source: ``MHATokenToKVPool.set_kv_buffer``.
        """
        layer = self._layer(layer_id)
        rows = self.size + self.page_size
        if loc.dim() != 1 or loc.dtype not in (torch.int32, torch.int64):
            raise bad_value("loc", f"{loc.dtype} {tuple(loc.shape)}", "a 1-D integer tensor")
        if check_loc and len(loc) and (int(loc.min()) < 0 or int(loc.max()) >= rows):
            raise bad_value("loc", loc.tolist(), f"slots in [0, {rows})")
        want = (len(loc), self.head_num, self.head_dim)
        for name, t in (("cache_k", cache_k), ("cache_v", cache_v)):
            if tuple(t.shape) != want:
                raise bad_value(f"{name}.shape", tuple(t.shape), f"{want}")
        self.k_buffer[layer][loc] = cache_k.to(self.dtype)
        self.v_buffer[layer][loc] = cache_v.to(self.dtype)

    def kv_size_bytes(self) -> tuple[int, int]:
        """(K bytes, V bytes) over all layers, page 0 included, as SGLang's start-up log.

        Source: ``MHATokenToKVPool.get_kv_size_bytes``.
        """
        k = sum(t.numel() * t.element_size() for t in self.k_buffer)
        v = sum(t.numel() * t.element_size() for t in self.v_buffer)
        return k, v
