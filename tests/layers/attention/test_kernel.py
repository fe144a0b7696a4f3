"""The Triton paged decode kernel against the torch reference (CPU interpreter, small shapes)."""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from pagedkv.errors import ConfigError
from pagedkv.layers.attention import (
    paged_decode_attention,
    paged_decode_attention_by_page,
    paged_decode_attention_ref,
    pages_to_slots,
    slots_to_pages,
    split_ranges,
)
from pagedkv.layers.attention.reference import decode_tolerance
from pagedkv.lessons.kernel import random_decode_case

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: Triton's interpreter

# Max |kernel - reference| allowed: DecodeCase.tolerance (reference.decode_tolerance), a
# worst-case bound that holds on the CPU interpreter and on a GPU alike.

# (page_size, H_q, H_kv, head_dim, dtype, num_kv_splits): each row is two launches.
CASES = [
    (1, 4, 4, 64, torch.float32, None),  # MHA, one slot per page
    (4, 8, 2, 64, torch.float32, 3),  # GQA 4, three splits
    (16, 8, 1, 128, torch.float32, 2),  # GQA 8 (MQA with 8 heads)
    (16, 32, 1, 64, torch.float32, 1),  # group of 32: two 16-head blocks per KV head
    (4, 8, 2, 256, torch.float16, 2),
    (16, 8, 2, 64, torch.bfloat16, 8),
    (4, 6, 2, 80, torch.float32, 2),  # head_dim not a power of 2 (masked)
    (16, 4, 4, 128, torch.float16, None),
]
LENS = [1, 5, 33, 70]  # 1 token; lengths that are not multiples of the page size


@pytest.mark.parametrize(("page_size", "h_q", "h_kv", "head_dim", "dtype", "splits"), CASES)
def test_kernel_matches_reference(
    page_size: int, h_q: int, h_kv: int, head_dim: int, dtype: torch.dtype, splits: int | None
) -> None:
    case = random_decode_case(LENS, num_q_heads=h_q, num_kv_heads=h_kv, head_dim=head_dim,
                              page_size=page_size, dtype=dtype, seed=page_size + h_q,
                              device=DEVICE)
    ref = paged_decode_attention_ref(*case.slot_args())
    by_slot = paged_decode_attention(*case.slot_args(), num_kv_splits=splits)
    by_page = paged_decode_attention_by_page(*case.page_args(), num_kv_splits=splits)
    for out in (by_slot, by_page):
        assert out.dtype == dtype and out.shape == case.q.shape
        assert (out.float() - ref.float()).abs().max().item() <= case.tolerance(ref)
    assert torch.equal(by_slot, by_page)  # same tiles, same order: bit-identical


def test_split_count_does_not_change_the_result() -> None:
    case = random_decode_case([3, 64, 97], num_q_heads=4, num_kv_heads=2, head_dim=64,
                              page_size=16, seed=3, device=DEVICE)
    outs = [paged_decode_attention(*case.slot_args(), num_kv_splits=s) for s in (1, 2, 8)]
    for out in outs[1:]:
        assert (out - outs[0]).abs().max().item() <= 1e-6


@pytest.mark.parametrize(("seq_len", "splits"), [(1, 8), (97, 2), (100, 3), (4096, 8)])
def test_split_ranges_tile_the_sequence(seq_len: int, splits: int) -> None:
    ranges = [r for r in split_ranges(seq_len, splits) if r[0] < r[1]]
    assert ranges[0][0] == 0 and ranges[-1][1] == seq_len
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all(start % 32 == 0 for start, _ in ranges)


def test_every_request_of_length_one_returns_its_value_row() -> None:
    case = random_decode_case([1, 1, 1], num_q_heads=4, num_kv_heads=1, head_dim=64,
                              page_size=4, seed=4, device=DEVICE)
    out = paged_decode_attention(*case.slot_args())
    slots = case.req_to_token[case.req_pool_indices.long(), 0].long()
    expected = case.v_cache[slots].expand(-1, 4, -1)  # softmax over one key is 1
    assert (out - expected).abs().max().item() <= 1e-6


def test_sequence_filling_the_whole_row() -> None:
    case = random_decode_case([48, 20], num_q_heads=4, num_kv_heads=2, head_dim=64,
                              page_size=16, seed=5, device=DEVICE)
    assert case.req_to_token.shape[1] == 48
    ref = paged_decode_attention_ref(*case.slot_args())
    out = paged_decode_attention(*case.slot_args(), num_kv_splits=2)
    assert (out - ref).abs().max().item() <= case.tolerance(ref)


def test_custom_sm_scale() -> None:
    case = random_decode_case([9, 40], num_q_heads=4, num_kv_heads=2, head_dim=64,
                              page_size=1, seed=6, device=DEVICE)
    ref = paged_decode_attention_ref(*case.slot_args(), sm_scale=0.3)
    out = paged_decode_attention(*case.slot_args(), sm_scale=0.3)
    assert (out - ref).abs().max().item() <= case.tolerance(ref)


def test_table_layouts_round_trip() -> None:
    case = random_decode_case([5, 17], num_q_heads=2, num_kv_heads=2, head_dim=8, page_size=4)
    assert torch.equal(slots_to_pages(case.req_to_token, 4), case.page_table)
    assert torch.equal(pages_to_slots(case.page_table, 4), case.req_to_token)


def test_interpreter_is_on_without_cuda() -> None:
    if not torch.cuda.is_available():
        assert os.environ["TRITON_INTERPRET"] == "1"


def test_decode_tolerance_by_hand() -> None:
    # bf16, one token, |v| = |o| = 1: 2^-8 (rounded weights) + 36 * 2^-24 (fp32) + 2^-7 (one
    # unit in the last place of an output in [1, 2)).
    assert decode_tolerance(torch.bfloat16, 1, 1.0, 1.0) == 2**-8 + 36 * 2**-24 + 2**-7
    # fp16, 1024 tokens, |v| = 2, |o| = 0.3: weights 2^-11 + 1024 * 2^-25; ulp of [0.25, 0.5).
    assert decode_tolerance(torch.float16, 1024, 2.0, 0.3) == pytest.approx(
        (2**-11 + 2**-15 + 4128 * 2**-24) * 2 + 2**-12, rel=1e-12)
    assert decode_tolerance(torch.float32, 1, 1.0, 0.0) == 36 * 2**-24
    with pytest.raises(ConfigError, match="dtype"):
        decode_tolerance(torch.int32, 1, 1.0, 1.0)
