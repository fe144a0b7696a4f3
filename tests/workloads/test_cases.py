"""The book's running case: one definition, the same numbers wherever a chapter uses it."""

import numpy as np
import pytest

from pagedkv.errors import ConfigError
from pagedkv.lessons.examples import long_answers_workload
from pagedkv.workloads.cases import LONG_ANSWERS


def test_case_pool_at_the_books_fraction():
    # (0.80 * 24,564 MiB - Qwen3-4B's weights) / 147,456 B per token, rounded down to the page
    assert LONG_ANSWERS.plan().max_total_num_tokens == 85_183
    assert LONG_ANSWERS.plan(page_size=16).max_total_num_tokens == 85_168
    assert LONG_ANSWERS.plan().cell_size == 147_456
    assert (LONG_ANSWERS.sglang_default(), LONG_ANSWERS.sglang_default("0.5.9")) == (0.704, 0.847)


def test_case_workload_is_seeded_and_shaped_as_described():
    a = LONG_ANSWERS.workload(2.0, seed=0)
    assert a == LONG_ANSWERS.workload(2.0, seed=0) == long_answers_workload(2.0, 0)
    assert len(a) == 120 and all(r.max_new_tokens == r.output_len for r in a)
    outputs = np.array([r.output_len for r in a])
    assert outputs.max() <= 10_540 and 1_800 < np.median(outputs) < 2_900
    assert all(r.arrival_s == 0 for r in LONG_ANSWERS.workload(None, seed=1, n=5))
    with pytest.raises(ConfigError, match="n=0"):
        LONG_ANSWERS.workload(2.0, seed=0, n=0)
