"""pagedkv_widgets.facts on a hand-made decoded run: the seconds a chapter quotes."""

from __future__ import annotations

import pytest

from pagedkv_widgets.facts import run_facts


def test_run_facts_times_decode_steps_and_requests() -> None:
    """Chapter 7's exercise (c) compares the cards' decode-step and request seconds: the mean
    over decode steps only (prefill and idle steps left out), and each request from its
    admission to its finish."""
    run = {
        "meta": {"max_total_num_tokens": 100, "num_pages": 100, "page_size": 1,
                 "cell_size": 8, "sglang_version": "0.5.23"},
        "step": [0, 1, 2, 3, 4, 5],
        "kind": ["prefill", "decode", "decode", "prefill", "decode", "idle"],
        "time_s": [1.0, 1.5, 2.5, 3.0, 3.5, 9.0],
        "new_token_ratio": [0.7, 0.6, 0.5, 0.4, 0.3, 0.3],
        "num_running": [1, 1, 2, 2, 1, 0],
        "num_waiting": [0, 0, 0, 0, 0, 0],
        "tokens_free": [90, 89, 80, 70, 80, 100],
        "tokens_evictable": [0, 0, 0, 0, 0, 0],
        "events": {"admit": [(0, 0), (3, 1)], "finish": [(2, 0), (4, 1)]},
    }
    f = run_facts(run)
    assert f.decode_step_s == pytest.approx((0.5 + 1.0 + 0.5) / 3)
    assert f.request_s == pytest.approx(((2.5 - 1.0) + (3.5 - 3.0)) / 2)
