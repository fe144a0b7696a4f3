"""The useful-memory replay: exact on a hand-checkable workload, ordered on a realistic one."""

from __future__ import annotations

import pytest

from pagedkv.errors import ConfigError
from pagedkv.lessons.fragmentation import CATEGORIES, compare, measure
from pagedkv.workloads.synthetic import fixed, sharegpt_like


def test_hand_checked_max_reservation() -> None:
    # 3 requests of 4 + 4 tokens reserving 4 + 12 = 16 slots each in a 40-slot pool: two run,
    # the third waits. Steps sampled while it waits: lengths 4, 5, 6, 7 for both runners.
    share = measure(fixed(3, 4, 4, max_new_tokens=12), 40, "max")
    assert share.steps == 4
    assert share.tokens == pytest.approx(2 * (4 + 5 + 6 + 7) / 4 / 40)
    assert share.internal == pytest.approx(2 * 8 / 40)
    assert share.external == pytest.approx(0.0) and share.free == pytest.approx(8 / 40)


def test_external_fragmentation_is_counted() -> None:
    # 16-slot pool, reservations 6: two fit (12 slots), 4 free but too short for the third.
    share = measure(fixed(3, 2, 4, max_new_tokens=4), 16, "max")
    assert share.external == pytest.approx(0.0) and share.free == pytest.approx(4 / 16)


def test_schemes_order_on_a_sharegpt_like_workload() -> None:
    shares = compare(sharegpt_like(60, max_new_tokens=512, max_prompt_len=256, seed=3), 4096,
                     page_sizes=(1, 16, 256))
    for s in shares:
        assert sum(getattr(s, c) for c in CATEGORIES) == pytest.approx(1.0)
    by = {s.scheme: s for s in shares}
    assert max(by["max"].tokens, by["pow2"].tokens) < by["page=256"].tokens
    assert by["page=256"].tokens < by["page=16"].tokens <= by["page=1"].tokens
    assert by["page=1"].internal == by["page=1"].reserved == 0.0


def test_errors() -> None:
    with pytest.raises(ConfigError, match=r'scheme=\'buddy\' is invalid; valid: "max"'):
        measure(fixed(1, 2, 2), 16, "buddy")
    with pytest.raises(ConfigError, match=r"pool_tokens=8 is invalid; valid: >= 12"):
        measure(fixed(1, 2, 2, max_new_tokens=10), 8, "max")
