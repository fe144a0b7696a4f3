"""A batch of requests: a prefill pass's slots, the running batch, the decode memory check.

Follows SGLang's ``python/sglang/srt/managers/schedule_batch.py`` (``ScheduleBatch``: ``init_new``,
``prepare_for_extend``, ``merge_batch``, ``filter_batch``, ``new_tokens_required_next_decode``,
``check_decode_mem``, ``retract_decode``, ``release_req``, ``prepare_for_decode``; 0.5.9's
``get_model_worker_batch``), 0.5.23 and 0.5.9 alike except where
:meth:`ScheduleBatch.retract_decode` says (retraction is :mod:`pagedkv.managers.retract_decode`,
whose functions these methods call). The scheduler keeps one running batch and builds one per
prefill pass (:meth:`ScheduleBatch.init_new`). The running batch is kept as numpy arrays, one entry
per request, so a decode step costs a handful of vector operations whatever the batch size; the
:class:`~pagedkv.managers.req.Req` objects are brought up to date (:meth:`sync`) whenever something
reads them.

A request that has finished stays in the batch until :meth:`filter_finished` drops it (``finished``
marks it; its KV is already released). SGLang 0.5.9 drops finished requests only when the next
decode step is prepared, so in the meantime they still count in admission's reservation; 0.5.23
drops them at the start of every step.

In the overlap loop ``kv_len`` runs one token ahead of ``generated`` for requests whose last pass is
in flight: their next slot is allocated before their token is committed.

Where we simplify: one decode token per step (no speculative decoding), greedy bookkeeping only (no
stop strings: a simulated request stops at its ``output_len``, a real one at EOS or
``max_new_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

import numpy as np

from pagedkv.errors import OutOfMemoryError
from pagedkv.managers.req import Req
from pagedkv.managers.retract_decode import release_req, retract_decode, retraction_order
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator, decode_need
from pagedkv.mem_cache.base_prefix_cache import BasePrefixCache
from pagedkv.mem_cache.common import alloc_req_slots
from pagedkv.mem_cache.mamba_cache import MambaPrefixCache
from pagedkv.mem_cache.mamba_radix_cache import MAMBA_CHUNK_SIZE
from pagedkv.mem_cache.mamba_track import (
    DecodeTrack,
    mamba_track_grid,
    prepare_decode_tracks,
    prepare_extend_tracks,
)
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.swa_cache import SWAPrefixCache
from pagedkv.model_executor.forward_batch_info import ForwardBatch
from pagedkv.releases import DEFAULT_RELEASE

_FIELDS = ("prompt_len", "max_new_tokens", "stop_at", "generated", "kv_len", "req_pool_idx",
           "last_loc")


class ScheduleBatch:
    """Requests that have been prefilled and now decode one token per step.

    Args:
        req_to_token_pool, allocator, tree_cache: the memory the batch's requests hold.

    Attributes:
        reqs: the requests, in batch order.
        prompt_len, max_new_tokens, stop_at, generated, kv_len, req_pool_idx, last_loc:
            int64 ``[len(reqs)]``; ``kv_len`` is ``kv_committed_len``, ``last_loc`` the slot
            of each request's last KV token, ``stop_at`` the output length at which it stops
            by itself (:meth:`Req.should_stop`: ``max_new_tokens``, or its ``output_len`` if
            that comes first and EOS counts; a real model's EOS is checked apart).
        ignore_eos, finished: bool ``[len(reqs)]``.
        batch_is_full: SGLang's flag: admission found no room; prefill is not tried again
            until the batch shrinks.
    """

    def __init__(self, req_to_token_pool: ReqToTokenPool, allocator: BaseTokenToKVPoolAllocator,
                 tree_cache: BasePrefixCache) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.tree_cache = tree_cache
        self.page_size = allocator.page_size
        self.table = req_to_token_pool.req_to_token.numpy()  # a view: writes reach the pool
        self.reqs: list[Req] = []
        for name in _FIELDS:
            setattr(self, name, np.zeros(0, dtype=np.int64))
        self.ignore_eos = np.zeros(0, dtype=bool)
        self.finished = np.zeros(0, dtype=bool)
        self.batch_is_full = False
        # a linear-attention hybrid with the mamba radix cache: the last decode step's
        # recorded states (:func:`prepare_decode_tracks`) and the loop they are read in
        self.mamba_track: DecodeTrack | None = None
        self.enable_overlap = False

    def __len__(self) -> int:
        return len(self.reqs)

    # ----- a prefill pass -----------------------------------------------------------------
    @classmethod
    def init_new(cls, reqs: Sequence[Req], req_to_token_pool: ReqToTokenPool,
                 allocator: BaseTokenToKVPoolAllocator,
                 tree_cache: BasePrefixCache) -> ScheduleBatch:
        """A prefill pass's batch over the admitted ``reqs`` (SGLang ``init_new``), read by
        :meth:`prepare_for_extend` only: its columns stay empty (its requests join the
        running batch's through :meth:`merge_batch`)."""
        batch = cls(req_to_token_pool, allocator, tree_cache)
        batch.reqs = list(reqs)
        return batch

    def prepare_for_extend(self, chunked_req: Req | None) -> ForwardBatch:
        """Rows, prefix slots and the slots of the tokens computed now; returns the pass
        (what 0.5.9's ``get_model_worker_batch`` hands the worker; 0.5.23 hands it the batch).

        The requests without a row get one (``alloc_req_slots``, one call for the pass; on a
        linear-attention hybrid also a state slot) holding their matched prefix's slots; the tree evicts
        ``extend_tokens`` (plus a page per request for pages > 1) and the extend slots are
        allocated. ``chunked_req`` (cut short) does not sample.

        Raises:
            OutOfMemoryError: the allocator is short (admission should have prevented it).
        Source: ``ScheduleBatch.prepare_for_extend``, ``alloc_for_extend`` (0.5.23
        ``mem_cache/allocation.py``, 0.5.9 ``mem_cache/common.py``).
        """
        admitted, table, p, n = self.reqs, self.table, self.page_size, len(self.reqs)
        if isinstance(self.tree_cache, SWAPrefixCache):  # alloc_for_extend's maybe_evict_swa
            self.tree_cache.maybe_evict_swa_extend(admitted)
        fresh = [req for req in admitted if req.req_pool_idx < 0]  # a continuing chunk keeps
        mamba = self.tree_cache if isinstance(self.tree_cache, MambaPrefixCache) else None
        if mamba is not None:  # alloc_req_slots' ensure_mamba_capacity: the tree evicts states
            mamba.ensure_mamba_capacity(admitted)
        alloc_req_slots(fresh, self.req_to_token_pool)  # its row (and state slot)
        for req in fresh:
            table[req.req_pool_idx, :req.prefix_len] = req._prefix_slots
            req._prefix_slots = None  # used once (a million kept would be a million tensors)
        prefix_l, ext_l = [r.prefix_len for r in admitted], [r.extend_len for r in admitted]
        rows_l = [r.req_pool_idx for r in admitted]
        prefix, ext, rows = (np.array(v, dtype=np.int64) for v in (prefix_l, ext_l, rows_l))
        total = sum(ext_l)
        # the slot of each request's last cached token (-1: none), for its partial page
        last = np.array([table[row, pre - 1] if pre else -1
                         for row, pre in zip(rows_l, prefix_l, strict=True)], dtype=np.int64)
        self.tree_cache.evict_from_tree_cache(total if p == 1 else total + n * p)
        out = self.allocator.alloc_extend(prefix, prefix + ext, last, total)
        if out is None:
            raise OutOfMemoryError(f"prefill of {total} tokens does not fit "
                                   f"{self.allocator.available_size()} free slots")
        slots = out.numpy()
        start = 0
        for req, row, pre, e in zip(admitted, rows_l, prefix_l, ext_l, strict=True):
            table[row, pre:pre + e] = slots[start:start + e]
            start += e
            req.kv_committed_len = pre + e
        if mamba is not None and mamba.extra_buffer:  # the states this pass records
            tree = mamba.tree
            prepare_extend_tracks(admitted, mamba.req_to_token_pool, tree.mamba_checkpoint_grid,
                                  tree.mamba_cache_chunk_size, MAMBA_CHUNK_SIZE)
        sample = np.array([r is not chunked_req for r in admitted], dtype=bool)
        return ForwardBatch("extend", list(admitted), rows, prefix, ext, slots, sample,
                            sum(prefix_l), self.req_to_token_pool)

    # ----- membership -------------------------------------------------------------------
    def merge_batch(self, reqs: Sequence[Req]) -> None:
        """Append prefilled requests at the end (SGLang ``merge_batch``, given the pass's
        batch once ``filter_batch`` has dropped its finished and chunked requests)."""
        if not reqs:
            return
        self.reqs.extend(reqs)
        table = self.table
        cols = np.array([(r.prompt_len, r.max_new_tokens,
                          r.max_new_tokens if r.ignore_eos or r.output_len is None
                          else min(r.output_len, r.max_new_tokens), r.generated,
                          r.kv_committed_len, r.req_pool_idx,
                          table[r.req_pool_idx, r.kv_committed_len - 1]) for r in reqs],
                        dtype=np.int64).T  # one row per _FIELDS name
        for name, col in zip(_FIELDS, cols, strict=True):
            setattr(self, name, np.concatenate((getattr(self, name), col)))
        self.ignore_eos = np.concatenate((self.ignore_eos, [r.ignore_eos for r in reqs]))
        self.finished = np.concatenate((self.finished, [r.finished for r in reqs]))

    def sync(self, idx: Sequence[int] | None = None) -> None:
        """Copy ``generated`` and ``kv_len`` back into the live :class:`Req` objects (a
        finished request keeps what it had when it released its KV)."""
        for i in range(len(self.reqs)) if idx is None else idx:
            if not self.finished[i]:
                r = self.reqs[i]
                r.generated, r.kv_committed_len = int(self.generated[i]), int(self.kv_len[i])

    def live_index(self, rows: np.ndarray) -> np.ndarray:
        """int64 ``[len(rows)]``: the batch index of the unfinished request holding each
        ``req_to_token`` row of ``rows`` (int64, each >= 0), -1 where none of them does. A row
        is held by one live request at a time, so a live request's row finds it here without
        comparing objects (a finished request's row may be free or another's)."""
        live = np.flatnonzero(~self.finished)
        where = np.full(self.table.shape[0], -1, dtype=np.int64)
        where[self.req_pool_idx[live]] = live
        return where[rows]

    def filter_batch(self, keep: Sequence[int] | np.ndarray) -> None:
        """Keep the requests at indices ``keep``, in that order (SGLang ``filter_batch``)."""
        keep = np.asarray(keep, dtype=np.int64)
        picked = keep.tolist()
        # itemgetter picks in C; with one index it returns the item, not a tuple
        self.reqs = ([self.reqs[picked[0]]] if len(picked) == 1
                     else list(itemgetter(*picked)(self.reqs)) if picked else [])
        for name in (*_FIELDS, "ignore_eos", "finished"):
            setattr(self, name, getattr(self, name)[keep])

    def filter_finished(self) -> int:
        """Drop finished requests (already released); return how many left."""
        if not self.finished.any():
            return 0
        n = int(self.finished.sum())
        self.filter_batch(np.flatnonzero(~self.finished))
        return n

    # ----- memory -----------------------------------------------------------------------
    def new_tokens_required_next_decode(self, idx: Sequence[int] | np.ndarray | None = None) -> int:
        """Slots the next decode step needs: ``page_size`` per request whose ``kv_len`` is a
        multiple of it (its next token starts a page). ``idx`` selects a subset.
        Source: ``ScheduleBatch.new_tokens_required_next_decode``."""
        kv = self.kv_len if idx is None else self.kv_len[np.asarray(idx, dtype=np.int64)]
        return decode_need(kv, self.page_size)

    def check_decode_mem(self, idx: Sequence[int] | np.ndarray | None = None) -> bool:
        """Whether the next decode step fits, after evicting from the tree to make room.
        Source: ``ScheduleBatch.check_decode_mem``."""
        need = self.new_tokens_required_next_decode(idx)
        self.tree_cache.evict_from_tree_cache(need)
        return self.allocator.available_size() >= need

    # ----- retraction (pagedkv.managers.retract_decode) --------------------------------
    def retraction_order(self) -> list[int]:
        """Batch indices in ``retract_decode``'s order; victims are popped from the END
        (:func:`~pagedkv.managers.retract_decode.retraction_order`)."""
        return retraction_order(self)

    def release_req(self, i: int, remaining: int, retract_decode_steps: int) -> None:
        """Free victim ``i``'s KV (not inserted) and row, then evict room for the
        ``remaining`` requests (:func:`~pagedkv.managers.retract_decode.release_req`)."""
        release_req(self, i, remaining, retract_decode_steps)

    def retract_decode(self, retract_decode_steps: int = 20, *,
                       abort_last_request: bool = DEFAULT_RELEASE.abort_last_request,
                       ) -> tuple[list[Req], float, list[Req]]:
        """Retract requests until the rest of the batch's next step fits; returns
        ``(retracted, new ratio, aborted)``. OutOfMemoryError when even one request cannot
        decode and ``abort_last_request`` is False (0.5.9)
        (:func:`~pagedkv.managers.retract_decode.retract_decode`)."""
        return retract_decode(self, retract_decode_steps,
                              abort_last_request=abort_last_request)

    def prepare_for_decode(self) -> None:
        """Give every request a slot for its newest token (evicting from the tree first if
        the free list is short of ``bs`` slots, ``bs * page_size`` for pages > 1).

        Raises:
            OutOfMemoryError: the allocator is short (the memory check was skipped).
        Source: ``ScheduleBatch.prepare_for_decode`` (``alloc_for_decode``).
        """
        bs, p = len(self.reqs), self.page_size
        if isinstance(self.tree_cache, SWAPrefixCache):  # alloc_for_decode's maybe_evict_swa
            self.tree_cache.maybe_evict_swa_decode(self.reqs, (self.prompt_len + self.generated).tolist())
        self.tree_cache.evict_from_tree_cache(bs if p == 1 else bs * p)
        out = self.allocator.alloc_decode(self.kv_len + 1, self.last_loc)
        if out is None:
            raise OutOfMemoryError(
                f"decode needs {self.new_tokens_required_next_decode()} slots, "
                f"{self.allocator.available_size()} free: the memory check was skipped")
        self.last_loc = out.numpy()
        self.table[self.req_pool_idx, self.kv_len] = self.last_loc
        self.kv_len += 1
        mamba = self.tree_cache
        if isinstance(mamba, MambaPrefixCache) and mamba.extra_buffer:  # the states it records
            for req in self.reqs:
                req.decode_batch_idx += 1
            self.mamba_track = prepare_decode_tracks(
                self.reqs, self.kv_len.tolist(), mamba_track_grid(mamba.tree.mamba_checkpoint_grid),
                self.enable_overlap)

    def get_model_worker_batch(self, input_ids: np.ndarray | None = None) -> ForwardBatch:
        """The decode pass just prepared; ``input_ids``: int64 ``[bs]`` tokens not yet
        committed (the overlap loop's future map), None: each request's newest output.
        Source: 0.5.9 ``get_model_worker_batch`` (0.5.23: ``ForwardBatch.init_new``)."""
        bs = len(self.reqs)
        return ForwardBatch("decode", list(self.reqs), self.req_pool_idx.copy(), self.kv_len - 1,
                            np.ones(bs, dtype=np.int64), self.last_loc.copy(),
                            np.ones(bs, dtype=bool), int(self.kv_len.sum()) - bs,
                            self.req_to_token_pool, input_ids, self.mamba_track)

    def stopping(self) -> np.ndarray:
        """Bool ``[len(reqs)]``: live requests whose latest token ends them (``stop_at``)."""
        return ~self.finished & (self.generated >= self.stop_at)
