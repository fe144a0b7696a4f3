"""Bugs found by the random-workload tests, each held by its smallest failing case."""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.errors import ConfigError, PagedKVError
from pagedkv.managers import Req, Scheduler, SchedulerConfig
from pagedkv.managers.req import synthetic_ids
from pagedkv.workloads.synthetic import RequestSpec


def test_token_ids_keep_the_known_outputs_when_a_request_writes_past_them():
    # an ignore-EOS request whose workload gave one output token writes 14: the first stays
    # the given one (it changed to a made-up id once the request grew past it)
    r = Req(9, 1, 1, 15, input_ids=[0], output_ids=[7], ignore_eos=True)
    assert r.token_ids(2).tolist() == [0, 7]
    assert r.token_ids(4).tolist() == [0, 7, *synthetic_ids(9, 2, 4).tolist()]
    assert np.array_equal(r.token_ids(4)[:2], r.token_ids(2))


@pytest.mark.parametrize("disable_overlap_schedule", [True, False])
@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_chunked_reprefill_past_the_known_outputs_keeps_the_tree_consistent(
        version, disable_overlap_schedule):
    """Retracted after 14 of its 15 outputs (only 1 given), request 9 was prefilled again in
    2-token chunks; its second token's id changed between chunks, so the tree inserted the
    same slots under two keys ("a KV slot is held by two tree nodes")."""
    z = [0]
    specs = [RequestSpec(1, 15, 45, 0.0, input_ids=z,
                         output_ids=[0, 1, 1, 1, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0])]
    specs += [RequestSpec(1, 1, 1, 0.0, input_ids=z, output_ids=z) for _ in range(8)]
    specs += [RequestSpec(1, 1, 15, 0.0, input_ids=z, output_ids=z, ignore_eos=True)]
    specs += [RequestSpec(1, 1, 1, 0.0, input_ids=z, output_ids=z) for _ in range(2)]
    cfg = SchedulerConfig(schedule_conservativeness=0.1, new_token_ratio_decay_steps=5,
                          max_prefill_tokens=16, chunked_prefill_size=2, sglang_version=version,
                          disable_overlap_schedule=disable_overlap_schedule)
    s = Scheduler(specs, max_total_num_tokens=30, page_size=2, config=cfg, radix_cache=True)
    while s.step():
        s.check_invariants()
    assert s.reqs[9].num_retractions == 1 and s.reqs[9].generated == 15
    s.check_memory()


def test_a_retracted_ignore_eos_request_can_be_refused_for_good_in_0509():
    """SGLang 0.5.9's ignore-EOS admission (radix cache off) rounds the re-prefill up to whole
    pages: request 0, admitted with a 4-token prompt, retracted after 21 of its 42 tokens,
    needs ceil(25 / 4) * 4 = 28 + 21 left = 49 of 48 free slots, more than the first time
    (4 + 42 = 46), so no pass ever admits it again and the server idles with it waiting.
    pagedkv says so instead of idling forever."""
    one = [RequestSpec(p, o, o, 0.0, input_ids=[0] * p, output_ids=[0] * o)
           for p, o in ((1, 1), (1, 1), (3, 1), (2, 1), (2, 1), (1, 2), (1, 1), (8, 1), (1, 25),
                        (1, 2), (3, 1))]
    specs = [RequestSpec(4, 34, 45, 0.0, input_ids=[0] * 4, output_ids=[0] * 34, ignore_eos=True),
             *one]
    cfg = SchedulerConfig(schedule_conservativeness=0.1, new_token_ratio_decay_steps=5,
                          max_prefill_tokens=16, sglang_version="0.5.9",
                          disable_overlap_schedule=True)
    s = Scheduler(specs, max_total_num_tokens=48, page_size=4, config=cfg, radix_cache=False)
    with pytest.raises(PagedKVError, match=r"stuck: request 0 \(prompt_len=4, max_new_tokens=42\)"
                       r" is refused by an idle server with 48 slots free"):
        while s.step():
            pass
    assert s.reqs[0].num_retractions == 1 and s.reqs[0].generated == 21


def test_reserve_all_refuses_at_the_start_a_request_that_fills_the_pool_exactly():
    """reserve_all admits a footprint only below the free room (the newcomer test is
    ``need >= rem_total_tokens``): a request whose footprint is the whole pool (3 + 39 - 1
    tokens in 11 pages of 4 = 44) was accepted and then waited forever on an idle server."""
    cfg = SchedulerConfig(policy="reserve_all", sglang_version="0.5.9")
    with pytest.raises(ConfigError, match="footprint below max_total_num_tokens=44"):
        Scheduler([RequestSpec(3, 1, 39, 0.0)], max_total_num_tokens=44, page_size=4, config=cfg,
                  radix_cache=False)
    s = Scheduler([RequestSpec(3, 1, 38, 0.0)], max_total_num_tokens=44, page_size=4,
                  config=cfg, radix_cache=False)
    while s.step():
        pass
    assert s.reqs[0].generated == 1
