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


def test_loop_facts_say_where_each_run_opens() -> None:
    """Chapter 7 compares the two loops at the steps their runs open on, which differ: each
    opens a few steps before its own first retraction, and the text says so."""
    from pagedkv_widgets.facts import loop_facts

    pages = {"loop": "normal", "decoded": [0, 1, 2, 3], "lifetimes": [], "ahead": [],
             "unseen": []}
    run = {"open": 2, "pages": pages, "events": {"retract": [(12, 4), (10, 3)], "finish": [(3, 1)]}}
    f = loop_facts(run)
    assert (f.step, f.first_retraction, f.ahead_slots, f.finishes) == (2, 10, 0, 1)
    assert f.opens_where == "8 steps before its first retraction"
    calm = loop_facts({**run, "events": {}})
    assert calm.first_retraction is None and "peaks" in calm.opens_where
