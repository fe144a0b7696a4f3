"""A small server loop with SGLang's prefix cache: match, lock, prefill, insert, decode, evict.

It drives the real pieces (:class:`~pagedkv.pools.ReqToTokenPool`, the allocator,
:class:`~pagedkv.radix.RadixCache`) the way SGLang's scheduler does, and records after each
step how the pool's slots split between free, running requests' own tokens, and the tree
(locked and evictable). The book uses it to show what prefix sharing saves and why "token
usage" stays high after requests finish.

A request's life, with SGLang's names:

1. admission: ``match_prefix`` on its prompt; ``inc_lock_ref`` on the last matched node; the
   matched slots go into its ``req_to_token`` row and only the rest is allocated
   (``alloc_extend``), evicting unlocked tree nodes first if the free list is short;
2. after the prefill step: ``cache_unfinished_req`` inserts the prompt into the tree so that
   later requests can match it; slots another request inserted meanwhile are freed and the
   tree's copies used instead;
3. decode steps: one slot per token (``alloc_decode``), evicting first if short;
4. finish: ``cache_finished_req`` inserts prompt + output, frees duplicates and the partial
   last page, frees the row and unlocks: the tokens stay cached, now evictable.

Source: ``managers/scheduler.py`` (``get_new_batch_prefill``, ``process_batch_result_*``),
``mem_cache/radix_cache.py`` (``cache_unfinished_req``, ``cache_finished_req``).

Where we simplify: a step is a prefill pass if anyone was admitted, else a decode step (no
mixed batches, no chunked prefill); admission is first-come-first-served with a cap of
``max_running`` requests, and it reserves every request's whole output (``new_token_ratio``
fixed at 1, no ``CLIP``; chapter 4 covers the real rule), so decode never runs short and
nothing is retracted (chapter 5). ``radix=False`` is ``--disable-radix-cache``: a finished request frees
everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pagedkv.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from pagedkv.consistency import check_pool_agreement
from pagedkv.errors import AllocatorError, OutOfMemoryError, bad_value, check_positive_int
from pagedkv.pools import ReqToTokenPool
from pagedkv.prefix_workloads import PrefixRequest
from pagedkv.radix import RadixCache, TreeNode


@dataclass
class _Req:
    """A request being served: its row, the tree prefix it holds locked, its progress."""

    spec: PrefixRequest
    row: int
    prefix_len: int  # leading slots of the row that belong to the tree (locked)
    last_node: TreeNode | None
    seq_len: int  # tokens whose K/V are in the cache
    generated: int = 0

    def reserve(self, page_size: int) -> int:
        """Slots its remaining decode steps will take: whole pages up to its final length
        (prompt + outputs - 1 cached tokens)."""
        final = len(self.spec.input_ids) + len(self.spec.output_ids) - 1
        return (-(-final // page_size) - -(-self.seq_len // page_size)) * page_size

    def token_ids(self) -> tuple[int, ...]:
        """Tokens whose K/V are cached: the prompt, then all outputs but the newest."""
        return (self.spec.input_ids + self.spec.output_ids)[:self.seq_len]


@dataclass(frozen=True)
class ServeStep:
    """The pool after one step, in slots (tokens).

    ``free + running + protected + evictable == size``; ``running`` counts the slots of
    running requests outside the tree, partial-page tails included.
    """

    step: int
    kind: str  # "prefill" or "decode"
    running_reqs: int
    finished_reqs: int
    free: int
    running: int
    protected: int
    evictable: int
    computed: int  # prompt tokens prefilled this step (0 on decode steps)
    reused: int  # prompt tokens served from the tree this step
    evicted: int


@dataclass(frozen=True)
class ServeResult:
    """Every step's :class:`ServeStep`, per-request prefix hits, and the run's settings."""

    steps: list[ServeStep]
    prompt_lens: list[int]
    hit_lens: list[int]  # prompt tokens matched in the tree at admission, per rid
    size: int
    page_size: int
    radix: bool

    @property
    def prompt_tokens(self) -> int:
        return sum(self.prompt_lens)

    @property
    def reused_tokens(self) -> int:
        return sum(self.hit_lens)

    @property
    def hit_rate(self) -> float:
        """Share of all prompt tokens served from the cache instead of computed."""
        return self.reused_tokens / self.prompt_tokens


class PrefixServer:
    """Pools, allocator and tree for one run; :meth:`run` serves a request stream.

    Args:
        size: KV slots (``max_total_num_tokens``), a multiple of ``page_size``.
        page_size: slots per page. max_running: request rows (``max_running_requests``).
        max_context_len: columns of ``req_to_token``. radix: False for
            ``--disable-radix-cache``. check: run every integrity check after each step.
    """

    def __init__(self, size: int, page_size: int = 1, max_running: int = 8,
                 max_context_len: int = 8192, radix: bool = True, check: bool = False) -> None:
        check_positive_int("page_size", page_size)
        self.allocator = (TokenToKVPoolAllocator(size) if page_size == 1
                          else PagedTokenToKVPoolAllocator(size, page_size))
        self.req_pool = ReqToTokenPool(check_positive_int("max_running", max_running),
                                       max_context_len)
        self.tree = RadixCache(self.allocator) if radix else None
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

    def _row(self, req: _Req) -> np.ndarray:
        return self.req_pool.req_to_token[req.row, :req.seq_len].numpy().astype(np.int64)

    def _last_loc(self, req: _Req) -> int:
        return int(self.req_pool.req_to_token[req.row, req.seq_len - 1]) if req.seq_len else -1

    def _relock(self, req: _Req, node: TreeNode) -> None:
        assert self.tree is not None and req.last_node is not None
        self.tree.inc_lock_ref(node)
        self.tree.dec_lock_ref(req.last_node)
        req.last_node = node

    # ----- a request's life -------------------------------------------------------------
    def admit(self, spec: PrefixRequest, reserved: int) -> _Req | None:
        """Match, lock and allocate ``spec``'s prompt; None (nothing changed) if it must wait.

        It must wait unless its prompt, its whole output and ``reserved`` (the running
        requests' remaining outputs) fit in free plus evictable slots, as in SGLang's
        ``rem_total_tokens`` with ``new_token_ratio`` 1.
        """
        p, n = self.allocator.page_size, len(spec.input_ids)
        if not self.req_pool.available_size():
            return None
        if n >= self.req_pool.max_context_len:
            raise bad_value(f"request {spec.rid} len(input_ids)", n,
                            f"< max_context_len={self.req_pool.max_context_len}")
        prefix, node = np.empty(0, dtype=np.int64), None
        if self.tree is not None:
            match = self.tree.match_prefix(spec.input_ids)
            prefix, node = match.device_indices.numpy(), match.last_device_node
            self.tree.inc_lock_ref(node)  # before evicting, so our own prefix survives
        need = (-(-n // p) - len(prefix) // p) * p
        final = n + len(spec.output_ids) - 1
        future = (-(-final // p) - -(-n // p)) * p
        room = self.allocator.available_size() + (self.tree.evictable_size() if self.tree else 0)
        if need + future + reserved > room or not self._make_room(need):
            if node is not None:
                self.tree.dec_lock_ref(node)  # type: ignore[union-attr]
            return None
        (row,) = self.req_pool.alloc(1)  # type: ignore[misc]
        req = _Req(spec, row, len(prefix), node, seq_len=len(prefix))
        self.req_pool.write(row, list(range(len(prefix))), prefix)
        slots = self.allocator.alloc_extend([len(prefix)], [n], [self._last_loc(req)],
                                            n - len(prefix), strict=True)
        self.req_pool.write(row, list(range(len(prefix), n)), slots)
        req.seq_len, req.generated = n, 1  # the prefill pass samples the first output token
        return req

    def cache_unfinished_req(self, req: _Req) -> None:
        """After prefill: put the prompt in the tree and point the row at the tree's slots."""
        if self.tree is None:
            return
        aligned = req.seq_len // self.allocator.page_size * self.allocator.page_size
        kv, ids = self._row(req), req.token_ids()
        had = self.tree.insert(ids[:aligned], kv[:aligned])
        self.allocator.free(kv[req.prefix_len:had])  # computed twice: keep the tree's copy
        match = self.tree.match_prefix(ids[:aligned])
        self.req_pool.write(req.row, list(range(aligned)), match.device_indices)
        self._relock(req, match.last_device_node)
        req.prefix_len = aligned

    def cache_finished_req(self, req: _Req) -> None:
        """At finish: keep prompt + output in the tree (evictable), free the rest and the row."""
        kv = self._row(req)
        if self.tree is None:
            self.allocator.free(kv)
        else:
            aligned = req.seq_len // self.allocator.page_size * self.allocator.page_size
            self.allocator.free(kv[aligned:])  # a partial last page is not cached
            had = self.tree.insert(req.token_ids()[:aligned], kv[:aligned])
            self.allocator.free(kv[req.prefix_len:had])
            assert req.last_node is not None
            self.tree.dec_lock_ref(req.last_node)
        self.req_pool.free(req.row)

    def decode(self, running: list[_Req]) -> None:
        """One decode step: a slot for each request's newest token, evicting first if short.

        Admission reserved every running request's whole output, so this cannot run short;
        the error guards that promise."""
        p = self.allocator.page_size
        seq = np.array([r.seq_len + 1 for r in running])
        need = int(np.count_nonzero((seq - 1) % p == 0)) * p
        if not self._make_room(need):
            raise OutOfMemoryError(
                f"decode needs {need} slots but only {self.allocator.available_size()} are free "
                "after evicting every unlocked tree node, although admission reserved them")
        slots = self.allocator.alloc_decode(seq, [self._last_loc(r) for r in running],
                                            strict=True)
        for r, slot in zip(running, slots.tolist(), strict=True):
            self.req_pool.write(r.row, [r.seq_len], [slot])
            r.seq_len += 1
            r.generated += 1

    # ----- the loop ---------------------------------------------------------------------
    def run(self, requests: Sequence[PrefixRequest], max_steps: int = 100_000) -> ServeResult:
        """Serve ``requests`` (FCFS among those whose ``follows`` has finished) to the end."""
        waiting, running, done, steps = list(requests), [], set(), []
        self.hits = [0] * len(requests)
        for i, r in enumerate(requests):
            if r.rid != i or not (r.follows is None or 0 <= r.follows < i):
                raise bad_value(f"requests[{i}] (rid, follows)", (r.rid, r.follows),
                                f"rid == {i} and follows None or an earlier rid")
        for step in range(max_steps):
            if not waiting and not running:
                break
            evicted0, admitted = self.evicted, []
            reserved = sum(r.reserve(self.allocator.page_size) for r in running)
            for spec in [s for s in waiting if s.follows is None or s.follows in done]:
                req = self.admit(spec, reserved)
                if req is None:
                    break
                waiting.remove(spec)
                admitted.append(req)
                reserved += req.reserve(self.allocator.page_size)
                self.hits[spec.rid] = req.prefix_len
            if admitted:
                for req in admitted:
                    self.cache_unfinished_req(req)
                running += admitted
            elif running:
                self.decode(running)
            else:
                raise OutOfMemoryError(
                    f"request {waiting[0].rid} ({len(waiting[0].input_ids)} prompt tokens) "
                    f"cannot be admitted into an idle pool of size={self.allocator.size}")
            for req in [r for r in running if r.generated == len(r.spec.output_ids)]:
                self.cache_finished_req(req)
                running.remove(req)
                done.add(req.spec.rid)
            if self.check:
                self.check_invariants(running)
            steps.append(self._snapshot(step, admitted, running, len(done),
                                        self.evicted - evicted0))
        else:
            raise bad_value("max_steps", max_steps, "enough steps to finish every request")
        return ServeResult(steps, [len(r.input_ids) for r in requests], self.hits,
                           self.allocator.size, self.allocator.page_size, self.tree is not None)

    def _snapshot(self, step: int, admitted: list[_Req], running: list[_Req], finished: int,
                  evicted: int) -> ServeStep:
        """The pool's split after ``step``."""
        free = self.allocator.available_size()
        prot = self.tree.protected_size() if self.tree else 0
        evict = self.tree.evictable_size() if self.tree else 0
        reused = sum(self.hits[r.spec.rid] for r in admitted)
        computed = sum(len(r.spec.input_ids) for r in admitted) - reused
        return ServeStep(step, "prefill" if admitted else "decode", len(running), finished,
                         free, self.allocator.size - free - prot - evict, prot, evict,
                         computed, reused, evicted)

    def check_invariants(self, running: Sequence[_Req]) -> None:
        """Pools, allocator and tree agree: every in-use slot is the tree's or a row's."""
        own = {r.row: r.seq_len for r in running}
        self.allocator.check_invariants()
        if self.tree is None:
            check_pool_agreement(self.req_pool, self.allocator, own)
            return
        self.tree.check_invariants()
        tree_slots = {int(s) for n in self.tree.nodes() for s in n.value}
        row_slots = {int(s) for r in running for s in self._row(r)[r.prefix_len:]}
        if tree_slots & row_slots:
            raise AllocatorError("a running request's own slot is also in the tree")
        if self.allocator.used_slots() != len(tree_slots) + len(row_slots):
            raise AllocatorError(f"leak: allocator holds {self.allocator.used_slots()} slots, "
                                 f"tree {len(tree_slots)} + rows {len(row_slots)}")


def serve(requests: Sequence[PrefixRequest], size: int, page_size: int = 1,
          max_running: int = 8, radix: bool = True, check: bool = False) -> ServeResult:
    """Serve ``requests`` on a fresh pool of ``size`` slots; see :class:`PrefixServer`.

    Raises ConfigError for bad sizes, OutOfMemoryError when a request cannot fit even in an
    idle pool or a decode step cannot find room after evicting everything unlocked.
    """
    longest = max((len(r.input_ids) + len(r.output_ids) for r in requests), default=1)
    return PrefixServer(size, page_size, max_running, longest + 1, radix, check).run(requests)
