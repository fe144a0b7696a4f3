"""A sliding-window hybrid in the visualizer: both pools' page records survive the encoding,
the HBM bar holds both pools, chapter 9's facts are the run's, and one pool's runs keep their
old form."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pagedkv.entrypoints import simulate
from pagedkv.errors import ConfigError
from pagedkv.workloads.synthetic import uniform
from pagedkv_widgets.catalog import CATALOG, SWA_MODEL, make_runner
from pagedkv_widgets.chapters import SWA_VIEWS, chapter_config, resolve_settings
from pagedkv_widgets.encoding import decode_run, encode_run
from pagedkv_widgets.hbm import SEGMENTS, hbm_layout, hbm_segments
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
    assert config["views"] == list(SWA_VIEWS) and config["axes"]["model"] == [[SWA_MODEL, "gpt-oss-20b"]]
    assert SWA_MODEL not in CATALOG.models  # no other chapter's menu offers it
    # the calm rate's run, decoded step by step, is too long for the book's build
    assert [k for k, _ in config["axes"]["workload"]] == ["busy", "burst"]
    plan, _ = make_runner(lambda *a, **k: None).card_setup(settings)
    assert plan.is_swa and plan.swa_max_total_num_tokens
    # a chapter whose model menu is shown does not take a fixed model
    with pytest.raises(ConfigError, match="model"):
        chapter_config(CATALOG, "full", settings)
