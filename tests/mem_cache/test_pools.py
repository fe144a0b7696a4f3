"""ReqToTokenPool and MHATokenToKVPool: layout, writes, and every error path."""

from __future__ import annotations

import pytest
import torch
from pool_consistency import check_all_freed, check_pool_agreement

from pagedkv.errors import AllocatorError, ConfigError
from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator
from pagedkv.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool


def test_req_to_token_rows_and_free_order_0_5_9() -> None:
    # 0.5.9: `size` rows, taken from the front of the free list, freed rows appended.
    pool = ReqToTokenPool.for_release(4, 8, "0.5.9")
    assert pool.req_to_token.dtype == torch.int32 and pool.req_to_token.shape == (4, 8)
    assert pool.alloc(3) == [0, 1, 2]
    pool.free(0)
    assert pool.free_slots == [3, 0] and pool.available_size() == 2
    assert pool.alloc(1) == [3]  # the never-used row goes first
    assert pool.alloc(3) is None
    pool.write(2, [0, 1, 2], torch.tensor([4, 5, 6]))
    assert pool.req_to_token[2, :4].tolist() == [4, 5, 6, 0]
    pool.check_invariants()


def test_req_to_token_rows_and_free_order_0_5_23() -> None:
    # 0.5.23: size + 1 rows, row 0 pads and is never handed out; rows come from the back of
    # the free list (free_slots[-n:]) and freed rows are appended there: last freed, first used.
    pool = ReqToTokenPool(3, 8)
    assert pool.first_row == 1 and pool.req_to_token.shape == (4, 8)
    assert pool.free_slots == [1, 2, 3] and pool.available_size() == pool.size == 3
    assert pool.alloc(1) == [3]
    assert pool.alloc(2) == [1, 2]
    pool.free(1)
    pool.free(3)
    assert pool.free_slots == [1, 3]
    assert pool.alloc(1) == [3]  # the row freed last is reused first
    pool.check_invariants()
    with pytest.raises(AllocatorError, match=r"cannot free request row 0: outside \[1, 4\)"):
        pool.free(0)
    with pytest.raises(AllocatorError, match=r"cannot write to request row 0: not an allocated"):
        pool.write(0, [0], [4])


def test_req_to_token_unknown_release() -> None:
    with pytest.raises(ConfigError, match=r"sglang_version='0.4' is invalid"):
        ReqToTokenPool.for_release(4, 8, "0.4")


@pytest.mark.parametrize(("call", "message"), [
    (lambda p: p.write(1, [8], [4]), r"cannot write positions up to 8 into a row of "
                                      r"max_context_len=8"),
    (lambda p: p.write(3, [0], [4]), r"cannot write to request row 3: not an allocated row"),
    (lambda p: p.free(3), r"cannot free request row 3: it is already free"),
    (lambda p: p.free(9), r"cannot free request row 9: outside \[0, 4\)"),
    (lambda p: p.free([0, 0]), r"cannot free request row 0: it is already free"),
])
def test_req_to_token_errors(call, message: str) -> None:
    pool = ReqToTokenPool.for_release(4, 8, "0.5.9")
    pool.alloc(3)
    with pytest.raises(AllocatorError, match=message):
        call(pool)


def test_req_to_token_bad_arguments() -> None:
    pool = ReqToTokenPool.for_release(4, 8, "0.5.9")
    pool.alloc(1)
    with pytest.raises(ConfigError, match=r"slots.shape=\(1,\) is invalid; valid: \(2,\)"):
        pool.write(0, [0, 1], [4])
    with pytest.raises(ConfigError, match=r"max_context_len=0 is invalid"):
        ReqToTokenPool(4, 0)
    pool.free_slots.append(1)
    pool.free_slots.append(1)
    with pytest.raises(AllocatorError, match="on the free list twice"):
        pool.check_invariants()


