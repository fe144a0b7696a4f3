"""A long run's memory grows by a few hundred bytes per request (its ``Req``), not by what a
step or a finished request leaves behind."""

from __future__ import annotations

import tracemalloc

from pagedkv.managers import Scheduler
from pagedkv.managers.trace import TraceMeta
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.workloads.synthetic import sharegpt_like


def held_after_run(n: int) -> tuple[int, Scheduler]:
    """Bytes Python holds (tracemalloc) after a summary-trace run of ``n`` requests."""
    specs = sharegpt_like(n, seed=3)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    s = Scheduler(specs, max_total_num_tokens=60_000, radix_cache=False,
                  trace=SummaryTrace(TraceMeta(60_000)))
    s.run()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held, s


def test_memory_per_request_is_its_req_only() -> None:
    small, _ = held_after_run(500)
    large, s = held_after_run(2000)
    assert all(r._prefix_slots is None for r in s.reqs)  # no tensor kept once used
    per_request = (large - small) / 1500  # the pool's fixed arrays cancel out
    # a Req is ~300 bytes with its shared-key dict, ~100 more for its ints; a Req whose dict
    # stopped sharing keys (an attribute set after __init__) costs 1.6 KB
    assert per_request < 700, f"{per_request:.0f} bytes per request"
