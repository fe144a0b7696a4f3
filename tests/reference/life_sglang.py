"""Requests' lives on SGLang's own objects: real ``Req`` s, its tree cache, its allocator and
``ReqToTokenPool``, moved through the calls its scheduler makes (either release).

- admission: ``req.init_next_round_input(tree)`` (the prefix match, at most all but the last
  token) and the lock ``PrefillAdder`` takes when it admits (0.5.9 ``inc_lock_ref``, 0.5.23
  ``req.lock = tree.lock(...)``), the prompt cut to a chunk as ``PrefillAdder`` cuts it
  (0.5.9 ``fill_ids``/``extend_input_len``, 0.5.23 ``extend_end``);
- a carried chunk: the stash at the start of the next step (0.5.9
  ``cache_unfinished_req(chunked=True)``, 0.5.23 ``checkpoint_kv_cache``), then
  ``init_next_round_input()`` without the tree and the next cut;
- ``prepare_for_extend``'s memory work: ``ReqToTokenPool.alloc``, the prefix slots (0.5.9
  ``prefix_indices``, 0.5.23 the row or ``tree.prefix_device_indices``), the allocation
  helpers (``alloc_token_slots`` / ``alloc_paged_token_slots_extend``, which evict from the
  tree first) and the row writes;
- the prefill result: a token per finished prompt, ``check_finished`` /
  ``update_finish_state``, then ``release_kv_cache`` or ``cache_unfinished_req`` /
  ``checkpoint_kv_cache`` (0.5.23 inside a free group);
- a decode step (``alloc_for_decode``'s helpers and row write), its result inside a free group;
- retraction's ``release_req``: ``release_kv_cache`` without insert, ``evict_from_tree_cache``
  of ``remaining * 20``, ``reset_for_retract``.
"""

from __future__ import annotations

from typing import Any

import sgl_objects as sg
import torch
from sglang.srt.mem_cache import common as sg_common

RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS


