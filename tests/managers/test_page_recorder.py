"""Page events: replaying the owner changes rebuilds every step's pool exactly."""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.managers.page_recorder import CACHED, FREE, SHARED, page_owners
from pagedkv.workloads.prefix import as_specs, multi_turn


@pytest.mark.parametrize(("page", "radix"), [(1, True), (4, True), (16, False)])
def test_replayed_events_rebuild_each_step(page: int, radix: bool) -> None:
    specs = as_specs(multi_turn(6, 3, (10, 40), (10, 60), system_len=30, seed=2), max_new_tokens=80)
    s = Scheduler(specs, max_total_num_tokens=1024, page_size=page, radix_cache=radix,
                  record_pages=True, config=SchedulerConfig(chunked_prefill_size=64))
    owners = np.full(1024 // page + 1, FREE)
    ev = s.trace.page_events
    seen = 0
    while s.step():
        now = page_owners(s)
        n = len(ev.step)
        for i in range(seen, n):
            assert ev.step[i] == s.num_steps - 1
            owners[ev.page[i]] = ev.owner[i]
        seen = n
        assert np.array_equal(owners, now)
        # the split the trace columns report, page by page
        free = int((owners[1:] == FREE).sum()) * page
        assert free == s.allocator.available_size()
        if radix:
            cached = int(np.isin(owners[1:], (CACHED, SHARED)).sum()) * page
            assert cached == s.tree_cache.evictable_size() + s.tree_cache.protected_size()
    # at the end nothing runs: every page is free or cached and evictable
    assert np.isin(owners[1:], (FREE, CACHED)).all() and (owners[1:] == CACHED).any() == radix
    d = s.trace.to_dict()["page_events"]
    assert len(d["step"]) == len(d["page"]) == len(d["owner"]) > 0
