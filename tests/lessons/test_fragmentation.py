"""The useful-memory replay: exact on a hand-checkable workload, ordered on a realistic one."""

from __future__ import annotations

import pytest

from pagedkv.errors import ConfigError
from pagedkv.lessons.contiguous import ORCA_MAX_SEQ_LEN
from pagedkv.lessons.fragmentation import (
    CATEGORIES,
    FRAGMENTATION_POOL,
    FRAGMENTATION_REQUESTS,
    compare,
    fragmentation_workload,
    measure,
    scheme_label,
)
from pagedkv.workloads.synthetic import fixed, sharegpt_like


def test_hand_checked_max_reservation() -> None:
    # 3 requests of 4 + 4 tokens on a model of max_seq_len 16: Orca (Max) reserves 16 slots each
    # in a 40-slot pool: two run, the third waits. Steps sampled while it waits: lengths 4, 5,
    # 6, 7 for both runners.
    share = measure(fixed(3, 4, 4, max_new_tokens=12), 40, "max", max_seq_len=16)
    assert share.steps == 4
    assert share.tokens == pytest.approx(2 * (4 + 5 + 6 + 7) / 4 / 40)
    assert share.internal == pytest.approx(2 * 8 / 40)
    assert share.external == pytest.approx(0.0) and share.free == pytest.approx(8 / 40)


def test_external_fragmentation_is_counted() -> None:
    # 16-slot pool, reservations 6 (max_seq_len): two fit (12 slots), 4 free but too few for
    # the third.
    share = measure(fixed(3, 2, 4, max_new_tokens=4), 16, "max", max_seq_len=6)
    assert share.external == pytest.approx(0.0) and share.free == pytest.approx(4 / 16)


def test_hand_checked_pow2_rounds_only_the_output() -> None:
    # 3 requests of 4 prompt + 5 output tokens: Orca (Pow2) reserves 4 + 8 = 12 slots each (not
    # next_pow2(9) = 16), so two fit in 24 slots and the third waits while the two grow from 4
    # to 8 tokens (5 sampled steps; at 9 they finish). Per runner and step: internal 12 - 9 = 3,
    # held ahead 9 - length, i.e. 5, 4, 3, 2, 1.
    share = measure(fixed(3, 4, 5), 24, "pow2")
    assert share.steps == 5
    assert share.tokens == pytest.approx(2 * (4 + 5 + 6 + 7 + 8) / 5 / 24)
    assert share.internal == pytest.approx(2 * 3 / 24)
    assert share.held_ahead == pytest.approx(2 * 3 / 24)
    assert share.external == share.free == pytest.approx(0.0)


def test_hand_checked_oracle_has_no_internal_fragmentation() -> None:
    # Orca (Oracle) reserves 4 + 5 = 9 slots: two fit in 18 slots, nothing is ever held unused.
    share = measure(fixed(3, 4, 5), 18, "oracle")
    assert share.steps == 5 and share.internal == 0.0
    assert share.held_ahead == pytest.approx(2 * (5 + 4 + 3 + 2 + 1) / 5 / 18)


def test_chapter_workload_fits_the_model_maximum() -> None:
    specs = fragmentation_workload()
    assert len(specs) == FRAGMENTATION_REQUESTS
    assert max(s.prompt_len + s.output_len for s in specs) <= ORCA_MAX_SEQ_LEN
    assert [scheme_label(s) for s in ("max", "pow2", "oracle", "page=16")] == [
        "Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "page=16"]


def test_schemes_order_on_a_sharegpt_like_workload() -> None:
    shares = compare(sharegpt_like(60, max_new_tokens=512, max_prompt_len=256, seed=3), 4096,
                     page_sizes=(1, 16, 256))
    for s in shares:
        assert sum(getattr(s, c) for c in CATEGORIES) == pytest.approx(1.0)
    by = {s.scheme: s for s in shares}
    assert by["max"].tokens < by["pow2"].tokens < by["oracle"].tokens < by["page=256"].tokens
    assert by["oracle"].internal == 0.0
    assert by["page=256"].tokens < by["page=16"].tokens <= by["page=1"].tokens
    assert by["page=1"].internal == by["page=1"].held_ahead == 0.0


def test_errors() -> None:
    with pytest.raises(ConfigError, match=r'scheme=\'buddy\' is invalid; valid: "max", "pow2", '
                                          r'"oracle" or "page=P"'):
        measure(fixed(1, 2, 2), 16, "buddy")
    with pytest.raises(ConfigError, match=r"pool_tokens=8 is invalid; valid: >= 12"):
        measure(fixed(1, 2, 2, max_new_tokens=10), 8, "max", max_seq_len=12)
    with pytest.raises(ConfigError, match=r"prompt_len \+ output_len=4 is invalid; valid: at most "
                                          r"max_seq_len=3"):
        measure(fixed(1, 2, 2), 16, "oracle", max_seq_len=3)


def test_chapter_two_order_matches_the_paper() -> None:
    # Chapter 2 says: the more a contiguous server guesses, the less of the pool holds tokens
    # (the order of the vLLM paper's Fig. 2), and small pages keep almost all of it busy.
    by = {s.scheme: s for s in compare(fragmentation_workload(), FRAGMENTATION_POOL)}
    assert by["max"].tokens < by["pow2"].tokens < by["oracle"].tokens < by["page=16"].tokens
    assert by["oracle"].external > 0 and by["max"].internal > by["pow2"].internal > 0
    assert by["page=16"].tokens > 0.95


def test_clipped_means_are_the_chapters_workload_and_the_clip_explains_the_gap() -> None:
    """Chapter 2 prints the workload's means below the fit's; clipped_means says how much is the
    sample and how much the clip: the clipped means are the workload's, and the unclipped draw
    is the same draw (every unclipped length is the clipped one where it fits)."""
    from pagedkv.lessons.fragmentation import FRAGMENTATION_MAX_LEN, clipped_means

    m = clipped_means()
    specs = fragmentation_workload()
    assert m.prompt == pytest.approx(sum(s.prompt_len for s in specs) / len(specs))
    assert m.output == pytest.approx(sum(s.output_len for s in specs) / len(specs))
    assert m.outputs_clipped == sum(s.output_len == FRAGMENTATION_MAX_LEN for s in specs) > 0
    assert m.drawn_output > m.output and m.drawn_prompt >= m.prompt
