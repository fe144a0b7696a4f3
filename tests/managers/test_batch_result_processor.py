"""SchedulerBatchResultProcessor alone: a prefill result and a decode result applied to
requests on real pools, finishes handed to ``on_finish`` once each, the EOS rule, and the
overlap loop's result of the batch in flight (into the running batch's columns)."""

from __future__ import annotations

import numpy as np

from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components import InFlight, SchedulerBatchResultProcessor
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.model_executor.forward_batch_info import ForwardBatch
from pagedkv.workloads.synthetic import RequestSpec


def setup(samples_tokens: bool = False, eos: frozenset[int] = frozenset()
          ) -> tuple[SchedulerBatchResultProcessor, list[Req]]:
    alloc = make_allocator(64, 1)
    pool = ReqToTokenPool.for_release(4, 64, "0.5.23")
    cache = ChunkCache.for_release(pool, alloc, "0.5.23")
    finished: list[Req] = []
    proc = SchedulerBatchResultProcessor(
        token_to_kv_pool_allocator=alloc, req_to_token_pool=pool, tree_cache=cache,
        group_prefill_frees=True, samples_tokens=samples_tokens, eos_token_ids=eos,
        on_finish=finished.append)
    return proc, finished


def prefilled(proc: SchedulerBatchResultProcessor, specs: list[RequestSpec]) -> ForwardBatch:
    """``specs`` as requests whose prompts are in the pool, as one extend pass."""
    pool, alloc = proc.req_to_token_pool, proc.token_to_kv_pool_allocator
    reqs = [Req.from_spec(i, s) for i, s in enumerate(specs)]
    table = pool.req_to_token.numpy()
    slots = []
    for r in reqs:
        r.req_pool_idx = pool.alloc(1)[0]
        got = alloc.alloc(r.prompt_len).numpy()
        table[r.req_pool_idx, :r.prompt_len] = got
        r.kv_committed_len = r.prompt_len
        slots.append(got)
    n = len(reqs)
    ext = np.array([r.prompt_len for r in reqs], dtype=np.int64)
    return ForwardBatch("extend", reqs, np.array([r.req_pool_idx for r in reqs]),
                        np.zeros(n, dtype=np.int64), ext, np.concatenate(slots),
                        np.ones(n, dtype=bool), 0, pool)


def test_prefill_result_keeps_the_unfinished_and_releases_the_finished() -> None:
    proc, finished = setup()
    batch = prefilled(proc, [RequestSpec(5, 3, 3), RequestSpec(4, 1, 4), RequestSpec(6, 2, 2)])
    done = proc.process_batch_result_prefill(batch, None, clock=0.25)
    a, b, c = batch.reqs
    assert done == [a, c] and finished == [b]
    assert [r.generated for r in batch.reqs] == [1, 1, 1]
    assert [r.first_token_s for r in batch.reqs] == [0.25] * 3
    assert (b.finished, b.finish_reason, b.req_pool_idx) == (True, "stop", -1)
    assert proc.token_to_kv_pool_allocator.available_size() == 64 - 5 - 6  # b's 4 freed


def test_a_chunk_cut_short_samples_nothing() -> None:
    proc, finished = setup()
    batch = prefilled(proc, [RequestSpec(5, 1, 1)])
    batch.sample[0] = False
    assert proc.process_batch_result_prefill(batch, None, clock=1.0) == [] and not finished
    assert batch.reqs[0].generated == 0 and batch.reqs[0].first_token_s is None


def test_decode_result_releases_the_stopped_in_one_group() -> None:
    proc, finished = setup()
    batch = prefilled(proc, [RequestSpec(5, 3, 3), RequestSpec(4, 2, 4)])
    done = proc.process_batch_result_prefill(batch, None, clock=0.0)
    running = ScheduleBatch(proc.req_to_token_pool, proc.token_to_kv_pool_allocator,
                            proc.tree_cache)
    running.merge_batch(done)
    running.prepare_for_decode()
    running.generated += 1  # both sampled their second token: request 1 reaches output_len 2
    proc.process_batch_result_decode(running)
    assert [r.rid for r in finished] == [1] and running.finished.tolist() == [False, True]
    proc.process_batch_result_decode(running)  # already finished: not released again
    assert [r.rid for r in finished] == [1]


