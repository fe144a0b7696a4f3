"""The state-slot pool of a linear-attention hybrid: shapes and bytes, slot order, failures.

Exact values are SGLang 0.5.23's, read off its own classes (``tests/reference/
test_mamba_pool_reference.py`` compares the two on random sequences)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape, gdn_cache_params
from pagedkv.configs.model_presets import load_model
from pagedkv.errors import AllocatorError, ConfigError, OutOfMemoryError
from pagedkv.mem_cache.allocator.mamba import MambaSlotAllocator
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool, MambaPool


@dataclass
class R:
    req_pool_idx: int = -1
    mamba_pool_idx: int = -1


def tiny() -> Mamba2CacheParams:
    shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=8, n_groups=2,
                                    num_heads=2, head_dim=4, state_size=4, conv_kernel=4)
    return Mamba2CacheParams(shape, (0, 1, 2))


def test_tiny_shapes_and_bytes_are_sglangs():
    p = MambaPool(6, tiny())
    assert p.cache_params.shape.conv == ((24, 3),)  # 8 + 2 * 2 * 4 channels, kernel 4 - 1
    assert p.conv_state_shapes == ((3, 7, 24, 3),) and p.temporal_state_shape == (3, 7, 2, 4, 4)
    assert p.bytes_per_slot == 816  # 3 layers * (72 * 2 + 32 * 4)
    assert (p.conv_state_bytes, p.ssm_state_bytes) == (7 * 3 * 72 * 2, 7 * 3 * 32 * 4)
    assert p.mem_usage == 7 * 816 / 2**30


def test_qwen3_next_state_per_rank():
    spec = load_model("qwen3-next-80b-a3b")
    params = gdn_cache_params(spec.config, 4)
    assert params.shape.conv == ((2048, 3),) and params.shape.temporal == (8, 128, 128)
    assert len(params.layers) == 36 and params.layers[:4] == (0, 1, 2, 4)
    assert params.mamba_cache_per_req == 36 * (2048 * 3 * 2 + 8 * 128 * 128 * 4)
    assert spec.state_bytes(4) == (params.conv_bytes_per_req, params.temporal_bytes_per_req)


def test_groups_are_extended_to_the_head_shards():
    # SGLang's extra_groups_for_head_shards: 1 group over tp 4 becomes 4 groups
    s = Mamba2StateShape.create(tp_world_size=4, intermediate_size=64, n_groups=1, num_heads=8,
                                head_dim=8, state_size=16, conv_kernel=4)
    assert s.conv == (((64 + 2 * 4 * 16) // 4, 3),) and s.temporal == (2, 8, 16)
    with pytest.raises(ConfigError, match="tp=3 is invalid; valid: a divisor of num_heads=8"):
        Mamba2StateShape.create(tp_world_size=3, intermediate_size=66, n_groups=3, num_heads=8,
                                head_dim=8, state_size=16, conv_kernel=4)
    with pytest.raises(ConfigError, match="temporal_dtype='int8'"):
        Mamba2CacheParams(s, (0,), temporal_dtype="int8")


def test_slots_from_the_front_freed_to_the_back_rows_from_the_back():
    p = HybridReqToTokenPool(4, 6, 16, tiny())
    reqs = [R(), R(), R()]
    assert p.alloc(reqs) == [2, 3, 4]
    assert [r.mamba_pool_idx for r in reqs] == [1, 2, 3]
    assert p.get_mamba_indices([2, 3, 4]) == [1, 2, 3]
    p.free_mamba_cache(reqs[1])
    p.free(reqs[1].req_pool_idx)
    assert p.free_slots == [1, 3] and p.mamba_allocator.free_slots == [4, 5, 6, 2]
    # a chunked request keeps its row and slot; a new one takes row 3 and slot 4
    again = [reqs[0], R()]
    assert p.alloc(again) == [2, 3] and again[1].mamba_pool_idx == 4
    assert reqs[0].mamba_pool_idx == 1
    p.check_invariants()


def test_0509_rows_come_from_the_front():
    p = HybridReqToTokenPool.for_release(4, 16, "0.5.9", mamba_size=2, cache_params=tiny())
    reqs = [R(), R()]
    assert p.alloc(reqs) == [0, 1] and [r.mamba_pool_idx for r in reqs] == [1, 2]


def test_out_of_rows_is_none_and_out_of_slots_is_sglangs_error():
    p = HybridReqToTokenPool(2, 3, 16, tiny())
    assert p.alloc([R(), R(), R()]) is None
    assert p.available_size() == 2 and p.mamba_allocator.available_size() == 3
    p = HybridReqToTokenPool(3, 2, 16, tiny())
    with pytest.raises(OutOfMemoryError, match=r"Not enough space for mamba cache.*needed 3"):
        p.alloc([R(), R(), R()])
    assert p.available_size() == 3 and p.mamba_allocator.available_size() == 2  # untouched
    kept = R()
    p.alloc([kept])
    p.free(kept.req_pool_idx)
    kept.req_pool_idx = -1  # row freed, slot kept: a new row, the same slot
    assert p.alloc([kept, R()]) == [2, 3] and kept.mamba_pool_idx == 1


def test_misuse_is_named():
    p = HybridReqToTokenPool(2, 2, 16, tiny())
    with pytest.raises(AllocatorError, match="double free"):
        p.free_mamba_cache(R(req_pool_idx=1))
    with pytest.raises(AllocatorError, match="row 1 is not allocated"):
        p.alloc([R(req_pool_idx=1)])
    with pytest.raises(AllocatorError, match="state slot 2 is not allocated"):
        p.alloc([R(mamba_pool_idx=2)])
    a = MambaSlotAllocator(3)
    for bad in ([0], [4], [1]):
        with pytest.raises(AllocatorError, match="cannot free state slot"):
            a.free(bad)
    a.alloc(2)
    with pytest.raises(AllocatorError, match="already free"):
        a.free([1, 1])
    assert a.free_slots == [3]
    with pytest.raises(ConfigError, match="need_size=-1"):
        a.alloc(-1)
    with pytest.raises(ConfigError, match="size=0"):
        MambaSlotAllocator(0)
    with pytest.raises(ConfigError, match="cache_params=None"):
        HybridReqToTokenPool.for_release(2, 16, "0.5.23")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("afrk"), st.integers(0, 5)), max_size=40))
def test_every_slot_is_held_by_one_request_or_free(ops):
    p = HybridReqToTokenPool(5, 4, 8, tiny())
    held: list[R] = []
    for op, n in ops:
        if op == "a":
            batch = [R() for _ in range(n % 3 + 1)]
            if len(batch) > p.available_size():  # rows are checked first, as in SGLang
                assert p.alloc(batch) is None
            elif p.mamba_slots_needed(batch) > p.mamba_allocator.available_size():
                with pytest.raises(OutOfMemoryError):
                    p.alloc(batch)
            else:
                assert p.alloc(batch) is not None
                held += batch
        elif held and op in "fr":  # finish or retract: both give back the row and the slot
            r = held.pop(n % len(held))
            p.free_mamba_cache(r)
            p.free(r.req_pool_idx)
        elif held:  # a chunk continuation keeps both
            r = held[n % len(held)]
            before = (r.req_pool_idx, r.mamba_pool_idx)
            assert p.alloc([r]) == [before[0]] and r.mamba_pool_idx == before[1]
        p.check_invariants()
        assert p.mamba_allocator.available_size() == 4 - len(held)
        assert sorted(r.mamba_pool_idx for r in held) == sorted(
            set(range(1, 5)) - set(p.mamba_allocator.free_slots))
        assert p.get_mamba_indices([r.req_pool_idx for r in held]) == [
            r.mamba_pool_idx for r in held]


def test_a_pass_takes_slots_ahead_and_puts_the_unused_back_at_the_end():
    """SGLang 0.5.23 ``MambaSlotAllocator.alloc_group_begin`` / ``alloc_group_end``: the first
    ``num_reqs`` free slots are taken; ``alloc(1)`` hands them out first; the rest go to the
    back of the free list, in order."""
    a = MambaSlotAllocator(6)
    a.free(a.alloc(2) or [])  # free: [3, 4, 5, 6, 1, 2]
    a.alloc_group_begin(3)
    assert a.free_slots == [6, 1, 2] and a.taken_ahead == 3 and a.available_size() == 3
    assert a.alloc(1) == [3] and a.taken_ahead == 2
    assert a.alloc(2) == [6, 1]  # more than one: from the free list
    a.alloc_group_end()
    assert a.free_slots == [2, 4, 5] and a.taken_ahead == 0
    a.check_invariants()


def test_a_pass_with_more_waiting_than_free_slots_takes_none():
    a = MambaSlotAllocator(3)
    a.alloc(1)
    a.alloc_group_begin(3)  # two free: nothing taken, the list stays as it is
    assert a.free_slots == [2, 3] and a.taken_ahead == 0
    a.alloc_group_end()
    a.alloc_group_begin(0)
    assert a.free_slots == [2, 3]
    a.alloc_group_end()
    assert a.free_slots == [2, 3]


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_alloc_group_begin_refuses_a_bad_count(bad: object):
    with pytest.raises(ConfigError, match="num_reqs"):
        MambaSlotAllocator(2).alloc_group_begin(bad)  # type: ignore[arg-type]
