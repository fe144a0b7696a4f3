"""A small server loop with SGLang's prefix cache: match, lock, prefill, insert, decode, evict.

It drives the real pieces (:class:`~pagedkv.mem_cache.memory_pool.ReqToTokenPool`, the allocator,
:class:`~pagedkv.mem_cache.radix_cache.RadixCache`) the way SGLang's scheduler does, and records after each
step how the pool's slots split between free, running requests' own tokens, and the tree
(locked and evictable). The book uses it to show what prefix sharing saves and why the pool
looks full after requests finish.

A request's life, with SGLang's names:

1. admission: ``match_prefix`` on its prompt but the last token (at least one token must be
   computed to get the next token's logits); ``inc_lock_ref`` on the last matched node; the
   matched slots go into its ``req_to_token`` row and only the rest is allocated
   (``alloc_extend``), evicting unlocked tree nodes first if the free list is short;
2. after the prefill step: ``cache_unfinished_req`` inserts the prompt into the tree so that
   later requests can match it; slots another request inserted meanwhile are freed and the
   tree's copies used instead;
3. decode steps: one slot per token (``alloc_decode``), evicting first if short;
4. finish: ``cache_finished_req`` inserts prompt + output, frees duplicates and the partial
   last page, frees the row and unlocks: the tokens stay cached, now evictable.

Source: ``managers/scheduler.py`` (``get_new_batch_prefill``, ``process_batch_result_*``),
``managers/schedule_batch.py`` (``Req.adjust_max_prefix_ids``),
``mem_cache/radix_cache.py`` (``cache_unfinished_req``, ``cache_finished_req``).

Where we simplify: a step is a prefill pass if anyone was admitted, else a decode step (no
mixed batches); a pass admits first-come-first-served up to ``max_running`` requests and
``max_prefill_tokens`` computed prompt tokens (the first request exempt), without chunking a
long prompt. Admission reserves every request's whole output, using its TRUE length: the
workload knows it, a real server does not and charges ``max_new_tokens`` instead (chapter 4
has the real rule, ``new_token_ratio`` included). So decode never runs short and nothing is
retracted (chapter 5). ``radix=False`` is ``--disable-radix-cache``: a finished request
frees everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pagedkv.errors import AllocatorError, OutOfMemoryError, bad_value, check_positive_int
from pagedkv.lessons.prefix_trace import ServeResult, ServeStep
from pagedkv.mem_cache.allocator import (
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
    ceil_to_page,
    decode_need,
)
from pagedkv.mem_cache.consistency import check_pool_agreement
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache, TreeNode
from pagedkv.workloads.prefix import PrefixRequest

MAX_PREFILL_TOKENS = 16384  # SGLang's default --max-prefill-tokens


def _still_to_write(final_len: int, cached: int, page_size: int) -> int:
    """Slots a request with ``cached`` tokens will still take to reach ``final_len``."""
    return ceil_to_page(final_len, page_size) - ceil_to_page(cached, page_size)


@dataclass
class _Req:
    """A request being served: its row, the tree prefix it holds locked, its progress."""

    spec: PrefixRequest
    row: int
    prefix_len: int  # leading slots of the row that belong to the tree (locked)
    last_node: TreeNode | None
    seq_len: int  # tokens whose K/V are in the cache
    generated: int = 0

    def final_len(self) -> int:
        """Tokens cached when it finishes: the prompt and every output but the last."""
        return len(self.spec.input_ids) + len(self.spec.output_ids) - 1

    def remaining(self, page_size: int) -> int:
        """Slots its remaining decode steps will take (its admission reservation)."""
        return _still_to_write(self.final_len(), self.seq_len, page_size)

    def token_ids(self) -> tuple[int, ...]:
        """Tokens whose K/V are cached: the prompt, then all outputs but the newest."""
        return (self.spec.input_ids + self.spec.output_ids)[:self.seq_len]


class PrefixServer:
    """Pools, allocator and tree for one run; :meth:`run` serves a request stream.

    Args:
        size: KV slots (``max_total_num_tokens``), a multiple of ``page_size``.
        page_size: slots per page. max_running: request rows (``max_running_requests``).
        max_context_len: columns of ``req_to_token``. radix: False for
            ``--disable-radix-cache``. max_prefill_tokens: prompt tokens one prefill pass may
            compute. check: run every integrity check after each step.
    """

    def __init__(self, size: int, page_size: int = 1, max_running: int = 8,
                 max_context_len: int = 8192, radix: bool = True,
                 max_prefill_tokens: int = MAX_PREFILL_TOKENS, check: bool = False) -> None:
        check_positive_int("page_size", page_size)
        self.allocator = (TokenToKVPoolAllocator(size) if page_size == 1
                          else PagedTokenToKVPoolAllocator(size, page_size))
        self.req_pool = ReqToTokenPool(check_positive_int("max_running", max_running),
                                       max_context_len)
        self.tree = RadixCache(self.allocator) if radix else None
        self.max_prefill_tokens = check_positive_int("max_prefill_tokens", max_prefill_tokens)
        self.check = check
        self.evicted = 0
        self.hits: list[int] = []  # prompt tokens matched at admission, per rid

    # ----- memory -----------------------------------------------------------------------
    def _make_room(self, slots: int) -> bool:
        """Evict from the tree until ``slots`` are free; False if that is impossible."""
        short = slots - self.allocator.available_size()
        if short > 0 and self.tree is not None:
            self.evicted += self.tree.evict(short)
        return self.allocator.available_size() >= slots

    def _room(self) -> int:
        """Slots admission may count on: free plus evictable (``rem_total_tokens``)."""
        return self.allocator.available_size() + (self.tree.evictable_size() if self.tree else 0)

    def _row(self, req: _Req) -> np.ndarray:
        return self.req_pool.req_to_token[req.row, :req.seq_len].numpy().astype(np.int64)

    def _last_loc(self, req: _Req) -> int:
        return int(self.req_pool.req_to_token[req.row, req.seq_len - 1]) if req.seq_len else -1

    def _aligned(self, n: int) -> int:
        return n // self.allocator.page_size * self.allocator.page_size

    # ----- a request's life -------------------------------------------------------------
    def admit(self, spec: PrefixRequest, reserved: int, budget: int | None) -> _Req | None:
        """Match, lock and allocate ``spec``'s prompt; None (nothing changed) if it must wait.

        It waits unless its prompt, its whole output and ``reserved`` (the running requests'
        remaining outputs) fit in free plus evictable slots, and (unless ``budget`` is None,
        for the first request of a pass) the prompt tokens it must compute fit in ``budget``.
        """
        p, n = self.allocator.page_size, len(spec.input_ids)
        if not self.req_pool.available_size():
            return None
        prefix, node = np.empty(0, dtype=np.int64), None
        if self.tree is not None:
            match = self.tree.match_prefix(spec.input_ids[:-1])
            prefix, node = match.device_indices.numpy(), match.last_device_node
            self.tree.inc_lock_ref(node)  # before evicting, so our own prefix survives
        need = ceil_to_page(n, p) - len(prefix)
        future = _still_to_write(n + len(spec.output_ids) - 1, n, p)
        over_budget = budget is not None and n - len(prefix) > budget
        if over_budget or need + future + reserved > self._room() or not self._make_room(need):
            if self.tree is not None and node is not None:
                self.tree.dec_lock_ref(node)
            return None
        (row,) = self.req_pool.alloc(1)  # type: ignore[misc]
        req = _Req(spec, row, len(prefix), node, seq_len=len(prefix))
        self.req_pool.write(row, list(range(len(prefix))), prefix)
        slots = self.allocator.alloc_extend([len(prefix)], [n], [self._last_loc(req)],
                                            n - len(prefix), strict=True)
        self.req_pool.write(row, list(range(len(prefix), n)), slots)
        req.seq_len, req.generated = n, 1  # the prefill pass samples the first output token
        return req

    def _insert(self, req: _Req, kv: np.ndarray, aligned: int) -> None:
        """Insert the request's first ``aligned`` cached tokens (slots ``kv``); free the slots
        it computed for tokens someone else inserted meanwhile, keeping the tree's copy."""
        assert self.tree is not None
        had = self.tree.insert(req.token_ids()[:aligned], kv[:aligned])
        self.allocator.free(kv[req.prefix_len:had])

    def cache_unfinished_req(self, req: _Req) -> None:
        """After prefill: put the prompt in the tree and point the row at the tree's slots."""
        if self.tree is None:
            return
        aligned = self._aligned(req.seq_len)
        self._insert(req, self._row(req), aligned)
        match = self.tree.match_prefix(req.token_ids()[:aligned])
        self.req_pool.write(req.row, list(range(aligned)), match.device_indices)
        self.tree.inc_lock_ref(match.last_device_node)
        assert req.last_node is not None
        self.tree.dec_lock_ref(req.last_node)
        req.last_node, req.prefix_len = match.last_device_node, aligned

    def cache_finished_req(self, req: _Req) -> None:
        """At finish: keep prompt + output in the tree (evictable), free the rest and the row."""
        kv = self._row(req)
        if self.tree is None:
            self.allocator.free(kv)
        else:
            aligned = self._aligned(req.seq_len)
            self.allocator.free(kv[aligned:])  # a partial last page is not cached
            self._insert(req, kv, aligned)
            assert req.last_node is not None
            self.tree.dec_lock_ref(req.last_node)
        self.req_pool.free(req.row)

    def decode(self, running: list[_Req]) -> None:
        """One decode step: a slot for each request's newest token, evicting first if short.

        Admission reserved every running request's whole output, so this cannot run short;
        the error guards that promise."""
        need = decode_need([r.seq_len for r in running], self.allocator.page_size)
        if not self._make_room(need):
            raise OutOfMemoryError(
                f"decode needs {need} slots but only {self.allocator.available_size()} are free "
                "after evicting every unlocked tree node, although admission reserved them")
        slots = self.allocator.alloc_decode([r.seq_len + 1 for r in running],
                                            [self._last_loc(r) for r in running], strict=True)
        for r, slot in zip(running, slots.tolist(), strict=True):
            self.req_pool.write(r.row, [r.seq_len], [slot])
            r.seq_len += 1
            r.generated += 1

    # ----- the loop ---------------------------------------------------------------------
    def _check_stream(self, requests: Sequence[PrefixRequest]) -> None:
        if not requests:
            raise bad_value("requests", list(requests), "at least one PrefixRequest")
        for i, r in enumerate(requests):
            if not isinstance(r, PrefixRequest):
                raise bad_value(f"requests[{i}]", r, "a pagedkv.workloads.prefix.PrefixRequest")
            if r.rid != i or not (r.follows is None or 0 <= r.follows < i):
                raise bad_value(f"requests[{i}] (rid, follows)", (r.rid, r.follows),
                                f"rid == {i} and follows None or an earlier rid")
            if len(r.input_ids) + len(r.output_ids) > self.req_pool.max_context_len:
                raise bad_value(f"requests[{i}] prompt + output tokens",
                                len(r.input_ids) + len(r.output_ids),
                                f"<= max_context_len={self.req_pool.max_context_len}")

    def run(self, requests: Sequence[PrefixRequest], max_steps: int = 100_000) -> ServeResult:
        """Serve ``requests`` (FCFS among those whose ``follows`` has finished) to the end.

        Raises ConfigError for a bad stream, OutOfMemoryError for a request that cannot fit
        in the idle pool.
        """
        self._check_stream(requests)
        waiting, running, done, steps = list(requests), [], set(), []
        self.hits = [0] * len(requests)
        p = self.allocator.page_size
        for step in range(max_steps):
            if not waiting and not running:
                break
            evicted0, admitted = self.evicted, []
            reserved = sum(r.remaining(p) for r in running)
            budget = self.max_prefill_tokens
            for spec in [s for s in waiting if s.follows is None or s.follows in done]:
                req = self.admit(spec, reserved, budget if admitted else None)
                if req is None:
                    break
                waiting.remove(spec)
                admitted.append(req)
                self.hits[spec.rid] = req.prefix_len
                reserved += req.remaining(p)
                budget -= len(spec.input_ids) - req.prefix_len
            if admitted:
                for req in admitted:
                    self.cache_unfinished_req(req)
                running += admitted
            elif running:
                self.decode(running)
            else:
                head = waiting[0]
                n, out = len(head.input_ids), len(head.output_ids)
                raise OutOfMemoryError(
                    f"request {head.rid} needs {ceil_to_page(n + out - 1, p)} slots ({n} prompt + "
                    f"{out} output - 1, in pages of {p}), more than the idle pool of "
                    f"size={self.allocator.size} has")
            for req in [r for r in running if r.generated == len(r.spec.output_ids)]:
                self.cache_finished_req(req)
                running.remove(req)
                done.add(req.spec.rid)
            if self.check:
                self.check_invariants(running)
            reused = sum(self.hits[r.spec.rid] for r in admitted)
            free = self.allocator.available_size()
            prot = self.tree.protected_size() if self.tree else 0
            evict = self.tree.evictable_size() if self.tree else 0
            steps.append(ServeStep(
                step, "prefill" if admitted else "decode", len(running), len(done), free,
                self.allocator.size - free - prot - evict, prot, evict,
                sum(len(r.spec.input_ids) for r in admitted) - reused, reused,
                self.evicted - evicted0))
        else:
            raise bad_value("max_steps", max_steps, "enough steps to finish every request")
        return ServeResult(steps, [len(r.input_ids) for r in requests], self.hits,
                           self.allocator.size, p, self.tree is not None)

    def check_invariants(self, running: Sequence[_Req]) -> None:
        """Raise AllocatorError unless pools, allocator and tree agree: every in-use slot is
        the tree's or one running request's own; each request's row starts with exactly the
        slots on its locked tree path; every node's ``lock_ref`` counts the requests whose
        path passes through it."""
        self.allocator.check_invariants()
        if self.tree is None:
            check_pool_agreement(self.req_pool, self.allocator, {r.row: r.seq_len for r in running})
            return
        self.tree.check_invariants()
        locks: dict[int, int] = {}
        for r in running:
            path, node = [], r.last_node
            while node is not None and node is not self.tree.root_node:
                path.append(node.value)
                locks[node.id] = locks.get(node.id, 0) + 1
                node = node.parent
            held = np.concatenate(path[::-1]) if path else np.empty(0, dtype=np.int64)
            if not np.array_equal(self._row(r)[:r.prefix_len], held):
                raise AllocatorError(f"request {r.spec.rid}: its row's first {r.prefix_len} "
                                     "slots are not its locked tree path")
        for node in self.tree.nodes():
            if node is not self.tree.root_node and node.lock_ref != locks.get(node.id, 0):
                raise AllocatorError(f"node {node.id}: lock_ref {node.lock_ref}, but "
                                     f"{locks.get(node.id, 0)} running requests pass through it")
        tree_slots = {int(s) for n in self.tree.nodes() for s in n.value}
        row_slots = {int(s) for r in running for s in self._row(r)[r.prefix_len:]}
        if tree_slots & row_slots:
            raise AllocatorError("a running request's own slot is also in the tree")
        if self.allocator.used_slots() != len(tree_slots) + len(row_slots):
            raise AllocatorError(f"leak: allocator holds {self.allocator.used_slots()} slots, "
                                 f"tree {len(tree_slots)} + rows {len(row_slots)}")


def serve(requests: Sequence[PrefixRequest], size: int, page_size: int = 1,
          max_running: int = 8, radix: bool = True,
          max_prefill_tokens: int = MAX_PREFILL_TOKENS, check: bool = False) -> ServeResult:
    """Serve ``requests`` on a fresh pool of ``size`` slots; see :class:`PrefixServer`.

    Raises ConfigError for bad sizes or an empty or malformed stream, OutOfMemoryError when a
    request cannot fit even in an idle pool.
    """
    longest = max((len(r.input_ids) + len(r.output_ids) for r in requests
                   if isinstance(r, PrefixRequest)), default=1)
    return PrefixServer(size, page_size, max_running, longest, radix, max_prefill_tokens,
                        check).run(requests)
