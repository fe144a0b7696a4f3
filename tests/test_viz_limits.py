"""Settings that cannot run: the reason in words, a value that works, no stale run; and the
step the visualizer opens on."""

from __future__ import annotations

from dataclasses import replace

import pytest

import pagedkv_widgets as viz
from pagedkv_widgets.catalog import CATALOG, make_runner
from pagedkv_widgets.chapters import chapter_config, resolve_settings
from pagedkv_widgets.encoding import decode_trace, opening_sample
from pagedkv_widgets.limits import explained, fix, problem


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
    assert problem(runner, "card", replace(s, mem_fraction_static=0.65), config) is not None
    assert "H100 SXM 80GB" in hint and "Qwen3-4B" in hint


def test_a_request_larger_than_the_teaching_pool_names_page_size_and_fraction(full):
    runner, base, config = full
    s = replace(base, mem_fraction_static=0.5, page_size=64)
    why = problem(runner, "pool", s, config)
    assert "teaching pool holds 128 tokens (2 pages of 64)" in why
    assert fix(runner, "pool", s, config) == ("Try mem_fraction_static 0.55 or more, or page "
                                              "size 16 or less.")


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
    widget = viz.visualizer("full", static=False, prefetch=False)
    widget.settings = {**widget.settings, "model": "llama-3-8b", "mem_fraction_static": 0.5}
    assert "weights take" in widget.scene["card"]["error"]
    assert widget.scene["card"]["fix"].startswith("Try mem_fraction_static 0.70")
    assert "error" not in widget.scene["pool"]  # the teaching pool still runs


def test_the_visualizer_opens_a_few_samples_before_the_first_retraction():
    runner = make_runner()
    enc = runner.run("pool", resolve_settings(CATALOG, "retraction"))
    first = min(decode_trace(enc)["events"]["retract"])
    assert enc["open"] == opening_sample(enc) and 0 < first - enc["open"] <= 12
    held = decode_trace(enc)["pages_used"]
    assert held[enc["open"]] >= 0.8 * enc["meta"]["num_pages"]  # the pool is busy


def test_a_run_without_retractions_opens_where_the_pool_is_fullest():
    enc = make_runner().run("card", resolve_settings(CATALOG, "memory"))
    dec = decode_trace(enc)
    assert not dec["events"].get("retract")
    load = [u + r for u, r in zip(dec["tokens_used"], dec["tokens_reserved"], strict=True)]
    assert load[enc["open"]] == max(load) > 0
