"""The scheduling cases behind :data:`pagedkv.lessons.versions.DEMOS`: each runs pagedkv under a
:class:`~pagedkv.releases.Release` and says in words what came out. Each reads the one
field its name says (and is shown, with the book's words for it, by ``versions``); the
start-up cases (server arguments, pool sizing, attention backends) are in
:mod:`pagedkv.lessons.version_runs_startup`.
"""

from __future__ import annotations

import numpy as np

from pagedkv.configs.mamba_utils import gdn_cache_params
from pagedkv.configs.model_family import text_config
from pagedkv.configs.model_presets import load_model
from pagedkv.errors import OutOfMemoryError
from pagedkv.lessons.admission import UniformBatch, admission_pass, admission_state
from pagedkv.lessons.examples import running_batch
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_policy import running_reservation
from pagedkv.managers.scheduler import Scheduler
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.mamba_pool import MambaPool
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.releases import Release
from pagedkv.workloads.synthetic import RequestSpec


def _normal_loop(r: Release, **options: object) -> SchedulerConfig:
    """The cases run SGLang's normal loop (``--disable-overlap-schedule``): each step's result
    is processed in the step, so a rule shows in the step where it acts. The in-flight rule
    (``skip_finishing_decode_in_flight``) runs the overlap loop, where it lives."""
    return SchedulerConfig(release=r, disable_overlap_schedule=True, **options)


# ----- admission ------------------------------------------------------------------------------
def admission_charge(r: Release) -> str:
    """``Release.extra_page_per_request`` on a 3,000-token prompt, max_new_tokens 2,000, pages of
    64."""
    state = admission_state(UniformBatch(0, 1, 1, 1), 10_048, SchedulerConfig(release=r), 0.7, 64)
    adder, _ = admission_pass(state, [Req(0, 3000, 2000, 2000)])
    return f"charged {adder.charges[0]:,.0f}"


def ignore_eos_reservation(r: Release) -> str:
    """``Release.ignore_eos_reserves_all`` on 100 tokens to go, new_token_ratio 0.5."""
    one = np.array([1], dtype=np.int64)
    held = running_reservation(SchedulerConfig(release=r), 1, 0.5, one * 10, one * 100, one * 0,
                               one * 9, np.array([True]))
    return f"reserves {held:g} tokens"


def prefill_budget_with_chunking(r: Release) -> str:
    """``Release.max_prefill_tokens_with_chunking`` on two 60-token prompts, max_prefill_tokens
    100, chunks of 1,000."""
    cfg = SchedulerConfig(release=r, max_prefill_tokens=100, chunked_prefill_size=1000)
    state = admission_state(UniformBatch(0, 1, 1, 1), 10_000, cfg, 0.7)
    adder, _ = admission_pass(state, [Req(0, 60, 10, 10), Req(1, 60, 10, 10)])
    return f"{len(adder.can_run_list)} admitted"


def chunk_end(r: Release) -> str:
    """``Release.chunk_ends_on_page_boundary`` on a 100-token prompt, 6 tokens already computed,
    chunks of 32, pages of 16."""
    cfg = SchedulerConfig(release=r, chunked_prefill_size=32)
    state = admission_state(UniformBatch(0, 1, 1, 1), 4096, cfg, 0.7, 16)
    adder, req = state.adder(), Req(0, 100, 10, 10)
    req.prefix_len, req.last_node = 6, state.batch.tree_cache.root_node
    adder.add_one_req(req)
    return f"a chunk of {req.extend_len} tokens"


def prefill_log(r: Release) -> str:
    """The prefill log line of a 23-token prompt in pages of 16, under ``r``."""
    s = Scheduler([RequestSpec(23, 2, 2)], max_total_num_tokens=256, page_size=16,
                  config=_normal_loop(r))
    s.run()
    return s.trace.log[0]


def new_token_log(r: Release) -> str:
    """``Release.prefill_log_raw_tokens`` on a 23-token prompt, pages of 16."""
    return prefill_log(r).split(", ")[2]


def prefill_log_fields(r: Release) -> str:
    """``Release.prefill_log_pending_tokens`` on a 23-token prompt: the fields after #queue-req."""
    tail = prefill_log(r).split("#queue-req: ")[1].split(", ")[1:]
    return ", ".join(part.split(":")[0] for part in tail)


#: ``max_new_tokens_cap``'s case: (prompt, max_new_tokens asked, pool tokens, page size).
CAP_CASE = (200, 100, 256, 16)


def max_new_tokens_cap(r: Release) -> str:
    """``Release.cap_max_new_tokens_by_pool`` on :data:`CAP_CASE`: a 200-token prompt asking
    for 100 on a 256-token pool, pages of 16."""
    prompt, asked, pool, page = CAP_CASE
    s = Scheduler([RequestSpec(prompt, asked, asked)], max_total_num_tokens=pool, page_size=page,
                  config=_normal_loop(r))
    return f"max_new_tokens becomes {s.reqs[0].max_new_tokens}"


