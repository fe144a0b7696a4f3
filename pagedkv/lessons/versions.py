"""What changed from SGLang 0.5.9 to 0.5.23, shown by running both on the same inputs.

Every behaviour field of :class:`pagedkv.releases.Release` has one demonstration here
(:data:`DEMOS`): a small case that runs pagedkv under a release and says what came out.
:func:`demonstrate` runs it under two releases; :func:`version_changes` does so for every
field where 0.5.9 and 0.5.23 differ, in field order, which makes the book's table. Since
each case reads one field, flipping that field alone changes its answer (a test checks
this for every field).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pagedkv.errors import ConfigError, NotEnoughMemoryError, OutOfMemoryError
from pagedkv.gpus import get_gpu
from pagedkv.lessons.admission import UniformBatch, admission_pass, admission_state
from pagedkv.lessons.attention_backends import default_attention_backend, resolve_page_size
from pagedkv.lessons.examples import running_batch
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_policy import running_reservation
from pagedkv.managers.scheduler import Scheduler
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.releases import BEHAVIOURS, DEFAULT_RELEASE, RELEASES, SGLANG_VERSIONS, Release
from pagedkv.server_args import default_mem_fraction_static, gpu_memory_defaults
from pagedkv.sizing import KVPoolPlan, plan_pool
from pagedkv.workloads.synthetic import RequestSpec

OLDEST = RELEASES[SGLANG_VERSIONS[-1]]
VERSIONS = (OLDEST.name, DEFAULT_RELEASE.name)  # the table's two columns, oldest first


@dataclass(frozen=True)
class VersionRow:
    """One change: what is compared, and what each release gives on the same input."""

    change: str
    case: str
    old: str
    new: str


@dataclass(frozen=True)
class Demo:
    """One behaviour's case: the book's words for the change and the case, and the run
    (a release in, what it did in words out)."""

    change: str
    case: str
    run: Callable[[Release], str]


# ----- admission ------------------------------------------------------------------------------
def _admission_charge(r: Release) -> str:
    state = admission_state(UniformBatch(0, 1, 1, 1), 10_048, SchedulerConfig(release=r), 0.7, 64)
    adder, _ = admission_pass(state, [Req(0, 3000, 2000, 2000)])
    return f"charged {adder.charges[0]:,.0f}"


def _ignore_eos_reservation(r: Release) -> str:
    one = np.array([1], dtype=np.int64)
    held = running_reservation(SchedulerConfig(release=r), 1, 0.5, one * 10, one * 100, one * 0,
                               one * 9, np.array([True]))
    return f"reserves {held:g} tokens"


def _prefill_budget_with_chunking(r: Release) -> str:
    cfg = SchedulerConfig(release=r, max_prefill_tokens=100, chunked_prefill_size=1000)
    state = admission_state(UniformBatch(0, 1, 1, 1), 10_000, cfg, 0.7)
    adder, _ = admission_pass(state, [Req(0, 60, 10, 10), Req(1, 60, 10, 10)])
    return f"{len(adder.can_run_list)} admitted"


def _chunk_end(r: Release) -> str:
    cfg = SchedulerConfig(release=r, chunked_prefill_size=32)
    state = admission_state(UniformBatch(0, 1, 1, 1), 4096, cfg, 0.7, 16)
    adder, req = state.adder(), Req(0, 100, 10, 10)
    req.prefix_len, req.last_node = 6, state.batch.tree_cache.root_node
    adder.add_one_req(req)
    return f"a chunk of {req.extend_len} tokens"


def _prefill_log(r: Release) -> str:
    s = Scheduler([RequestSpec(23, 2, 2)], max_total_num_tokens=256, page_size=16,
                  config=SchedulerConfig(release=r))
    s.run()
    return s.trace.log[0]


def _new_token_log(r: Release) -> str:
    return _prefill_log(r).split(", ")[2]


def _prefill_log_fields(r: Release) -> str:
    tail = _prefill_log(r).split("#queue-req: ")[1].split(", ")[1:]
    return ", ".join(part.split(":")[0] for part in tail)


def _max_new_tokens_cap(r: Release) -> str:
    s = Scheduler([RequestSpec(200, 100, 100)], max_total_num_tokens=256, page_size=16,
                  config=SchedulerConfig(release=r))
    return f"max_new_tokens becomes {s.reqs[0].max_new_tokens}"


def _allocatable(r: Release) -> str:
    s = Scheduler([RequestSpec(4, 1, 1)], max_total_num_tokens=64,
                  config=SchedulerConfig(release=r, max_running_requests=4))
    s.req_to_token_pool.alloc(1)  # a row held outside the running batch
    return f"admits up to {s.num_allocatable_reqs(0)}"


def _filter_finished(r: Release) -> str:
    s = Scheduler([RequestSpec(4, 2, 2), RequestSpec(4, 5, 5)], max_total_num_tokens=64,
                  config=SchedulerConfig(release=r))
    s.step()  # both prefilled, one token each
    s.step()  # a decode step: request 0 has its last token
    s.prepare_step()
    return f"{len(s.running)} in the batch"


def _batch_full(r: Release) -> str:
    s = Scheduler([RequestSpec(40, 10, 10)], max_total_num_tokens=64,
                  config=SchedulerConfig(release=r))
    s.allocator.alloc(40)  # the memory is held elsewhere: the request cannot be admitted
    s.enqueue_arrivals()
    s.get_new_batch_prefill()
    return "batch_is_full" if s.running.batch_is_full else "not full"


def _spent_budget(r: Release) -> str:
    ids = tuple(range(100))
    s = Scheduler([RequestSpec(100, 1, 1, 0.0, ids), RequestSpec(40, 1, 1, 0.0, ids[:40])],
                  max_total_num_tokens=512, config=SchedulerConfig(release=r, chunked_prefill_size=32))
    s.step()  # the first 32 tokens of request 0
    s.step()  # its next 32: the chunk budget is spent
    return f"request 1 matched {s.reqs[1].prefix_len} cached tokens"


def _touch_waiting(r: Release) -> str:
    old, new = tuple(range(5)), tuple(range(10, 15))
    specs = [RequestSpec(51, 1, 1, 0.0, tuple(range(1000, 1051))),  # needs one leaf evicted
             RequestSpec(30, 1, 1, 0.0, tuple(range(2000, 2030))),  # does not fit: the pass stops
             RequestSpec(6, 1, 1, 0.0, (*old, 99))]  # waits behind it, sharing `old`
    s = Scheduler(specs, max_total_num_tokens=60, config=SchedulerConfig(release=r))
    for key in (old, new):  # cached before the run, `old` first (least recently used)
        s.tree_cache.insert(np.array(key), s.allocator.alloc(5).numpy().astype(np.int64))
    s.step()
    kept = len(s.tree_cache.match_prefix(np.array(old)).device_indices)
    return f"the waiting request's prefix {'kept' if kept else 'evicted'}"


def _last_request(r: Release) -> str:
    batch = running_batch([8], [1], [50], free=0, page_size=4, config=SchedulerConfig(release=r))
    try:
        _, _, aborted = batch.retract_decode(abort_last_request=r.abort_last_request)
    except OutOfMemoryError:
        return "raises (the server stops)"
    return f"aborts request {aborted[0].rid}"


def _ratio_reset(r: Release) -> str:
    s = Scheduler([RequestSpec(4, 1, 1)], max_total_num_tokens=64, config=SchedulerConfig(release=r))
    s.enqueue_arrivals()
    s.new_token_ratio = 0.3
    s.on_idle()
    return f"new_token_ratio {s.new_token_ratio:.2f}"


def _prefill_frees(r: Release) -> str:
    s = Scheduler([RequestSpec(8, 1, 1), RequestSpec(8, 1, 1)], max_total_num_tokens=64,
                  page_size=4, radix_cache=False, config=SchedulerConfig(release=r))
    s.step()
    return "free list starts " + ", ".join(str(x) for x in s.allocator.free_pages.tolist()[:4])


# ----- the pools and the prefix cache --------------------------------------------------------
def _padding_row(r: Release) -> str:
    pool = ReqToTokenPool.for_release(2, 4, r)
    return f"{pool.rows} rows, requests get {', '.join(map(str, sorted(pool.alloc(2))))}"


def _row_reuse(r: Release) -> str:
    pool = ReqToTokenPool.for_release(3, 4, r)
    first, _ = pool.alloc(2)
    pool.free(first)
    row = pool.alloc(1)[0]
    return f"row {row} ({'the one just freed' if row == first else 'a never-used one'})"


def _free_order(r: Release) -> str:
    pool = ReqToTokenPool(2, 16)
    alloc = make_allocator(64, 4)
    alloc.free_pages = [5, 2, 7, 1, 3, 4, *range(6, 8), *range(8, 17)][:16]
    cache = ChunkCache.for_release(pool, alloc, r)
    reqs = []
    for i in range(2):
        req = Req(i, 12, 4, 4)
        req.req_pool_idx, req.kv_committed_len = pool.alloc(1)[0], 12
        pool.req_to_token[req.req_pool_idx, :12] = alloc.alloc_extend([0], [12], [-1], 12).to(
            pool.req_to_token.dtype)
        reqs.append(req)
    alloc.free_group_begin()
    for req in reqs:
        cache.cache_finished_req(req)
    alloc.free_group_end()
    return "free list starts " + ", ".join(str(x) for x in alloc.free_pages.tolist()[:6])


def _eviction_amount(r: Release) -> str:
    ids = [tuple(range(10 * i, 10 * i + 5)) for i in range(3)]
    specs = [RequestSpec(5, 1, 1, float(i), ids[i]) for i in range(3)]
    specs += [RequestSpec(46, 1, 1, 3.0, tuple(range(1000, 1046))),
              RequestSpec(6, 1, 1, 4.0, (*ids[2], 99))]
    s = Scheduler(specs, max_total_num_tokens=60, page_size=1, config=SchedulerConfig(release=r))
    s.run()
    hit = s.trace.events_of("admit")[4][3]["cached"]
    return f"evicts {s.tree_cache.evicted_tokens} tokens; the last request finds {hit} cached"


def _prompt_split(r: Release) -> str:
    pool, alloc = ReqToTokenPool(2, 32), make_allocator(64, 1)
    tree = RadixCache.for_release(pool, alloc, r)
    req = Req(0, 5, 3, 3, input_ids=np.arange(5), output_ids=[7, 8, 9])
    req.generated, req.req_pool_idx, req.last_node = 3, pool.alloc(1)[0], tree.root_node
    req.kv_committed_len = 8
    pool.req_to_token[req.req_pool_idx, :8] = alloc.alloc(8).to(pool.req_to_token.dtype)
    tree.cache_unfinished_req(req)
    return f"{sum(1 for _ in tree.nodes()) - 1} node(s)"


# ----- server arguments and start-up ---------------------------------------------------------
_RTX_4090_MIB = 24_564


def _chunk_default(r: Release) -> str:
    return f"{gpu_memory_defaults(_RTX_4090_MIB, 1, r)[0]:,} tokens"


def _graph_default(r: Release) -> str:
    return f"{gpu_memory_defaults(_RTX_4090_MIB, 1, r)[1]} requests"


def _prefill_graph_reserve(r: Release) -> str:
    f = default_mem_fraction_static(get_gpu("h100-sxm-80gb").memory_mib, sglang_version=r)
    return f"mem_fraction_static {f:.3f}"


def _plan(r: Release, **options: Any) -> KVPoolPlan:
    return plan_pool("qwen3-4b", gpu="rtx-4090", sglang_version=r, **options)


def _rows_are_cap(r: Release) -> str:
    plan = _plan(r, mem_fraction_static=0.8, max_total_tokens=1000)
    return f"{plan.req_to_token_pool_size:,} rows for {plan.max_running_requests} requests"


def _running_cap(r: Release) -> str:
    plan = _plan(r, mem_fraction_static=0.8, max_total_tokens=1000, max_running_requests=4000)
    return f"max_running_requests {plan.max_running_requests:,}"


def _allocation_log(r: Release) -> str:
    plan = _plan(r, mem_fraction_static=0.8)
    line = next(x for x in plan.log_lines() if "allocated" in x)
    return line.split(", K size")[0].replace(str(plan.max_total_num_tokens), "N")


def _weights_error(r: Release) -> str:
    try:
        _plan(r, mem_fraction_static=0.2)
    except NotEnoughMemoryError as e:
        return str(e).split(" for the KV cache")[0].split(". Please")[0]
    return "starts"


# ----- attention backends --------------------------------------------------------------------
def _offered(r: Release) -> str:
    try:
        return f"page size {resolve_page_size('cutlass_mla', None, r)}"
    except ConfigError:
        return "not offered"


def _forced_page(r: Release) -> str:
    return f"page size {resolve_page_size('trtllm_mha', 128, r)}"


def _fa4(r: Release) -> str:
    return default_attention_backend(100, r, asymmetric_kv=True)


def _sinks(r: Release) -> str:
    return default_attention_backend(89, r, attention_sinks=True)


DEMOS: dict[str, Demo] = {
    "extra_page_per_request": Demo(
        "every admitted request costs one page more",
        "a 3,000-token prompt, max_new_tokens 2,000, pages of 64", _admission_charge),
    "ignore_eos_reserves_all": Demo(
        "a running ignore-EOS request reserves all it has left",
        "100 tokens to go, new_token_ratio 0.5", _ignore_eos_reservation),
    "max_prefill_tokens_with_chunking": Demo(
        "max_prefill_tokens binds only without chunked prefill",
        "two 60-token prompts, max_prefill_tokens 100, chunks of 1,000",
        _prefill_budget_with_chunking),
    "chunk_ends_on_page_boundary": Demo(
        "a chunk ends where the sequence fills a page",
        "a 100-token prompt, 6 tokens already computed, chunks of 32, pages of 16", _chunk_end),
    "prefill_log_raw_tokens": Demo(
        "the prefill log counts raw tokens", "a 23-token prompt, pages of 16", _new_token_log),
    "prefill_log_pending_tokens": Demo(
        "the prefill log shows the tokens still to prefill",
        "a 23-token prompt: the fields after #queue-req", _prefill_log_fields),
    "cap_max_new_tokens_by_pool": Demo(
        "max_new_tokens is capped by the pool at arrival",
        "a 200-token prompt asking for 100 on a 256-token pool, pages of 16", _max_new_tokens_cap),
    "allocatable_counts_free_rows": Demo(
        "a pass admits no more requests than there are free rows",
        "max_running_requests 4, one row held outside the batch", _allocatable),
    "filter_finished_every_step": Demo(
        "finished requests leave the batch at the start of every step",
        "two requests; one has just finished in a decode step", _filter_finished),
    "batch_full_only_when_busy": Demo(
        "an empty batch that admits nothing is not full",
        "a 40-token prompt, 24 of 64 slots free, nothing running", _batch_full),
    "stop_pass_at_spent_budget": Demo(
        "a pass stops at a spent chunk budget before matching the next request",
        "a 100-token prompt in chunks of 32, then a request sharing its first 40 tokens",
        _spent_budget),
    "touch_waiting_prefixes": Demo(
        "the prefixes of waiting requests are kept fresh",
        "two cached 5-token prompts; a waiting request shares the older one; a 51-token "
        "prompt needs one evicted", _touch_waiting),
    "abort_last_request": Demo(
        "a request that cannot decode alone is aborted", "one request, no free page",
        _last_request),
    "reset_ratio_only_when_idle": Demo(
        "new_token_ratio is reset only when the server is idle",
        "new_token_ratio 0.30, nothing running, one request waiting", _ratio_reset),
    "group_prefill_frees": Demo(
        "a prefill pass frees its finished requests in one group",
        "two 8-token prompts that finish at their first token, pages of 4, radix cache off",
        _prefill_frees),
    "req_pool_padding_row": Demo(
        "row 0 of the page table pads and is never handed out",
        "a page table for 2 requests", _padding_row),
    "req_pool_reuses_last_freed": Demo(
        "the row freed last is reused first",
        "3 request rows: two taken, the first of them freed, one more request", _row_reuse),
    "free_order": Demo(
        "freed pages return in row order, not sorted",
        "two finished requests holding pages 5, 2, 7 and 1, 3, 4", _free_order),
    "evict_until_free": Demo(
        "eviction frees only what is missing",
        "a pool of 60, 15 tokens cached in three leaves, a 46-token prompt, then a repeat of "
        "a cached prompt", _eviction_amount),
    "split_output_from_prompt": Demo(
        "a cached answer is split from its prompt",
        "a re-prefill over a 5-token prompt and 3 outputs", _prompt_split),
    "chunked_prefill_size_20_35_gib": Demo(
        "bigger prefill chunks on 20-35 GiB cards", "an RTX 4090 (24 GB)", _chunk_default),
    "cuda_graph_max_bs_20_35_gib": Demo(
        "bigger decode CUDA graphs on 20-35 GiB cards", "an RTX 4090 (24 GB), tp 1",
        _graph_default),
    "prefill_cuda_graph_reserve": Demo(
        "memory is kept aside for prefill CUDA graphs", "an H100 (80 GB), tp 1",
        _prefill_graph_reserve),
    "req_to_token_rows_are_cap": Demo(
        "the page table has max_running_requests rows",
        "Qwen3-4B on an RTX 4090, --max-total-tokens 1000", _rows_are_cap),
    "cap_running_at_half_pool": Demo(
        "--max-running-requests is capped at half the pool",
        "--max-running-requests 4000 on a 1,000-token pool", _running_cap),
    "kv_dtype_in_allocation_log": Demo(
        "the allocation log line names the KV dtype",
        "Qwen3-4B on an RTX 4090 at mem_fraction_static 0.80 (N tokens)", _allocation_log),
    "weights_leave_no_memory_error": Demo(
        "weights that fill the budget get their own error",
        "Qwen3-4B on an RTX 4090 at mem_fraction_static 0.20", _weights_error),
    "attention_backends": Demo(
        "cutlass_mla is gone (cutedsl_mla and hpc_ops are new)",
        "--attention-backend cutlass_mla, no --page-size", _offered),
    "forced_page_sizes": Demo(
        "trtllm_mha accepts pages of 128", "--attention-backend trtllm_mha --page-size 128",
        _forced_page),
    "fa4_for_asymmetric_kv": Demo(
        "fa4 by default for K and V of different widths on sm_100",
        "a B200, K and V rows of different widths", _fa4),
    "flashinfer_avoids_attention_sinks": Demo(
        "no FlashInfer by default for a model with attention sinks",
        "an L40 (sm_89), a model with attention sinks", _sinks),
}


def demonstrate(behaviour: str, old: Release | None = None, new: Release | None = None
                ) -> VersionRow:
    """``behaviour``'s case run under ``old`` (default the oldest release) and ``new``
    (default :data:`~pagedkv.releases.DEFAULT_RELEASE`).

    Raises:
        KeyError: ``behaviour`` is not a field of :class:`~pagedkv.releases.Release`.
    """
    demo = DEMOS[behaviour]
    return VersionRow(demo.change, demo.case, demo.run(old or OLDEST), demo.run(new or DEFAULT_RELEASE))


def admission_charge() -> VersionRow:
    """A 3,000-token prompt with ``max_new_tokens`` 2,000 on 10,048 free slots, pages of 64."""
    return demonstrate("extra_page_per_request")


def prefill_budget_with_chunking() -> VersionRow:
    """Two 60-token prompts, ``max_prefill_tokens`` 100, chunks of 1,000."""
    return demonstrate("max_prefill_tokens_with_chunking")


def new_token_log() -> VersionRow:
    """The prefill log's ``#new-token`` for a 23-token prompt in pages of 16."""
    return demonstrate("prefill_log_raw_tokens")


def eviction_amount() -> VersionRow:
    """Three finished 5-token requests cached as three leaves; a 46-token prompt needs one of
    them evicted; then a request that shares the third one's tokens arrives."""
    return demonstrate("evict_until_free")


def free_order() -> VersionRow:
    """Free-list head after two requests finish together, pages of 4, on a pool whose free
    list was left shuffled by earlier frees (their pages are not in ascending row order)."""
    return demonstrate("free_order")


def prompt_split() -> VersionRow:
    """Nodes in the tree after a retracted request is prefilled again over prompt + output."""
    return demonstrate("split_output_from_prompt")


def last_request() -> VersionRow:
    """A lone request whose next decode needs a page the pool does not have."""
    return demonstrate("abort_last_request")


def chunk_default() -> VersionRow:
    """``chunked_prefill_size`` on a 24 GB card."""
    return demonstrate("chunked_prefill_size_20_35_gib")


def version_changes() -> list[VersionRow]:
    """Every row of the book's table: each behaviour where the oldest and the newest release
    differ, in :class:`~pagedkv.releases.Release` field order, computed by running both."""
    return [demonstrate(b) for b in BEHAVIOURS
            if getattr(OLDEST, b) != getattr(DEFAULT_RELEASE, b)]
