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


def test_the_static_grid_holds_every_setting_that_cannot_run_and_fixes_name_held_ones(full):
    """Chapter 7's page precomputes four planes of its controls; a setting that cannot run
    costs no simulation, so the page holds every one of them (Llama-3-8B on half an RTX
    4090 is off the planes), and their fixes name only settings the page holds."""
    from pagedkv_widgets.chapters import every_setting, grid_settings
    from pagedkv_widgets.scenes import scene_keys
    from pagedkv_widgets.static_page import build_grid

    runner, base, config = full
    calls = []

    class Counting:
        def __call__(self, *args, **kwargs):
            calls.append(kwargs)
            return runner.simulate(*args, **kwargs)

    counting = replace(runner, simulate=Counting(), memo=dict(runner.memo))
    grid = build_grid(config, counting, workers=1)["card"]
    held = set(grid_settings(config))
    bad = [s for s in every_setting(config) if problem(runner, "card", s, config)]
    # Llama-3-8B on the RTX 4090 below 0.70: 2 fractions x 3 workloads x 3 page sizes, in
    # each loop (the loop does not change the pool)
    assert len(bad) == 18 * 2 and not set(bad) & held
    assert {s.loop for s in bad} == {"overlap", "normal"}
    assert len(calls) <= len(held)  # nothing simulated for the settings that cannot run
    s = replace(base, model="llama-3-8b", mem_fraction_static=0.5)
    entry = grid[scene_keys(s)["card"]]
    assert "weights take 14.96 GiB" in entry["error"]
    # 0.70 would run, but the page does not hold Llama-3-8B at 0.70; it holds it at 0.80
    assert entry["fix"] == "Try mem_fraction_static 0.80 or more, or Qwen3-4B."
    # at page size 64 no one move lands on a held setting: the fixes of the live widget
    s = replace(s, page_size=64)
    assert grid[scene_keys(s)["card"]]["fix"] == fix(runner, "card", s, config)
    assert fix(runner, "card", s, config).startswith("Try mem_fraction_static 0.70 or more")
    assert set(grid) == {scene_keys(x)["card"] for x in [*held, *bad]}
