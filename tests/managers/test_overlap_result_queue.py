"""OverlapResultQueue alone: what the overlap loop's next step reads of the batch in flight
(the prefill to merge, the requests finishing in flight, the future tokens, the window bound)."""

from __future__ import annotations

import numpy as np

from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components import MAX_WINDOW, InFlight, OverlapResultQueue
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.model_executor.forward_batch_info import ForwardBatch
from pagedkv.workloads.synthetic import RequestSpec


def running(gen_max: list[tuple[int, int]]) -> ScheduleBatch:
    """A running batch of 4-token prompts, ``(generated, max_new_tokens)`` each."""
    alloc = make_allocator(256, 1)
    pool = ReqToTokenPool.for_release(8, 64, "0.5.23")
    batch = ScheduleBatch(pool, alloc, ChunkCache.for_release(pool, alloc, "0.5.23"))
    reqs = []
    for i, (gen, most) in enumerate(gen_max):
        r = Req.from_spec(i, RequestSpec(4, most, most))
        r.req_pool_idx, r.generated, r.kv_committed_len = pool.alloc(1)[0], gen, 4 + gen
        pool.req_to_token.numpy()[r.req_pool_idx, :r.kv_committed_len] = alloc.alloc(4 + gen).numpy()
        reqs.append(r)
    batch.merge_batch(reqs)
    return batch


def in_flight(mode: str, reqs: list[Req], tokens: list[int] | None = None,
              sample: list[bool] | None = None) -> InFlight:
    """A pass over ``reqs`` in flight, with the tokens it sampled (None: the simulator)."""
    n = len(reqs)
    z = np.zeros(n, dtype=np.int64)
    fb_sample = np.ones(n, dtype=bool) if sample is None else np.array(sample)
    fb = ForwardBatch(mode, list(reqs), z, z, np.ones(n, dtype=np.int64), z, fb_sample, 0)
    return InFlight(fb, None if tokens is None else np.array(tokens, dtype=np.int64))


def queue(f: InFlight | None, skip: bool = True, samples: bool = False) -> OverlapResultQueue:
    """A queue holding ``f`` (``skip``: 0.5.23's rule; ``samples``: a real model)."""
    return OverlapResultQueue(skip_finishing_decode_in_flight=skip, samples_tokens=samples,
                              in_flight=f)


def test_pop_empties_the_queue() -> None:
    b = running([(1, 5)])
    q = queue(in_flight("decode", b.reqs))
    assert q.in_flight_reqs() == b.reqs
    f = q.pop()
    assert f is not None and q.in_flight is None and q.pop() is None and q.in_flight_reqs() == []


def test_the_prefill_in_flight_merges_all_but_the_chunked_and_the_finished() -> None:
    b = running([(1, 5), (1, 5), (1, 5)])
    a, chunked, done = b.reqs
    done.finished = True
    assert queue(in_flight("extend", [a, chunked, done])).prefill_to_merge(chunked) == [a]
    assert queue(in_flight("decode", b.reqs)).prefill_to_merge(None) is None
    assert queue(None).prefill_to_merge(None) is None


def test_requests_finishing_in_flight_are_those_the_result_takes_to_max_new_tokens() -> None:
    b = running([(4, 5), (3, 5), (4, 5), (5, 9)])  # indices 0 and 2 reach 5 with the result
    f = in_flight("decode", [b.reqs[0], b.reqs[1], b.reqs[3]])  # request 2 is not in flight
    assert queue(f).reqs_finishing_inflight(b) == [0]
    assert queue(f, skip=False).reqs_finishing_inflight(b) == []  # 0.5.9
    assert queue(None).reqs_finishing_inflight(b) == []


def test_the_next_decode_takes_the_in_flight_tokens_where_they_were_sampled() -> None:
    b = running([(1, 5), (1, 5), (1, 5)])
    b.reqs[0].output_ids = [7]
    b.reqs[1].output_ids = [8]
    b.reqs[2].output_ids = []
    f = in_flight("extend", [b.reqs[0], b.reqs[1]], tokens=[11, 12], sample=[True, False])
    ids = queue(f, samples=True).future_input_ids(b)
    assert ids is not None and ids.tolist() == [11, 8, -1]  # sampled; newest output; none
    assert queue(f, samples=False).future_input_ids(b) is None  # the simulator samples none


def test_a_window_needs_a_decode_in_flight_over_the_same_requests() -> None:
    b = running([(1, 9), (3, 6)])
    assert queue(in_flight("decode", b.reqs)).window_limit(b) == min(9 - 1 - 1, 6 - 3 - 1)
    assert queue(in_flight("decode", b.reqs), skip=False).window_limit(b) == MAX_WINDOW
    assert queue(in_flight("decode", b.reqs[:1])).window_limit(b) is None
    assert queue(in_flight("extend", b.reqs)).window_limit(b) is None
    assert queue(None).window_limit(b) is None
