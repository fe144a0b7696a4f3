"""Settings that cannot run: the reason in words, a value that works, no stale run; and the
step the visualizer opens on."""

from __future__ import annotations

from dataclasses import replace

import pytest

import pagedkv_widgets as viz
from pagedkv.workloads.synthetic import RequestSpec
from pagedkv_widgets.catalog import CATALOG, make_runner
from pagedkv_widgets.chapters import chapter_config, resolve_settings
from pagedkv_widgets.encoding import count_events, decode_run, opening_step
from pagedkv_widgets.limits import explained, fix, problem
from pagedkv_widgets.scenes import Workload, default_simulate


@pytest.fixture(scope="module")
def full():
    settings = resolve_settings(CATALOG, "full")
    return make_runner(), settings, chapter_config(CATALOG, "full", settings)


def test_weights_that_do_not_fit_say_so_and_name_a_fraction_that_works(full):
    runner, base, config = full
    s = replace(base, model="llama-3-8b", gpu="rtx-4090", mem_fraction_static=0.5)
    why = problem(runner, "card", s, config)
    assert "Llama-3-8B's weights take 14.96 GiB" in why and "RTX 4090 24GB" in why
    assert "mem_fraction_static 0.50 keeps 11.99 GiB" in why
    hint = fix(runner, "card", s, config)
    assert hint.startswith("Try mem_fraction_static 0.70 or more")
    assert problem(runner, "card", replace(s, mem_fraction_static=0.70), config) is None
    assert problem(runner, "card", replace(s, mem_fraction_static=0.65), config) is None
    assert problem(runner, "card", replace(s, mem_fraction_static=0.60), config) is not None
    assert "H100 SXM 80GB" in hint and "Qwen3-4B" in hint


def test_a_small_teaching_pool_clamps_max_new_tokens_and_runs():
    """SGLang clamps a max_new_tokens the pool cannot hold (it does not refuse the request):
    the 128-token teaching pool (2 pages of 64) runs, and no limit is reported."""
    runner, base = make_runner(), resolve_settings(CATALOG, "paging")
    config = chapter_config(CATALOG, "paging", base)
    s = replace(base, mem_fraction_static=0.5, page_size=64)
    assert problem(runner, "pool", s, config) is None
    run = runner.run("pool", s)
    assert run["meta"]["max_total_num_tokens"] == 128 and count_events(run, "finish") == 24


def test_a_prompt_too_long_for_the_pool_names_the_limit_and_a_fraction(monkeypatch):
    runner, base = make_runner(default_simulate()), resolve_settings(CATALOG, "paging")
    config = chapter_config(CATALOG, "paging", base)
    long = [RequestSpec(200, 10, 10, 0.0)] * 3
    monkeypatch.setattr(Workload, "teaching_requests", lambda self, page_size: long)
    s = replace(base, mem_fraction_static=0.6)  # 240 tokens: prompts up to 233
    assert problem(runner, "pool", s, config) is None and "error" not in runner.run("pool", s)
    s = replace(base, mem_fraction_static=0.55)  # 12 pages of 16: prompts up to 185
    why = problem(runner, "pool", s, config)
    assert "longest prompt has 200 tokens" in why and "max_req_input_len = 186" in why
    assert fix(runner, "pool", s, config) == "Try mem_fraction_static 0.60 or more."
    out = explained(runner.run("pool", s), runner, "pool", s, config)
    assert out == {"error": why, "fix": "Try mem_fraction_static 0.60 or more."}


def test_explained_replaces_the_exception_and_keeps_good_runs(full):
    runner, base, config = full
    s = replace(base, model="llama-3-8b", mem_fraction_static=0.5)
    run = runner.run("card", s)
    assert "error" in run
    out = explained(run, runner, "card", s, config)
    assert set(out) == {"error", "fix"} and "Error" not in out["error"] and out["fix"]
    good = {"t": [0]}
    assert explained(good, runner, "card", base, config) is good


def test_the_live_widget_carries_the_reason_not_the_old_run():
    widget = viz.visualizer("memory", static=False, prefetch=False)
    widget.settings = {**widget.settings, "gpu": "rtx-4090", "mem_fraction_static": 0.5}
    assert "weights take" in widget.scene["card"]["error"]
    assert widget.scene["card"]["fix"].startswith("Try mem_fraction_static 0.65 or more")
    assert widget.scene["pool"] is None  # the chapter's views draw from the card run only


def test_the_visualizer_opens_a_page_of_decode_steps_before_the_first_retraction():
    enc = make_runner().run("card", resolve_settings(CATALOG, "admission"))
    first = enc["ev"]["retract"][0][0]
    assert enc["open"] == opening_step(enc) == first - 16
    dec = decode_run(enc)
    held = dec["meta"]["max_total_num_tokens"] - dec["tokens_free"][enc["open"]]
    assert held >= 0.9 * dec["meta"]["max_total_num_tokens"]  # the pool is busy


def test_a_run_without_retractions_opens_where_the_pool_is_fullest():
    enc = make_runner().run("card", resolve_settings(CATALOG, "memory"))
    dec = decode_run(enc)
    assert not dec["events"].get("retract")
    load = [u + r for u, r in zip(dec["tokens_used"], dec["tokens_reserved"], strict=True)]
    assert load[enc["open"]] == max(load) > 0
