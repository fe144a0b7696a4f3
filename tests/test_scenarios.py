"""The book's worked states, pinned to the seed's numbers."""

from __future__ import annotations

import pytest

from pagedkv.consistency import check_pool_agreement
from pagedkv.contiguous import Fit
from pagedkv.errors import OutOfMemoryError
from pagedkv.fragmentation import page_size_costs
from pagedkv.scenarios import (
    RESERVED,
    contiguous_story,
    decode_oom_case,
    paged_slot_labels,
    seed_page_table,
)
from pagedkv.workload import fixed


def test_contiguous_story_ends_in_the_seed_picture() -> None:
    mem, frames = contiguous_story()
    assert "".join(lab[:1] or "." for lab in frames[-1][1]) == "AAAA..BBBB..CCCC"
    assert [s for s, n in mem.free_runs() for s in range(s, s + n)] == [4, 5, 10, 11]
    assert mem.fit(4) is Fit.NO_CONTIGUOUS_RUN


def test_seed_page_table() -> None:
    st = seed_page_table()
    table = st.pool.req_to_token
    assert table[1, :4].tolist() == [12, 13, 14, 15] and table[2, :4].tolist() == [4, 5, 6, 7]
    assert table[3].tolist() == [0] * 8 and st.pool.free_slots == [3, 0]
    check_pool_agreement(st.pool, st.alloc, st.lens)
    labels = paged_slot_labels(st.alloc, {"A": table[2, :4].long(), "B": table[1, :4].long()})
    assert labels[:4] == [RESERVED] * 4 and labels[8:12] == [""] * 4
    assert labels[4:8] == ["A0", "A1", "A2", "A3"]


def test_decode_oom_case_numbers() -> None:
    case = decode_oom_case()
    assert case.alloc.available_size() == 2048 and len(case.seq_lens) == 148
    assert int(((case.seq_lens - 1) % 64 == 0).sum()) == case.crossing == 40
    assert case.empty_tail_slots > 148
    with pytest.raises(OutOfMemoryError, match=r"needs 40 new pages \(2560 slots"):
        case.alloc.alloc_decode(case.seq_lens, case.last_loc, strict=True)


def test_page_size_costs_for_six_tokens() -> None:
    (one, four) = page_size_costs(fixed(1, 5, 1), (1, 4))  # 5 + 1 = 6 tokens
    assert (one.held_slots, one.pages, one.wasted_pct) == (6, 6, 0.0)
    assert (four.held_slots, four.pages, four.held_slots - four.tokens) == (8, 2, 2)
    assert four.wasted_pct == 25.0
