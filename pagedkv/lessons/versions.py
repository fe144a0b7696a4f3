"""What changed from SGLang 0.5.9 to 0.5.23, shown by running both on the same inputs.

Each function below sets up one small case, runs pagedkv with ``sglang_version="0.5.9"``
and with ``"0.5.23"``, and returns what each release does; :func:`version_changes` collects
them into rows for the book's table. The rules themselves are listed, with their source, in
:data:`pagedkv.managers.config.VERSION_DIFFERENCES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pagedkv.errors import OutOfMemoryError
from pagedkv.lessons.admission import UniformBatch, admission_pass, admission_state
from pagedkv.lessons.examples import running_batch
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.scheduler import Scheduler
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.sizing import gpu_memory_defaults
from pagedkv.workloads.synthetic import RequestSpec

VERSIONS = ("0.5.9", "0.5.23")


@dataclass(frozen=True)
class VersionRow:
    """One change: what is compared, and what each release gives on the same input."""

    change: str
    case: str
    old: str
    new: str


def _both(run: Callable[[str], str]) -> tuple[str, str]:
    return run("0.5.9"), run("0.5.23")


def admission_charge() -> VersionRow:
    """A 3,000-token prompt with ``max_new_tokens`` 2,000 on 10,048 free slots, pages of 64."""
    def run(v: str) -> str:
        state = admission_state(UniformBatch(0, 1, 1, 1), 10_048, SchedulerConfig(sglang_version=v),
                                0.7, 64)
        adder, _ = admission_pass(state, [Req(0, 3000, 2000, 2000)])
        return f"charged {adder.charges[0]:,.0f}"
    return VersionRow("every admitted request costs one page more",
                      "a 3,000-token prompt, max_new_tokens 2,000, pages of 64", *_both(run))


def prefill_budget_with_chunking() -> VersionRow:
    """Two 60-token prompts, ``max_prefill_tokens`` 100, chunks of 1,000."""
    def run(v: str) -> str:
        cfg = SchedulerConfig(sglang_version=v, max_prefill_tokens=100, chunked_prefill_size=1000)
        state = admission_state(UniformBatch(0, 1, 1, 1), 10_000, cfg, 0.7)
        adder, _ = admission_pass(state, [Req(0, 60, 10, 10), Req(1, 60, 10, 10)])
        return f"{len(adder.can_run_list)} admitted"
    return VersionRow("max_prefill_tokens binds only without chunked prefill",
                      "two 60-token prompts, max_prefill_tokens 100, chunks of 1,000", *_both(run))


def new_token_log() -> VersionRow:
    """The prefill log's ``#new-token`` for a 23-token prompt in pages of 16."""
    def run(v: str) -> str:
        s = Scheduler([RequestSpec(23, 2, 2)], max_total_num_tokens=256, page_size=16,
                      config=SchedulerConfig(sglang_version=v))
        s.run()
        return s.trace.log[0].split(", ")[2]
    return VersionRow("the prefill log counts raw tokens", "a 23-token prompt, pages of 16",
                      *_both(run))


def eviction_amount() -> VersionRow:
    """Three finished 5-token requests cached as three leaves; a 46-token prompt needs one of
    them evicted; then a request that shares the third one's tokens arrives."""
    def run(v: str) -> str:
        ids = [tuple(range(10 * i, 10 * i + 5)) for i in range(3)]
        specs = [RequestSpec(5, 1, 1, float(i), ids[i]) for i in range(3)]
        specs += [RequestSpec(46, 1, 1, 3.0, tuple(range(1000, 1046))),
                  RequestSpec(6, 1, 1, 4.0, (*ids[2], 99))]
        s = Scheduler(specs, max_total_num_tokens=60, page_size=1,
                      config=SchedulerConfig(sglang_version=v))
        s.run()
        hit = s.trace.events_of("admit")[4][3]["cached"]
        return f"evicts {s.tree_cache.evicted_tokens} tokens; the last request finds {hit} cached"
    return VersionRow("eviction frees only what is missing", "a pool of 60, 15 tokens cached "
                      "in three leaves, a 46-token prompt, then a repeat of a cached prompt",
                      *_both(run))


def free_order() -> VersionRow:
    """Free-list head after two requests finish together, pages of 4, on a pool whose free
    list was left shuffled by earlier frees (their pages are not in ascending row order)."""
    def run(v: str) -> str:
        pool = ReqToTokenPool(2, 16)
        alloc = make_allocator(64, 4)
        alloc.free_pages = [5, 2, 7, 1, 3, 4, *range(6, 8), *range(8, 17)][:16]
        cache = ChunkCache(pool, alloc, v)
        reqs = []
        for i in range(2):
            r = Req(i, 12, 4, 4)
            r.req_pool_idx, r.kv_committed_len = pool.alloc(1)[0], 12
            pool.req_to_token[r.req_pool_idx, :12] = alloc.alloc_extend([0], [12], [-1], 12).to(
                pool.req_to_token.dtype)
            reqs.append(r)
        alloc.free_group_begin()
        for r in reqs:
            cache.cache_finished_req(r)
        alloc.free_group_end()
        return "free list starts " + ", ".join(str(x) for x in alloc.free_pages.tolist()[:6])
    return VersionRow("freed pages return in row order, not sorted",
                      "two finished requests holding pages 5, 2, 7 and 1, 3, 4", *_both(run))


def prompt_split() -> VersionRow:
    """Nodes in the tree after a retracted request is prefilled again over prompt + output."""
    def run(v: str) -> str:
        pool, alloc = ReqToTokenPool(2, 32), make_allocator(64, 1)
        tree = RadixCache(pool, alloc, v)
        r = Req(0, 5, 3, 3, input_ids=np.arange(5), output_ids=[7, 8, 9])
        r.generated, r.req_pool_idx, r.last_node = 3, pool.alloc(1)[0], tree.root_node
        r.kv_committed_len = 8
        pool.req_to_token[r.req_pool_idx, :8] = alloc.alloc(8).to(pool.req_to_token.dtype)
        tree.cache_unfinished_req(r)
        return f"{sum(1 for n in tree.nodes()) - 1} node(s)"
    return VersionRow("a cached answer is split from its prompt",
                      "a re-prefill over a 5-token prompt and 3 outputs", *_both(run))


def last_request() -> VersionRow:
    """A lone request whose next decode needs a page the pool does not have."""
    def run(v: str) -> str:
        cfg = SchedulerConfig(sglang_version=v)
        batch = running_batch([8], [1], [50], free=0, page_size=4, config=cfg)
        try:
            _, _, aborted = batch.retract_decode(sglang_version=v)
        except OutOfMemoryError:
            return "raises (the server stops)"
        return f"aborts request {aborted[0].rid}"
    return VersionRow("a request that cannot decode alone is aborted", "one request, no free page",
                      *_both(run))


def chunk_default() -> VersionRow:
    """``chunked_prefill_size`` on a 24 GB card."""
    def run(v: str) -> str:
        return f"{gpu_memory_defaults(24_564, 1, v)[0]:,} tokens"
    return VersionRow("bigger prefill chunks on 20-35 GiB cards", "an RTX 4090 (24 GB)", *_both(run))


def version_changes() -> list[VersionRow]:
    """Every row of the book's table, each computed by running both releases."""
    return [admission_charge(), prefill_budget_with_chunking(),
            new_token_log(), eviction_amount(), free_order(), prompt_split(), last_request(),
            chunk_default()]