def allocatable(r: Release) -> str:
    """``Release.allocatable_counts_free_rows`` on max_running_requests 4, one row held outside the
    batch."""
    s = Scheduler([RequestSpec(4, 1, 1)], max_total_num_tokens=64,
                  config=_normal_loop(r, max_running_requests=4))
    s.req_to_token_pool.alloc(1)  # a row held outside the running batch
    return f"admits up to {s.prefill_manager.num_allocatable_reqs(0)}"


def filter_finished(r: Release) -> str:
    """``Release.filter_finished_every_step`` on two requests; one has just finished in a decode
    step."""
    s = Scheduler([RequestSpec(4, 2, 2), RequestSpec(4, 5, 5)], max_total_num_tokens=64,
                  config=_normal_loop(r))
    s.step()  # both prefilled, one token each
    s.step()  # a decode step: request 0 has its last token
    s.prepare_step()
    return f"{len(s.running)} in the batch"


def batch_full(r: Release) -> str:
    """``Release.batch_full_only_when_busy`` on a 40-token prompt, 24 of 64 slots free, nothing
    running."""
    s = Scheduler([RequestSpec(40, 10, 10)], max_total_num_tokens=64,
                  config=_normal_loop(r))
    s.allocator.alloc(40)  # the memory is held elsewhere: the request cannot be admitted
    s.enqueue_arrivals()
    s.get_new_batch_prefill()
    return "batch_is_full" if s.running.batch_is_full else "not full"


def spent_budget(r: Release) -> str:
    """``Release.stop_pass_at_spent_budget`` on a 100-token prompt in chunks of 32, then a request
    sharing its first 40 tokens."""
    ids = tuple(range(100))
    s = Scheduler([RequestSpec(100, 1, 1, 0.0, ids), RequestSpec(40, 1, 1, 0.0, ids[:40])],
                  max_total_num_tokens=512, config=_normal_loop(r, chunked_prefill_size=32))
    s.step()  # the first 32 tokens of request 0
    s.step()  # its next 32: the chunk budget is spent
    return f"request 1 matched {s.reqs[1].prefix_len} cached tokens"


def touch_waiting(r: Release) -> str:
    """``Release.touch_waiting_prefixes`` on two cached 5-token prompts; a waiting request shares
    the older one; a 51-token prompt needs one evicted."""
    old, new = tuple(range(5)), tuple(range(10, 15))
    specs = [RequestSpec(51, 1, 1, 0.0, tuple(range(1000, 1051))),  # needs one leaf evicted
             RequestSpec(30, 1, 1, 0.0, tuple(range(2000, 2030))),  # does not fit: the pass stops
             RequestSpec(6, 1, 1, 0.0, (*old, 99))]  # waits behind it, sharing `old`
    s = Scheduler(specs, max_total_num_tokens=60, config=_normal_loop(r))
    for key in (old, new):  # cached before the run, `old` first (least recently used)
        s.tree_cache.insert(np.array(key), s.allocator.alloc(5).numpy().astype(np.int64))
    s.step()
    kept = len(s.tree_cache.match_prefix(np.array(old)).device_indices)
    return f"the waiting request's prefix {'kept' if kept else 'evicted'}"


def last_request(r: Release) -> str:
    """``Release.abort_last_request`` on one request, no free page."""
    batch = running_batch([8], [1], [50], free=0, page_size=4, config=_normal_loop(r))
    try:
        _, _, aborted = batch.retract_decode(abort_last_request=r.abort_last_request)
    except OutOfMemoryError:
        return "raises (the server stops)"
    return f"aborts request {aborted[0].rid}"


def ratio_reset(r: Release) -> str:
    """``Release.reset_ratio_only_when_idle`` on new_token_ratio 0.30, nothing running, one request
    waiting."""
    s = Scheduler([RequestSpec(4, 1, 1)], max_total_num_tokens=64, config=_normal_loop(r))
    s.enqueue_arrivals()
    s.new_token_ratio = 0.3
    s.on_idle()
    return f"new_token_ratio {s.new_token_ratio:.2f}"


def prefill_frees(r: Release) -> str:
    """``Release.group_prefill_frees`` on two 8-token prompts that finish at their first token,
    pages of 4, radix cache off."""
    s = Scheduler([RequestSpec(8, 1, 1), RequestSpec(8, 1, 1)], max_total_num_tokens=64,
                  page_size=4, radix_cache=False, config=_normal_loop(r))
    s.step()
    return "free list starts " + ", ".join(str(x) for x in s.allocator.free_pages.tolist()[:4])