def test_kv_pool_layout_and_scatter_write() -> None:
    kv = MHATokenToKVPool(size=8, page_size=4, dtype=torch.float16, head_num=2, head_dim=3,
                          layer_num=2)
    assert kv.get_key_buffer(1).shape == (12, 2, 3)
    loc = torch.tensor([5, 9])
    k = torch.arange(12, dtype=torch.float32).reshape(2, 2, 3)
    kv.set_kv_buffer(1, loc, k, -k)
    assert kv.get_key_buffer(1).dtype == torch.float16
    assert torch.equal(kv.get_key_buffer(1)[loc].float(), k)
    assert torch.equal(kv.get_value_buffer(1)[9].float(), -k[1])
    assert kv.get_key_buffer(0).abs().sum() == 0
    assert kv.kv_size_bytes() == (2 * 12 * 2 * 3 * 2, 2 * 12 * 2 * 3 * 2)
    # mini-sglang's [2, L, num_pages, page_size, H, D] view is the same bytes per slot
    paged = kv.get_key_buffer(1).view(3, 4, 2, 3)
    assert torch.equal(paged[9 // 4, 9 % 4], kv.get_key_buffer(1)[9])


@pytest.mark.parametrize(("args", "message"), [
    ((2, torch.tensor([1]), (1, 2, 3)), r"layer_id=2 is invalid; valid: an integer in \[0, 2\)"),
    ((0, torch.tensor([12]), (1, 2, 3)), r"loc=\[12\] is invalid; valid: slots in \[0, 12\)"),
    ((0, torch.tensor([1.0]), (1, 2, 3)), r"loc='torch.float32 \(1,\)' is invalid"),
    ((0, torch.tensor([1]), (1, 3, 2)), r"cache_k.shape=\(1, 3, 2\) is invalid"),
])
def test_kv_pool_errors(args, message: str) -> None:
    kv = MHATokenToKVPool(8, 4, torch.float32, 2, 3, 2)
    layer, loc, shape = args
    with pytest.raises(ConfigError, match=message):
        kv.set_kv_buffer(layer, loc, torch.zeros(shape), torch.zeros(shape))


def test_agreement_helper_catches_leaks_and_strays() -> None:
    pool, alloc = ReqToTokenPool(2, 8), PagedTokenToKVPoolAllocator(16, 4)
    (row,) = pool.alloc(1)
    out = alloc.alloc_extend([0], [3], [-1], 3)
    pool.write(row, [0, 1, 2], out)
    check_pool_agreement(pool, alloc, {row: 3})
    with pytest.raises(AllocatorError, match="holds 3 slots but the page table maps 2: a leak"):
        check_pool_agreement(pool, alloc, {row: 2})
    with pytest.raises(AllocatorError, match="does not hold"):
        check_pool_agreement(pool, alloc, {row: 4})
    with pytest.raises(AllocatorError, match="holds 3 slots but the page table maps 0"):
        check_all_freed(pool, alloc)
    alloc.free(out)
    with pytest.raises(AllocatorError, match="1 request rows are still allocated"):
        check_all_freed(pool, alloc)
    pool.free(row)
    check_all_freed(pool, alloc)


def test_agreement_helper_catches_free_rows_and_shared_slots() -> None:
    pool, alloc = ReqToTokenPool.for_release(3, 8, "0.5.9"), PagedTokenToKVPoolAllocator(16, 4)
    rows = pool.alloc(2)
    out = alloc.alloc_extend([0], [2], [-1], 2)
    for row in rows:
        pool.write(row, [0, 1], out)
    with pytest.raises(AllocatorError, match="a KV slot appears in two page-table entries"):
        check_pool_agreement(pool, alloc, {rows[0]: 2, rows[1]: 2})
    with pytest.raises(AllocatorError, match="request row 2 holds 1 tokens but is on the free"):
        check_pool_agreement(pool, alloc, {2: 1})
    pool.free_slots.append(7)
    with pytest.raises(AllocatorError, match=r"free list holds rows outside \[0, 3\)"):
        pool.check_invariants()
