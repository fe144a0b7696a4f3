"""Requests' lives on pagedkv: the same steps as :mod:`life_sglang`, made with pagedkv's
pieces the way pagedkv's scheduler makes them (``managers/scheduler.py``,
``schedule_batch.py``): the prefix match of all but the last token and the admission lock,
the stash (``cache_unfinished_req``), ``evict_from_tree_cache`` before ``alloc_extend``, the
row writes, ``cache_unfinished_req`` / ``release_kv_cache`` after each pass; decode steps and
retractions go through pagedkv's own ``ScheduleBatch.prepare_for_decode`` and
``ScheduleBatch.release_req``.
"""

from __future__ import annotations

import numpy as np

from pagedkv.errors import OutOfMemoryError
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.common import release_kv_cache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache

RETRACT_DECODE_STEPS = 20


class PagedkvLife:
    """pagedkv's allocator, page table and cache following ``version``."""

    def __init__(self, page_size: int, pool_tokens: int, rows: int, context_len: int,
                 version: str, radix: bool = True) -> None:
        self.p, self.old = page_size, version == "0.5.9"
        self.alloc = make_allocator(pool_tokens, page_size)
        self.pool = ReqToTokenPool(rows, context_len)
        self.table = self.pool.req_to_token.numpy()
        self.tree = (RadixCache if radix else ChunkCache).for_release(self.pool, self.alloc, version)
        self.reqs: dict[str, Req] = {}
        self.prefix_slots: dict[str, np.ndarray] = {}

    def add(self, rid: str, prompt: list[int], max_new: int, outputs: list[int],
            ignore_eos: bool = True, generated: int = 0) -> Req:
        req = Req(len(self.reqs), len(prompt), None, max_new, ignore_eos=ignore_eos,
                  input_ids=np.asarray(prompt, dtype=np.int64), output_ids=list(outputs))
        req.generated = generated
        self.reqs[rid] = req
        return req

    # ----- admission ------------------------------------------------------------------------
    def _cut(self, req: Req, limit: int | None) -> tuple[int, int, bool]:
        extend = req.fill_len - req.prefix_len
        cut = limit is not None and extend > limit
        req.extend_len = limit if cut else extend
        return req.prefix_len, req.extend_len, cut

    def match(self, rid: str) -> int:
        """The prefix match of all but the last token (pagedkv's ``init_next_round_input``)."""
        req = self.reqs[rid]
        match = self.tree.match_prefix(req.token_ids(max(req.fill_len - 1, 0)))
        req.prefix_len = req.cache_protected_len = len(match.device_indices)
        req.last_node = match.last_device_node
        self.prefix_slots[rid] = match.device_indices
        return req.prefix_len

    def admit(self, rid: str, limit: int | None) -> tuple[int, int, bool]:
        self.match(rid)
        req = self.reqs[rid]
        self.tree.inc_lock_ref(req.last_node)
        return self._cut(req, limit)

    def stash(self, rid: str) -> None:
        self.tree.cache_unfinished_req(self.reqs[rid])

    def resume(self, rid: str, limit: int | None) -> tuple[int, int, bool]:
        self.stash(rid)
        return self._cut(self.reqs[rid], limit)

    # ----- memory ---------------------------------------------------------------------------
    def extend(self, rids: list[str]) -> bool:
        reqs = [self.reqs[r] for r in rids]
        for rid, req in zip(rids, reqs, strict=True):
            if req.req_pool_idx < 0:
                req.req_pool_idx = self.pool.alloc(1)[0]
                self.table[req.req_pool_idx, :req.prefix_len] = self.prefix_slots.pop(rid)
        pre = np.array([r.prefix_len for r in reqs], dtype=np.int64)
        ext = np.array([r.extend_len for r in reqs], dtype=np.int64)
        rows = np.array([r.req_pool_idx for r in reqs], dtype=np.int64)
        last = np.where(pre > 0, self.table[rows, np.maximum(pre - 1, 0)], -1)
        total = int(ext.sum())
        self.tree.evict_from_tree_cache(total if self.p == 1 else total + len(reqs) * self.p)
        out = self.alloc.alloc_extend(pre, pre + ext, last, total)
        if out is None:
            return False
        at = 0
        for req, n in zip(reqs, ext.tolist(), strict=True):
            self.table[req.req_pool_idx, req.prefix_len:req.prefix_len + n] = out.numpy()[at:at + n]
            req.kv_committed_len = req.prefix_len + n
            at += n
        return True

    def decode(self, rids: list[str]) -> bool:
        """The decode step's slots through pagedkv's own ``ScheduleBatch.prepare_for_decode``
        (evict if short, ``alloc_decode``, the row writes) over the running requests."""
        batch = ScheduleBatch(self.pool, self.alloc, self.tree)
        batch.merge_batch([self.reqs[r] for r in rids])
        try:
            batch.prepare_for_decode()
        except OutOfMemoryError:
            return False
        batch.sync()
        return True

    def grow(self, rid: str, n: int) -> None:
        """State building: ``n`` more generated tokens with their KV, in one allocation."""
        req = self.reqs[rid]
        if n <= 0:
            return
        a, row = req.kv_committed_len, req.req_pool_idx
        self.tree.evict_from_tree_cache(n if self.p == 1 else n + self.p)
        out = self.alloc.alloc_extend([a], [a + n], [self.table[row, a - 1]], n, strict=True)
        self.table[row, a:a + n] = out.numpy()
        req.kv_committed_len += n
        req.generated += n

    # ----- results --------------------------------------------------------------------------
    def sample(self, rid: str) -> bool:
        req = self.reqs[rid]
        req.generated += 1
        return req.generated >= req.max_new_tokens

    def middle_chunk_done(self, rid: str) -> None:
        """Nothing: pagedkv caches a middle chunk when the next one is cut."""

    def cache_unfinished(self, rid: str) -> None:
        self.tree.cache_unfinished_req(self.reqs[rid])

    def release(self, rid: str, insert: bool) -> None:
        release_kv_cache(self.reqs[rid], self.tree, self.pool, is_insert=insert)

    def group(self, begin: bool) -> None:
        (self.alloc.free_group_begin if begin else self.alloc.free_group_end)()

    def retract(self, rid: str, remaining: int) -> None:
        batch = ScheduleBatch(self.pool, self.alloc, self.tree)
        batch.merge_batch([self.reqs[rid]])
        batch.release_req(0, remaining, RETRACT_DECODE_STEPS)

    # ----- reading ------------------------------------------------------------------------
    def row(self, rid: str) -> list[int] | None:
        req = self.reqs[rid]
        if req.req_pool_idx < 0:
            return None
        return self.table[req.req_pool_idx, :req.kv_committed_len].tolist()

    def protected_len(self, rid: str) -> int:
        return self.reqs[rid].cache_protected_len

    def sizes(self) -> tuple[int, int, int]:
        self.tree.check_invariants()
        self.alloc.check_invariants()
        return self.tree.evictable_size(), self.tree.protected_size(), self.alloc.available_size()

    def free_list(self) -> list[int]:
        return self.alloc.free_pages.tolist()