def finishing_in_flight(r: Release) -> str:
    """``Release.skip_finishing_decode_in_flight`` in the overlap loop: two 2-token prompts
    with max_new_tokens 7 and 8, a pool of 16 tokens, schedule_conservativeness 0.1."""
    config = SchedulerConfig(release=r, schedule_conservativeness=0.1,
                             disable_overlap_schedule=False)
    s = Scheduler([RequestSpec(2, 7, 7), RequestSpec(2, 8, 8)], max_total_num_tokens=16,
                  config=config)
    s.run()
    retracted = [e.rid for e in s.trace.events if e.kind == "retract"]
    if retracted:
        return "retracts request " + ", ".join(str(rid) for rid in retracted)
    n = s.counters.num_decode_skips
    return f"skips {n} decode step{'' if n == 1 else 's'}, retracts nothing"


# ----- a linear-attention hybrid's state slots ------------------------------------------------
def _qwen3_next(specs: list[RequestSpec], slots: int, tokens: int, r: Release,
                **options: object) -> Scheduler:
    """Qwen3-Next-80B-A3B's state (one rank) in ``slots`` slots beside a KV pool of ``tokens``,
    radix cache off, pages of 4, the normal loop."""
    spec = load_model("qwen3-next-80b-a3b")
    mamba = MambaPool(slots, gdn_cache_params(text_config(spec.config), 1, spec.name))
    return Scheduler(specs, max_total_num_tokens=tokens, page_size=4, radix_cache=False,
                     config=_normal_loop(r, **options), mamba_pool=mamba)


def slots_taken_ahead(r: Release) -> str:
    """``Release.mamba_slots_taken_ahead`` on three 8-token prompts (2, 40 and 2 new tokens),
    3 state slots, at most 2 running: the first finishes and frees slot 1, then the third is
    admitted."""
    specs = [RequestSpec(8, n, n, 0.0) for n in (2, 40, 2)]
    s = _qwen3_next(specs, 3, 256, r, max_running_requests=2)
    while s.reqs[2].mamba_pool_idx < 0:
        s.step()
    return f"the third request gets slot {s.reqs[2].mamba_pool_idx}"


def retract_line(r: Release) -> str:
    """``Release.retract_log_counts_mamba_slots`` on six 8-token prompts with max_new_tokens 50,
    6 state slots, a KV pool of 128 tokens, schedule_conservativeness 0.1."""
    s = _qwen3_next([RequestSpec(8, 50, 50, 0.0) for _ in range(6)], 6, 128, r,
                    schedule_conservativeness=0.1)
    s.run()
    line = next(line for line in s.trace.log if "Retract requests" in line)
    return line.split("Retract requests. ")[1].split(", #new_token_ratio")[0]


# ----- the pools and the prefix cache --------------------------------------------------------
def padding_row(r: Release) -> str:
    """``Release.req_pool_padding_row`` on a page table for 2 requests."""
    pool = ReqToTokenPool.for_release(2, 4, r)
    return f"{pool.rows} rows, requests get {', '.join(map(str, sorted(pool.alloc(2))))}"


def row_reuse(r: Release) -> str:
    """``Release.req_pool_reuses_last_freed`` on 3 request rows: two taken, the first of them
    freed, one more request."""
    pool = ReqToTokenPool.for_release(3, 4, r)
    first, _ = pool.alloc(2)
    pool.free(first)
    row = pool.alloc(1)[0]
    return f"row {row} ({'the one just freed' if row == first else 'a never-used one'})"


def free_order(r: Release) -> str:
    """``Release.free_order`` on two finished requests holding pages 5, 2, 7 and 1, 3, 4."""
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


def eviction_amount(r: Release) -> str:
    """``Release.evict_until_free`` on a pool of 60, 15 tokens cached in three leaves, a 46-token
    prompt, then a repeat of a cached prompt."""
    ids = [tuple(range(10 * i, 10 * i + 5)) for i in range(3)]
    specs = [RequestSpec(5, 1, 1, float(i), ids[i]) for i in range(3)]
    specs += [RequestSpec(46, 1, 1, 3.0, tuple(range(1000, 1046))),
              RequestSpec(6, 1, 1, 4.0, (*ids[2], 99))]
    s = Scheduler(specs, max_total_num_tokens=60, page_size=1, config=_normal_loop(r))
    s.run()
    hit = s.trace.events_of("admit")[4].extra["cached"]
    return f"evicts {s.tree_cache.evicted_tokens} tokens; the last request finds {hit} cached"


def prompt_split(r: Release) -> str:
    """``Release.split_output_from_prompt`` on a re-prefill over a 5-token prompt and 3 outputs."""
    pool, alloc = ReqToTokenPool(2, 32), make_allocator(64, 1)
    tree = RadixCache.for_release(pool, alloc, r)
    req = Req(0, 5, 3, 3, input_ids=np.arange(5), output_ids=[7, 8, 9])
    req.generated, req.req_pool_idx, req.last_node = 3, pool.alloc(1)[0], tree.root_node
    req.kv_committed_len = 8
    pool.req_to_token[req.req_pool_idx, :8] = alloc.alloc(8).to(pool.req_to_token.dtype)
    tree.cache_unfinished_req(req)
    return f"{sum(1 for _ in tree.nodes()) - 1} node(s)"