class SglangLife:
    """One pool, tree and allocator; requests named by the case."""

    def __init__(self, page_size: int, pool_tokens: int, rows: int, context_len: int,
                 radix: bool = True) -> None:
        self.p = page_size
        self.server_args = sg.configure(page_size, radix)
        self.alloc = sg.allocator(page_size, pool_tokens)
        self.pool = sg.req_to_token_pool(rows, context_len)
        self.tree = sg.tree_cache(self.pool, self.alloc, page_size, radix)
        self.reqs: dict[str, Any] = {}
        self.outputs: dict[str, list[int]] = {}

    def add(self, rid: str, prompt: list[int], max_new: int, outputs: list[int],
            ignore_eos: bool = True, generated: int = 0) -> Any:
        req = sg.request(rid, prompt, max_new, outputs[:generated], ignore_eos)
        self.reqs[rid], self.outputs[rid] = req, outputs
        return req

    # ----- admission ------------------------------------------------------------------------
    def _cut(self, req: Any, limit: int | None) -> tuple[int, int, bool]:
        """Cut this pass's extend to ``limit`` tokens; (prefix, extend, cut)."""
        if sg.OLD:
            prefix = len(req.prefix_indices)
            extend = len(req.fill_ids) - prefix
            cut = limit is not None and extend > limit
            if cut:
                extend = limit
                req.fill_ids = req.fill_ids[:prefix + extend]
                req.is_chunked += 1
            req.set_extend_input_len(extend)
        else:
            prefix = req.prefix_len
            extend = len(req.full_untruncated_fill_ids) - prefix
            cut = limit is not None and extend > limit
            if cut:
                extend = limit
                req.inflight_middle_chunks += 1
            req.extend_end = prefix + extend
        return prefix, extend, cut

    def match(self, rid: str) -> int:
        """``init_next_round_input(tree)``: the prefix match; the matched length."""
        req = self.reqs[rid]
        req.init_next_round_input(self.tree)
        return len(req.prefix_indices) if sg.OLD else req.prefix_len

    def admit(self, rid: str, limit: int | None) -> tuple[int, int, bool]:
        """Match and lock a waiting request's prefix, cut its prompt to ``limit`` tokens."""
        self.match(rid)
        req = self.reqs[rid]
        if sg.OLD:
            self.tree.inc_lock_ref(req.last_node)
        else:
            req.lock = self.tree.lock(req.last_node)
        return self._cut(req, limit)

    def stash(self, rid: str) -> None:
        """The carried chunk's stash at the start of a step, then its refill without the
        tree (``init_next_round_input()``)."""
        req = self.reqs[rid]
        if sg.OLD:
            self.tree.cache_unfinished_req(req, chunked=True)
        elif req.extend_end > req.prefix_len:
            sg.checkpoint_kv_cache(req, self.tree)
        req.init_next_round_input()

    def resume(self, rid: str, limit: int | None) -> tuple[int, int, bool]:
        """Stash the carried chunk in the tree, then cut the next one."""
        self.stash(rid)
        return self._cut(self.reqs[rid], limit)

    # ----- memory ---------------------------------------------------------------------------
    def _prefix_slots(self, req: Any) -> torch.Tensor:
        if sg.OLD:
            return req.prefix_indices
        if req.kv.holds_kv:
            return self.pool.req_to_token[req.kv.req_pool_idx, :req.prefix_len].to(torch.int64)
        if req.prefix_len == 0:
            return torch.empty(0, dtype=torch.int64)
        return self.tree.prefix_device_indices(req)

    def extend(self, rids: list[str]) -> bool:
        """``prepare_for_extend``'s memory work for one batch; False when out of memory."""
        reqs = [self.reqs[r] for r in rids]
        prefix = [self._prefix_slots(r) for r in reqs]
        pre = [len(t) for t in prefix]
        seq = [len(r.fill_ids) if sg.OLD else r.extend_end for r in reqs]
        total = sum(seq) - sum(pre)
        if self.pool.alloc(reqs) is None:
            raise RuntimeError("ReqToTokenPool is full")
        try:
            if self.p == 1:
                out = sg.alloc_helpers.alloc_token_slots(self.tree, total)
            else:
                last = torch.tensor([int(t[-1]) if len(t) else -1 for t in prefix])
                pre_t, seq_t = torch.tensor(pre), torch.tensor(seq)
                out = sg.alloc_helpers.alloc_paged_token_slots_extend(
                    self.tree, pre_t, pre_t.clone(), seq_t, seq_t.clone(), last, total)
        except RuntimeError:
            return False
        at = 0
        for req, slots, a, b in zip(reqs, prefix, pre, seq, strict=True):
            row = sg.kv(req).req_pool_idx
            self.pool.write((row, slice(0, a)), slots.to(torch.int32))
            self.pool.write((row, slice(a, b)), out[at:at + b - a].to(torch.int32))
            at += b - a
            sg.kv(req).kv_committed_len = sg.kv(req).kv_allocated_len = b
        return True

    def decode(self, rids: list[str]) -> bool:
        """``alloc_for_decode``'s memory work; False when out of memory."""
        reqs = [self.reqs[r] for r in rids]
        seq = torch.tensor([sg.kv(r).kv_committed_len for r in reqs])
        rows = torch.tensor([sg.kv(r).req_pool_idx for r in reqs])
        try:
            if self.p == 1:
                out = sg.alloc_helpers.alloc_token_slots(self.tree, len(reqs))
            else:
                last = self.pool.req_to_token[rows, seq - 1].to(torch.int64)
                out = sg.alloc_helpers.alloc_paged_token_slots_decode(self.tree, seq + 1, seq + 1, last)
        except RuntimeError:
            return False
        self.pool.write((rows, seq), out.to(torch.int32))
        for req in reqs:
            sg.kv(req).kv_committed_len += 1
            sg.kv(req).kv_allocated_len += 1
        return True

    def grow(self, rid: str, n: int) -> None:
        """State building: ``n`` more generated tokens with their KV, in one allocation
        (what ``n`` decode steps leave, but for which pages)."""
        req, kv = self.reqs[rid], sg.kv(self.reqs[rid])
        if n <= 0:
            return
        a = kv.kv_committed_len
        row = kv.req_pool_idx
        if self.p == 1:
            out = sg.alloc_helpers.alloc_token_slots(self.tree, n)
        else:
            last = self.pool.req_to_token[row, a - 1:a].to(torch.int64)
            pre, seq = torch.tensor([a]), torch.tensor([a + n])
            out = sg.alloc_helpers.alloc_paged_token_slots_extend(
                self.tree, pre, pre.clone(), seq, seq.clone(), last, n)
        self.pool.write((row, slice(a, a + n)), out.to(torch.int32))
        kv.kv_committed_len = kv.kv_allocated_len = a + n
        for _ in range(n):
            req.output_ids.append(self.outputs[rid][len(req.output_ids)])

    # ----- results --------------------------------------------------------------------------
    def sample(self, rid: str) -> bool:
        """Append the request's next planned token; whether that finishes it."""
        req = self.reqs[rid]
        req.output_ids.append(self.outputs[rid][len(req.output_ids)])
        if sg.OLD:
            req.check_finished()
        else:
            req.update_finish_state()
        return req.finished()

    def middle_chunk_done(self, rid: str) -> None:
        """A chunk that did not complete the prompt: no token, its counter goes down."""
        req = self.reqs[rid]
        if sg.OLD:
            req.is_chunked -= 1
        else:
            req.inflight_middle_chunks -= 1

    def cache_unfinished(self, rid: str) -> None:
        if sg.OLD:
            self.tree.cache_unfinished_req(self.reqs[rid])
        else:
            sg.checkpoint_kv_cache(self.reqs[rid], self.tree)

    def release(self, rid: str, insert: bool) -> None:
        if sg.OLD:
            sg.release_kv_cache(self.reqs[rid], self.tree, is_insert=insert)
        else:
            sg.release_kv_cache(self.reqs[rid], self.tree, checkpoint=insert)

    def group(self, begin: bool) -> None:
        (self.alloc.free_group_begin if begin else self.alloc.free_group_end)()

    def retract(self, rid: str, remaining: int) -> None:
        """``release_req``: free without insert, evict for the rest, reset."""
        self.release(rid, insert=False)
        sg_common.evict_from_tree_cache(self.tree, remaining * RETRACT_DECODE_STEPS)
        self.reqs[rid].reset_for_retract()

    # ----- reading ------------------------------------------------------------------------
    def row(self, rid: str) -> list[int] | None:
        kv = sg.kv(self.reqs[rid])
        if kv.req_pool_idx is None:
            return None
        return self.pool.req_to_token[kv.req_pool_idx, :kv.kv_committed_len].tolist()

    def protected_len(self, rid: str) -> int:
        return int(sg.kv(self.reqs[rid]).cache_protected_len)

    def sizes(self) -> tuple[int, int, int]:
        return (int(self.tree.evictable_size()), int(self.tree.protected_size()),
                int(self.alloc.available_size()))

    def free_list(self) -> list[int]:
        return self.alloc.free_pages.tolist()
