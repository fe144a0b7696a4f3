"""A sliding-window hybrid in the visualizer: both pools' page records survive the encoding,
the HBM bar holds both pools, chapter 9's facts are the run's, and one pool's runs keep their
old form."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from pagedkv.configs.model_presets import load_model
from pagedkv.entrypoints import simulate
from pagedkv.errors import ConfigError
from pagedkv.gpus import get_gpu
from pagedkv.sizing import plan_pool
from pagedkv.workloads.synthetic import uniform
from pagedkv_widgets.catalog import CATALOG, HYBRID_REQUESTS, SWA_MODEL, make_runner
from pagedkv_widgets.chapter_text import grid_text, menus_text
from pagedkv_widgets.chapters import SWA_VIEWS, chapter_config, grid_settings, resolve_settings
from pagedkv_widgets.encoding import decode_run, encode_run
from pagedkv_widgets.hbm import SEGMENTS, hbm_layout, hbm_segments
from pagedkv_widgets.limits import problem
from pagedkv_widgets.page_decoding import owners_at
from pagedkv_widgets.swa_encoding import decode_swa, encode_swa, swa_owners_at
from pagedkv_widgets.swa_facts import held_per_step, window_facts


def _swa_trace(page: int = 4, overlap: bool = True, radix: bool = True, rate: float = 20.0) -> dict:
    """gpt-oss-20b (window 127) on a 4,096-token full pool: long enough rows that windows slide."""
    specs = uniform(16, (100, 300), (100, 400), 400, rate=rate, seed=0)
    return simulate(specs, model=SWA_MODEL, gpu="h100-sxm-80gb", max_total_tokens=4096,
                    page_size=page, radix_cache=radix, record_pages=True,
                    disable_overlap_schedule=not overlap).trace.to_dict()


def _replayed(log: dict, num_pages: int, steps: int) -> list[np.ndarray]:
    """Every page's owner after each step, replayed from the recorder's own log."""
    owners, out, at = np.full(num_pages + 1, -1, dtype=np.int64), [], 0
    for s in range(steps):
        while at < len(log["step"]) and log["step"][at] == s:
            owners[log["page"][at]] = log["owner"][at]
            at += 1
        out.append(owners.copy())
    return out


@pytest.mark.parametrize(("page", "overlap", "radix"), [(4, True, True), (1, False, True), (16, True, False)])
def test_both_pools_survive_the_encoding_step_by_step(page: int, overlap: bool, radix: bool) -> None:
    trace = _swa_trace(page, overlap, radix)
    meta, pe, n = trace["meta"], trace["page_events"], len(trace["steps"]["step"])
    dec = decode_run(json.loads(json.dumps(encode_run(trace))))
    swa = dec["pages"]["swa"]
    assert sorted(zip(swa["step"], swa["page"], swa["owner"], strict=True)) == sorted(
        zip(pe["swa"]["step"], pe["swa"]["page"], pe["swa"]["owner"], strict=True))
    full_steps = _replayed(pe, meta["num_pages"], n)
    swa_steps = _replayed(pe["swa"], meta["swa_num_pages"], n)
    layout = hbm_layout(meta)
    assert layout["swa_pool"] == meta["swa_max_total_num_tokens"] * meta["swa_cell_size"] > 0
    freed_while_running = 0
    for s in range(n):
        assert np.array_equal(owners_at(dec["pages"], s), full_steps[s])
        owners = swa_owners_at(swa, meta["swa_num_pages"], s)
        assert np.array_equal(owners, swa_steps[s])
        held = int((owners[1:] != -1).sum()) * page * meta["swa_cell_size"]
        steps = trace["steps"]
        seg = hbm_segments(layout, meta["cell_size"], steps["tokens_used"][s],
                           steps["tokens_reserved"][s], steps["tokens_evictable"][s], held)
        assert tuple(seg) == (*SEGMENTS, "kv_swa_used", "kv_swa_free")
        assert sum(seg.values()) == meta["gpu_memory_bytes"] and min(seg.values()) >= 0
        if s:  # a request's SWA pages freed while it still owns full pages: its window slid
            gone = swa_steps[s - 1][(swa_steps[s - 1] >= 0) & (owners == -1)]
            freed_while_running += int(np.isin(gone, full_steps[s][full_steps[s] >= 0]).sum())
    assert freed_while_running > 0  # the windows slid


def test_window_facts_are_the_runs() -> None:
    trace = _swa_trace()
    run = decode_run(encode_run(trace))
    facts = window_facts(run)
    n, meta = len(run["step"]), trace["meta"]
    swa_steps = _replayed(trace["page_events"]["swa"], meta["swa_num_pages"], n)
    full_steps = _replayed(trace["page_events"], meta["num_pages"], n)
    held = [int(((o[1:] >= 0) | (o[1:] == -3)).sum()) for o in swa_steps]
    full = [int(((o[1:] >= 0) | (o[1:] == -3)).sum()) for o in full_steps]
    assert facts.swa_peak == max(held) and facts.full_peak == max(full) == full[facts.peak_step]
    assert facts.swa_at_peak == held[facts.peak_step] < facts.full_peak
    assert facts.window == meta["sliding_window"] == 127 and facts.swa_pages == meta["swa_num_pages"]
    assert 0 < facts.window_frees <= len(trace["page_events"]["swa"]["step"])
    assert np.array_equal(held_per_step(trace["page_events"]["swa"], n)[0], held)
    running = run["num_running"][facts.peak_step]
    assert facts.running_at_peak == running > 0
    assert facts.tokens_per_running(facts.full_peak) == round(facts.full_peak * 4 / running)


def test_window_facts_refuse_a_run_of_one_pool() -> None:
    specs = uniform(4, (8, 20), (10, 20), 20, rate=None, seed=0)
    trace = simulate(specs, max_total_tokens=400, page_size=4, record_pages=True).trace.to_dict()
    assert "swa" not in trace["page_events"] and "swa_num_pages" not in trace["meta"]
    enc = encode_run(trace)
    assert "swa" not in enc["pages"] and "swa_pool" not in enc["hbm"]
    with pytest.raises(ConfigError, match="run="):
        window_facts(decode_run(enc))


def test_swa_encoding_round_trips_any_order() -> None:
    log = {"step": [0, 0, 0, 3, 3, 7], "page": [9, 2, 5, 2, 4, 9], "owner": [1, 0, 1, -1, 0, -2]}
    enc = encode_swa(log)
    assert enc == {"step": [0, 0, 0, 3, 0, 4], "page": [2, 5, 9, 2, 4, 9], "owner": [0, 1, 1, -1, 0, -2]}
    back = decode_swa(enc)
    assert sorted(zip(*back.values(), strict=True)) == sorted(zip(*log.values(), strict=True))
    assert swa_owners_at(back, 10, 3).tolist() == [-1, -1, -1, -1, 0, 1, -1, -1, -1, 1, -1]


def test_chapter_9_opens_on_gpt_oss_on_an_h100_with_both_pool_maps() -> None:
    settings = resolve_settings(CATALOG, "windows")
    config = chapter_config(CATALOG, "windows", settings)
    assert (settings.model, settings.gpu) == (SWA_MODEL, "h100-sxm-80gb")
    assert config["views"] == list(SWA_VIEWS)
    assert config["controls"] == ["model", "gpu", "workload", "mem_fraction_static", "page_size", "loop"]
    assert SWA_MODEL not in CATALOG.models  # no dense chapter's menu offers it
    # the calm rate's run, decoded step by step, is too long for the book's build
    assert [k for k, _ in config["axes"]["workload"]] == ["busy-hybrid", "burst-hybrid"]
    plan, _ = make_runner(lambda *a, **k: None).card_setup(settings)
    assert plan.is_swa and plan.swa_max_total_num_tokens
    # SGLang 0.5.23's default fraction for the card, with a step down and up beside it
    assert settings.mem_fraction_static == plan_pool(load_model(SWA_MODEL),
                                                     gpu=get_gpu("h100-sxm-80gb")).mem_fraction_static
    assert config["axes"]["mem_fraction_static"] == [0.73, 0.78, 0.83, 0.88]
    # a chapter whose model menu does not offer the model refuses it
    with pytest.raises(ConfigError, match="model"):
        chapter_config(CATALOG, "full", settings)


def test_the_windows_menus_offer_the_sliding_window_hybrids_that_fit() -> None:
    """Every model the menu offers is a hybrid SGLang 0.5.23 gives a SWA pool, on every GPU it
    offers at one of its fractions at least; every setting either sizes both pools or is one
    the view explains (the weights leave no pool) without simulating."""
    settings = resolve_settings(CATALOG, "windows")
    config = chapter_config(CATALOG, "windows", settings)
    runner = make_runner(lambda *a, **k: None)
    explained = set()
    for model in [m for m, _ in config["axes"]["model"]]:
        assert load_model(model).family == "swa"
        for gpu in [g for g, _ in config["axes"]["gpu"]]:
            fits = []
            for f in config["axes"]["mem_fraction_static"]:
                for page in config["axes"]["page_size"]:
                    s = replace(settings, model=model, gpu=gpu, mem_fraction_static=f, page_size=page)
                    why = problem(runner, "card", s, config)
                    if why is None:
                        plan, _ = runner.card_setup(s)
                        assert plan.is_swa and plan.page_size == page and plan.swa_max_total_num_tokens
                        fits.append(s)
                    else:
                        assert "weights take" in why
                        explained.add((model, gpu, f))
            assert fits, (model, gpu)
    # gpt-oss-120b's weights leave no pool in 0.73 of an H100: the view says so
    assert explained == {("gpt-oss-120b", "h100-sxm-80gb", 0.73)}
    assert {(s.model, s.gpu) for s in grid_settings(config)} == {
        (m, g) for m in ("gpt-oss-20b", "gpt-oss-120b") for g in ("h100-sxm-80gb", "h200-141gb")}
    # five planes through the opening setting: model x GPU, workload, fraction, page size, loop
    assert len(grid_settings(config)) == 4 + 1 + 3 + 2 + 1


def test_the_hybrid_workloads_are_the_first_requests_of_the_running_case() -> None:
    for short, whole in (("busy-hybrid", "busy"), ("burst-hybrid", "burst")):
        cut, full = CATALOG.workloads[short], CATALOG.workloads[whole]
        assert cut.rate == full.rate
        assert cut.card_requests() == full.card_requests()[:HYBRID_REQUESTS]
    with pytest.raises(ConfigError, match="requests=0"):
        replace(CATALOG.workloads["busy"], requests=0)


def test_the_chapter_says_what_its_menus_offer() -> None:
    """Chapter 9's text lists each control's values from the config, as the menus show them."""
    config = chapter_config(CATALOG, "windows", resolve_settings(CATALOG, "windows"))
    text = menus_text("windows")
    assert text.startswith("The menus offer the models gpt-oss-20b and gpt-oss-120b; the GPUs ")
    for _, label in config["axes"]["gpu"]:
        assert label in text
    assert "busy (2 requests/s, 40 requests) and burst (40 requests at once)" in text
    assert ("`mem_fraction_static` 0.73, 0.78, 0.83 and 0.88; pages of 16, 64 and 128 tokens; the "
            "loops overlap (SGLang's default) and normal (--disable-overlap-schedule).") in text
    assert "the model Qwen3-Next-80B-A3B, tp 4;" in menus_text("states")
    assert "0.85, 0.897 and 0.95" in menus_text("states")
    with pytest.raises(ConfigError, match="chapter='nope'"):
        menus_text("nope")
    # and which settings its page holds: a plane of one control is its every value
    held = len(grid_settings(config))
    assert grid_text("windows").startswith(
        "The book's page holds every combination of model and GPU; every workload; every "
        f"`mem_fraction_static`; every page size; and every scheduler loop, with the other controls at the "
        f"defaults: {held} runs.")
