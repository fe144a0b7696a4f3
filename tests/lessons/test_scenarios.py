"""The book's worked states, pinned to hand-checked numbers."""

from __future__ import annotations

import pytest
from pool_consistency import check_pool_agreement

from pagedkv.errors import ConfigError, OutOfMemoryError
from pagedkv.lessons.contiguous import Fit
from pagedkv.lessons.decode_oom import decode_check, decode_oom_case
from pagedkv.lessons.fragmentation import page_size_costs
from pagedkv.lessons.scenarios import (
    RESERVED,
    contiguous_story,
    decode_walk,
    div_ceil,
    free_slot_ids,
    layout_check,
    page_reuse_story,
    page_size_frames,
    page_table_example,
    page_table_lookups,
    paged_slot_labels,
)
from pagedkv.workloads.synthetic import fixed


def test_contiguous_story_ends_in_the_fragmented_picture() -> None:
    mem, frames = contiguous_story()
    assert "".join(lab[:1] or "." for lab in frames[-1][1]) == "AAAA..BBBB..CCCC"
    assert [s for s, n in mem.free_runs() for s in range(s, s + n)] == [4, 5, 10, 11]
    assert mem.fit(4) is Fit.NO_CONTIGUOUS_RUN


def test_page_table_example_0_5_9() -> None:
    # A, x, B take rows 0, 1, 2 from the front of [0, 1, 2, 3] and pages 1, 2, 3: the same order
    st = page_table_example("0.5.9")
    table = st.pool.req_to_token
    assert st.rows == {"A": 0, "x": 1, "B": 2} and st.batch == ("A", "x", "B")
    assert table[0, :4].tolist() == [4, 5, 6, 7] and table[2, :4].tolist() == [12, 13, 14, 15]
    assert table[1, :4].tolist() == [8, 9, 10, 11]  # x's stale slots stay in its free row
    assert table[3].tolist() == [0] * 8 and st.pool.free_slots == [3, 1] and st.next_row == 3
    assert sorted(st.free_rows) == [1, 3] and "never used" in st.free_rows[3]
    assert st.alloc.free_pages.tolist() == [2]  # x's page
    check_pool_agreement(st.pool, st.alloc, st.lens)
    labels = paged_slot_labels(st.alloc, {"A": table[0, :4].long(), "B": table[2, :4].long()})
    assert labels[:4] == [RESERVED] * 4 and labels[8:12] == [""] * 4
    assert labels[4:8] == ["A0", "A1", "A2", "A3"]


def test_page_table_example_0_5_23() -> None:
    # Row 0 pads; A, x, B get rows 1, 2, 3 (free_slots[-3:] of [1, 2, 3]); x's row is reused next.
    st = page_table_example()
    table = st.pool.req_to_token
    assert st.rows == {"A": 1, "x": 2, "B": 3} and table.shape == (4, 8)
    assert table[0].tolist() == [0] * 8 and table[2, :4].tolist() == [8, 9, 10, 11]
    assert st.pool.free_slots == [2] and st.next_row == 2
    assert sorted(st.free_rows) == [0, 2] and st.free_rows[0].startswith("padding row")
    assert st.free_rows[2].endswith("the next request takes it")
    check_pool_agreement(st.pool, st.alloc, st.lens)


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_a_prefill_batch_takes_rows_and_pages_in_one_request_order(version: str) -> None:
    """SGLang's alloc_for_extend takes a batch's rows in one call (alloc_req_slots) and its
    pages in the same request order: the batch's rows and its pages rise together (the book
    once gave x the first row but the second page)."""
    st = page_table_example(version)
    rows = [st.rows[name] for name in st.batch]
    pages = [st.first_page(name) for name in st.batch]
    assert rows == sorted(rows) and pages == sorted(pages) == [1, 2, 3]
    assert st.first_page("x") == 2 and st.alloc.free_pages.tolist() == [st.first_page("x")]


