"""The scheduler on a linear-attention hybrid with the mamba radix cache (SGLang 0.5.23's
default server): where states are recorded (prefill and decode), a later request reusing an
earlier one's checkpointed state, slots given back on finish and retraction. The whole loop is
compared with SGLang's in tests/reference/test_event_loop_mamba_radix.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkv.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.mem_cache.mamba_cache import MambaPrefixCache
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool, MambaPool
from pagedkv.mem_cache.mamba_track import (
    DecodeTrack,
    mamba_track_grid,
    prepare_decode_tracks,
    prepare_extend_tracks,
    process_decode_track,
)
from pagedkv.workloads.synthetic import RequestSpec

STATE = Mamba2CacheParams(Mamba2StateShape.create(
    tp_world_size=1, intermediate_size=8, n_groups=2, num_heads=2, head_dim=4, state_size=4,
    conv_kernel=4), (0, 1))


class R:
    """The request fields the track functions read and set."""

    def __init__(self, prefix: int = 0, extend: int = 0, branch: int | None = None) -> None:
        self.prefix_len, self.extend_len, self.mamba_branching_seqlen = prefix, extend, branch
        self.mamba_next_track_idx, self.mamba_last_track_idx = 0, 1
        self.mamba_last_track_seqlen: int | None = None
        self.mamba_prev_track_seqlen: int | None = None
        self.mamba_ping_pong_track_buffer = [5, 6]
        self.decode_batch_idx = 0


def pool(track_slots: int) -> HybridReqToTokenPool:
    return HybridReqToTokenPool(2, 8, 64, STATE, mamba_tracking_slots=track_slots)


@pytest.mark.parametrize(("prefix", "extend", "branch", "grid", "chunk", "recorded"), [
    (0, 130, None, 64, 64, 128),  # the last whole grid inside the extend
    (0, 130, 64, 64, 64, 64),  # the match's branching point, on the chunk grid, comes first
    (0, 130, 70, 64, 64, 128),  # off the chunk grid: ignored
    (40, 63, None, 64, 64, None),  # less than a grid: nothing recorded
    (40, 100, None, 64, 64, 104),  # relative to the prefix (a chunked request's later chunk)
    (0, 200, None, 128, 128, 128),  # pages of 128: the grid is 128
])
def test_a_prefill_records_a_state_per_grid(prefix, extend, branch, grid, chunk, recorded):
    r = R(prefix, extend, branch)
    prepare_extend_tracks([r], pool(2), grid, chunk, 64)
    assert r.mamba_last_track_seqlen == recorded
    # a recording swaps the track positions (two slots); the previous length is not kept
    assert (r.mamba_last_track_idx, r.mamba_next_track_idx) == ((0, 1) if recorded else (1, 0))
    assert r.mamba_prev_track_seqlen is None


def test_a_decode_step_records_at_the_track_interval():
    """Normal loop: the step writing token 256 records it; its result makes that slot the
    last tracked state, keeps the length before, and swaps the positions."""
    assert mamba_track_grid(64) == 256 and mamba_track_grid(128) == 256
    r = R()
    r.mamba_last_track_seqlen = 128
    track = prepare_decode_tracks([r], [256], 256, enable_overlap=False)
    assert track == DecodeTrack([0], [True], None, [0])
    process_decode_track(r, 0, track, 256, pool(1))
    assert (r.mamba_last_track_idx, r.mamba_next_track_idx) == (0, 0)  # one slot: no swap
    assert (r.mamba_last_track_seqlen, r.mamba_prev_track_seqlen) == (256, 128)


def test_the_overlap_loop_learns_a_step_late():
    """Overlap loop: step A (token 255) is processed after step B (token 256) is prepared:
    A records nothing, but B will, so the positions swap then; B's result, processed after
    a third step, records length 257 - 1."""
    r = R()
    a = prepare_decode_tracks([r], [255], 256, enable_overlap=True)
    r.decode_batch_idx += 1
    b = prepare_decode_tracks([r], [256], 256, enable_overlap=True)
    assert (a.mask, a.mask_next, b.mask, b.mask_next) == ([False], [True], [True], [False])
    process_decode_track(r, 0, a, 256, pool(2))
    assert (r.mamba_next_track_idx, r.mamba_last_track_seqlen) == (1, None)
    r.decode_batch_idx += 1
    process_decode_track(r, 0, b, 257, pool(2))
    assert (r.mamba_last_track_idx, r.mamba_last_track_seqlen) == (0, 256)


def run(specs: list[RequestSpec], slots: int, overlap: bool, page_size: int = 16,
        tokens: int = 1024) -> Scheduler:
    s = Scheduler(specs, max_total_num_tokens=tokens, page_size=page_size, radix_cache=True,
                  config=SchedulerConfig(disable_overlap_schedule=not overlap,
                                         max_running_requests=2),
                  mamba_pool=MambaPool(slots, STATE))
    while s.step():
        s.check_invariants()
    return s


@pytest.mark.parametrize("overlap", [False, True])
def test_a_later_request_reuses_the_checkpointed_state(overlap):
    """Two requests sharing 150 tokens, the second arriving after the first finished: the
    first's prefill recorded its state at 128 (the grid) and the tree kept it, so the second
    matches 128 tokens; every slot ends free or in the tree."""
    shared = list(range(1000, 1150))
    specs = [RequestSpec(160, 4, 4, 0.0, input_ids=np.array(shared + list(range(10)))),
             RequestSpec(170, 4, 4, 50.0, input_ids=np.array(shared + list(range(50, 70))))]
    s = run(specs, 10, overlap)
    assert isinstance(s.tree_cache, MambaPrefixCache)
    assert [r.cached_tokens for r in s.reqs] == [0, 128]
    slots = s.req_to_token_pool.mamba_allocator
    tree = s.tree_cache
    assert slots.available_size() + tree.mamba_evictable_size() == 10
    assert tree.mamba_evictable_size() >= 1


@pytest.mark.parametrize(("overlap", "page_size", "held"), [
    (True, 16, 3), (False, 16, 2), (False, 1, 1)])
def test_a_running_request_holds_its_live_and_track_slots(overlap, page_size, held):
    """The live slot plus the extra_buffer strategy's track slots: 2 with the overlap loop,
    1 without, none at pages of one token without it (no_buffer); a 20-token prompt covers
    no checkpoint grid (64), so extra_buffer gives the tree nothing yet."""
    s = Scheduler([RequestSpec(20, 30, 30, 0.0)], max_total_num_tokens=512,
                  page_size=page_size, radix_cache=True,
                  config=SchedulerConfig(disable_overlap_schedule=not overlap),
                  mamba_pool=MambaPool(8, STATE))
    s.step()
    s.step()
    tree = s.tree_cache
    assert isinstance(tree, MambaPrefixCache)
    in_tree = tree.mamba_evictable_size() + tree.mamba_protected_size()
    assert 8 - s.req_to_token_pool.mamba_allocator.available_size() - in_tree == held
    # no_buffer checkpoints the prompt's state into a slot of the tree's after the prefill
    assert in_tree == (page_size == 1 and not overlap)


@pytest.mark.parametrize(("last", "prev", "slots", "tokens", "picked"), [
    (256, 128, 2, 300, (256, 1)),  # the last tracked state fits the key
    (256, 128, 2, 200, (128, 0)),  # it runs past the key: the one before, in the other slot
    (256, None, 2, 200, None),  # nothing before it: nothing donated
    (256, 128, 1, 200, None),  # one track slot: the one before is overwritten
    (None, None, 2, 50, (0, 1)),  # never tracked: length 0 (nothing inserted)
])
def test_a_finished_request_leaves_its_last_tracked_state_that_fits(last, prev, slots, tokens,
                                                                    picked):
    """``_select_finished_checkpoint``: SGLang 0.5.23's choice of the state a finished
    request leaves in the tree (the last track position is 1 with two track slots)."""
    from pagedkv.mem_cache.allocator import make_allocator

    hybrid = pool(slots)
    cache = MambaPrefixCache(hybrid, make_allocator(256, 1))
    r = R()
    r.mamba_last_track_seqlen, r.mamba_prev_track_seqlen = last, prev
    r.mamba_last_track_idx = 1 if slots == 2 else 0
    assert cache._select_finished_checkpoint(r, tokens) == picked


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 120), st.integers(1, 300),
                          st.floats(0, 0.2)), min_size=1, max_size=6),
       st.integers(1, 3), st.sampled_from([1, 16]), st.booleans())
def test_random_runs_keep_every_state_slot_accounted_for(reqs, running, page_size, overlap):
    """Requests on two shared stems: every step each running request holds its state and
    track slots and nothing else is held outside the tree (the scheduler's invariants);
    at the end every slot is free or the tree's, and no request holds one."""
    stems = [np.arange(1000, 1200), np.arange(2000, 2200)]
    specs = [RequestSpec(100 + cut, new, new, t,
                         input_ids=np.concatenate((stems[stem][:100], np.arange(cut) + 5000 + i)))
             for i, (stem, cut, new, t) in enumerate(reqs)]
    track = 2 if overlap else (1 if page_size > 1 else 0)
    slots = running * (3 + track)
    s = Scheduler(specs, max_total_num_tokens=2048, page_size=page_size, radix_cache=True,
                  config=SchedulerConfig(disable_overlap_schedule=not overlap,
                                         max_running_requests=running,
                                         schedule_conservativeness=0.3),
                  mamba_pool=MambaPool(slots, STATE))
    while s.step():
        s.check_invariants()
    tree = s.tree_cache
    assert isinstance(tree, MambaPrefixCache)
    assert all(r.finished and r.mamba_pool_idx == -1 for r in s.reqs)
    assert (s.req_to_token_pool.mamba_allocator.available_size()
            + tree.mamba_evictable_size() + tree.mamba_protected_size()) == slots