def test_a_real_models_eos_ends_a_request_unless_it_ignores_eos() -> None:
    proc, _ = setup(samples_tokens=True, eos=frozenset({7}))
    r = Req.from_spec(0, RequestSpec(3, None, 10))
    keep = Req.from_spec(1, RequestSpec(3, None, 10, ignore_eos=True))
    r.output_ids, keep.output_ids = [], []  # a real model's requests: it appends what it samples
    proc.append_token(r, 5)
    assert not r.finished and not proc.hit_eos(r)
    proc.append_token(r, 7)
    proc.append_token(keep, 7)
    assert (r.finished, r.finish_reason, r.output_ids) == (True, "stop", [5, 7])
    assert not keep.finished and not proc.hit_eos(keep)
    sim, _ = setup()  # a simulated request stops at its length, or at max_new_tokens
    s = Req.from_spec(2, RequestSpec(3, 2, 2, ignore_eos=True))
    sim.append_token(s, None)
    sim.append_token(s, None)
    assert (s.finished, s.finish_reason) == (True, "length")


def test_the_overlap_loops_decode_result_commits_into_the_running_batch() -> None:
    proc, finished = setup(samples_tokens=True, eos=frozenset({7}))
    specs = [RequestSpec(5, None, 9), RequestSpec(4, None, 9), RequestSpec(6, None, 9),
             RequestSpec(3, None, 9)]
    batch = prefilled(proc, specs)
    for r in batch.reqs:
        r.output_ids = []
    done = proc.process_batch_result_prefill(batch, np.array([1, 2, 3, 4]), clock=0.0)
    running = ScheduleBatch(proc.req_to_token_pool, proc.token_to_kv_pool_allocator,
                            proc.tree_cache)
    running.merge_batch(done)
    running.prepare_for_decode()
    flight = InFlight(running.get_model_worker_batch(), np.array([5, 7, 6, 6]), 1)
    a, b, c, d = running.reqs
    c.is_retracted = True  # retracted while its pass was in flight: its token is dropped
    d.finished = True  # seen finished a step late: nothing more for it
    assert proc.process_batch_result(flight, 0.5, running) == 0  # a decode counts at launch
    assert (a.output_ids, b.output_ids, c.output_ids, d.output_ids) == ([1, 5], [2, 7], [3], [4])
    assert running.generated.tolist() == [2, 2, 1, 1] and finished == [b]
    assert running.finished.tolist() == [False, True, False, False]


def test_the_overlap_loops_prefill_result_skips_the_retracted_and_counts_the_sampled() -> None:
    proc, finished = setup()
    batch = prefilled(proc, [RequestSpec(5, 3, 3), RequestSpec(4, 1, 4), RequestSpec(6, 2, 2)])
    a, b, c = batch.reqs
    running = ScheduleBatch(proc.req_to_token_pool, proc.token_to_kv_pool_allocator,
                            proc.tree_cache)
    running.merge_batch([a, b])  # merged before the first token is known
    c.is_retracted = True
    assert proc.process_batch_result(InFlight(batch, None), 0.25, running) == 2
    assert running.generated.tolist() == [1, 1] and running.finished.tolist() == [False, True]
    assert finished == [b] and c.generated == 0 and a.first_token_s == 0.25


def test_the_overlap_loops_decode_result_for_a_request_left_out_of_the_running_batch() -> None:
    # 0.5.23 leaves a request whose in-flight token reaches max_new_tokens out of the next
    # decode step: its result commits on the request itself; finishes release in batch order
    proc, finished = setup()
    batch = prefilled(proc, [RequestSpec(5, 9, 9), RequestSpec(4, 2, 2), RequestSpec(6, 2, 9)])
    done = proc.process_batch_result_prefill(batch, None, clock=0.0)
    running = ScheduleBatch(proc.req_to_token_pool, proc.token_to_kv_pool_allocator,
                            proc.tree_cache)
    running.merge_batch(done)
    running.prepare_for_decode()
    flight = InFlight(running.get_model_worker_batch(), None, 1)
    a, b, c = running.reqs
    running.sync([1])  # as leave_out_finishing does
    running.filter_batch([0, 2])  # b left out of the running batch, holding its KV
    free = proc.token_to_kv_pool_allocator.available_size()
    proc.process_batch_result(flight, 0.5, running)
    assert finished == [b, c] and (b.generated, c.generated) == (2, 2)
    assert (b.finish_reason, c.finish_reason) == ("length", "stop")
    assert running.generated.tolist() == [2, 2] and running.finished.tolist() == [False, True]
    assert b.req_pool_idx == c.req_pool_idx == -1 and a.req_pool_idx >= 0
    assert proc.token_to_kv_pool_allocator.available_size() == free + 5 + 7  # prompt + decode slot