def test_decode_oom_case_numbers() -> None:
    case = decode_oom_case()
    assert case.alloc.available_size() == 2048 and len(case.seq_lens) == 148
    assert int(((case.seq_lens - 1) % 64 == 0).sum()) == case.crossing == 40
    assert case.empty_tail_slots > 148
    assert (case.generated >= 1).all() and (case.generated <= case.seq_lens.numpy() - 1).all()
    with pytest.raises(OutOfMemoryError, match=r"needs 40 new pages \(2560 slots"):
        case.alloc.alloc_decode(case.seq_lens, case.last_loc, strict=True)


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_decode_check_counts_pages_and_retracts(version: str) -> None:
    # Before PR #4913: 148 slots (one per request) <= 2,048 free, so the check passed and the
    # allocation crashed. Since: 40 requests at a page boundary x 64 = 2,560 > 2,048, so
    # retract_decode takes requests out until the rest fits.
    case = decode_oom_case()
    check = decode_check(case, version)
    assert (check.one_per_request, check.need, check.free) == (148, 2560, 2048)
    assert check.retracted >= 1 and check.need_after <= check.free_after
    assert check.free_after > check.free
    assert case.alloc.available_size() == 2048  # the case itself is untouched


def test_page_size_costs_for_six_tokens() -> None:
    (one, four) = page_size_costs(fixed(1, 5, 1), (1, 4))  # 5 + 1 = 6 tokens
    assert (one.held_slots, one.pages, one.wasted_pct) == (6, 6, 0.0)
    assert (four.held_slots, four.pages, four.held_slots - four.tokens) == (8, 2, 2)
    assert four.wasted_pct == 25.0


def test_free_slot_ids_and_div_ceil() -> None:
    mem, _ = contiguous_story()
    assert free_slot_ids(mem) == [4, 5, 10, 11]
    assert [div_ceil(a, 4) for a in (0, 1, 4, 5, 6, 11)] == [0, 1, 1, 2, 2, 3]
    with pytest.raises(ConfigError):
        div_ceil(3, 0)


def test_page_table_lookups() -> None:
    got = page_table_lookups(page_table_example("0.5.9"), positions=2)
    assert [(x.row, x.pos, x.name, x.word, x.slot) for x in got] == [
        (2, 0, "request B", "A", 12), (2, 1, "request B", "dog", 13),
        (0, 0, "request A", "The", 4), (0, 1, "request A", "cat", 5)]


def test_layout_check() -> None:
    lay = layout_check(slot=13, size=12, page_size=4)
    assert lay.sglang_k_shape == (16, 2, 8) and lay.mini_shape == (2, 3, 4, 4, 2, 8)
    assert lay.same
    # 3 layers x 16 rows (12 slots + page 0) x 2 heads x 8 x 2 bytes (fp16)
    assert lay.k_bytes == lay.v_bytes == 3 * 16 * 2 * 8 * 2


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_page_reuse_story(version: str) -> None:
    st = page_table_example(version)
    story = page_reuse_story(st)
    assert story.free_pages[:3] == [1, 3, 2]  # A's and B's pages go to the front
    assert story.d.tolist() == [4, 5, 6, 7, 12, 13, 14, 15]
    assert story.e.tolist() == [4, 5, 6, 7, 12, 13]
    assert [c for c, _ in story.frames][-1] == "E: 6 tokens in 2 pages"
    assert story.frames[-1][1][14:16] == ["E·", "E·"]
    st.alloc.check_invariants()


def test_decode_walk() -> None:
    from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator

    alloc = PagedTokenToKVPoolAllocator(64, 4)
    first = alloc.alloc_extend([0], [6], [-1], 6)  # slots 4-7, 8, 9
    walk = decode_walk(alloc, kv_len=6, last_loc=int(first[-1]), steps=3)
    assert walk == [(6, 10, "last_loc + 1"), (7, 11, "last_loc + 1"), (8, 12, "new page")]


def test_page_size_frames() -> None:
    frames = page_size_frames([6, 3, 9, 5], [1, 2, 4, 8])
    # slots held minus the 23 tokens: p = 2: 6+4+10+6; p = 4: 8+4+12+8; p = 8: 8+8+16+8
    assert [c for c, _ in frames] == ["p = 1: 0 empty slots", "p = 2: 3 empty slots",
                                      "p = 4: 9 empty slots", "p = 8: 17 empty slots"]
