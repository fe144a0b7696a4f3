"""A linear-attention hybrid in the visualizer: its state slots survive the encoding, the HBM
bar holds the KV pool and the state pool and sums to the card at every step, chapter 9's
facts are the run's, and the chapter opens on Qwen3-Next at tp 4."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from pagedkv.configs.model_presets import MODEL_PRESETS, load_model
from pagedkv.entrypoints import simulate
from pagedkv.errors import ConfigError
from pagedkv.gpus import get_gpu
from pagedkv.hybrid_pools import MAMBA_TRACK_INTERVAL
from pagedkv.sizing import plan_pool
from pagedkv.workloads.synthetic import uniform
from pagedkv_widgets.catalog import CATALOG, STATE_MODEL, STATE_TP, make_runner
from pagedkv_widgets.chapters import STATE_VIEWS, chapter_config, grid_settings, resolve_settings
from pagedkv_widgets.encoding import decode_run, encode_run
from pagedkv_widgets.hbm import SEGMENTS, hbm_layout, hbm_segments
from pagedkv_widgets.limits import problem
from pagedkv_widgets.state_slots import per_step, slots_at, state_facts


def _trace(overlap: bool = True, radix: bool = True) -> dict:
    specs = uniform(20, (200, 900), (50, 300), 300, rate=30.0, seed=1)
    return simulate(specs, model=STATE_MODEL, gpu="h200-141gb", tp=STATE_TP,
                    max_total_tokens=32_768, radix_cache=radix, record_pages=True,
                    disable_overlap_schedule=not overlap).trace.to_dict()


@pytest.mark.parametrize(("overlap", "radix"), [(True, True), (False, True), (True, False)])
def test_state_slots_survive_the_encoding_and_the_bar_sums(overlap: bool, radix: bool) -> None:
    trace = _trace(overlap, radix)
    meta, steps, n = trace["meta"], trace["steps"], len(trace["steps"]["step"])
    log = trace["page_events"]["state_slots"]
    dec = decode_run(json.loads(json.dumps(encode_run(trace))))
    assert dec["pages"]["state_slots"] == log
    layout = hbm_layout(meta)
    assert layout["state_pool"] == meta["mamba_slots"] * meta["state_bytes"] > 0
    every = per_step(log, n)
    at = 0
    for s in range(n):  # the series replayed by hand: the last change at or before s
        while at + 1 < len(log["step"]) and log["step"][at + 1] <= s:
            at += 1
        want = ({k: log[k][at] for k in ("live", "track", "tree", "free")} if log["step"][0] <= s
                else {"live": 0, "track": 0, "tree": 0, "free": log["slots"]})
        assert slots_at(log, s) == want == {k: int(v[s]) for k, v in every.items()}
        seg = hbm_segments(layout, meta["cell_size"], steps["tokens_used"][s],
                           steps["tokens_reserved"][s], steps["tokens_evictable"][s],
                           state_slots=want)
        assert tuple(seg) == (*SEGMENTS, "state_live", "state_track", "state_tree", "state_free")
        assert sum(seg.values()) == meta["gpu_memory_bytes"] and min(seg.values()) >= 0
        assert seg["state_live"] == want["live"] * meta["state_bytes"]


def test_state_facts_are_the_runs() -> None:
    trace = _trace()
    run = decode_run(encode_run(trace))
    facts = state_facts(run)
    live = np.asarray(per_step(trace["page_events"]["state_slots"], len(run["step"]))["live"])
    assert facts.live_peak == live.max() > 1 and live[facts.live_peak_step] == facts.live_peak
    assert facts.track_at_peak == 2 * facts.live_peak  # the overlap loop's ping-pong pair
    assert facts.tree_end == trace["page_events"]["state_slots"]["tree"][-1] > 0
    assert facts.num_state_slots == trace["meta"]["mamba_slots"]
    with pytest.raises(ConfigError, match="linear-attention hybrid"):
        state_facts(decode_run(encode_run(simulate(uniform(4, (20, 40), (5, 10), 10),
                                                   record_pages=True).trace.to_dict())))


def test_the_chapter_opens_on_qwen3_next_at_tp_4() -> None:
    here = resolve_settings(CATALOG, "states")
    config = chapter_config(CATALOG, "states", here)
    assert (here.model, here.gpu, CATALOG.tp[here.model]) == ("qwen3-next-80b-a3b", "h200-141gb", 4)
    assert config["views"] == list(STATE_VIEWS) or tuple(config["views"]) == STATE_VIEWS
    # the one linear-attention hybrid among the presets, its tensor-parallel size in the label
    assert config["axes"]["model"] == [[here.model, "Qwen3-Next-80B-A3B, tp 4"]]
    assert [m for m in MODEL_PRESETS if load_model(m).family == "linear"] == [here.model]
    # SGLang 0.5.23's default fraction for an H200 at tp 4, as the pool plan takes it, with a
    # step down and up beside it
    plan = plan_pool(load_model(here.model), gpu=get_gpu(here.gpu), tp=4)
    assert here.mem_fraction_static == plan.mem_fraction_static == 0.897
    assert config["axes"]["mem_fraction_static"] == [0.85, 0.897, 0.95]


def test_the_states_menus_run_on_both_cards_at_pages_sglang_accepts() -> None:
    """Every GPU, fraction and page size the menus offer sizes a KV pool and a state pool at
    tp 4; the page sizes are those SGLang 0.5.23's extra_buffer strategy accepts (divisors of
    mamba_track_interval), and one it refuses is refused by pagedkv too."""
    here = resolve_settings(CATALOG, "states")
    config = chapter_config(CATALOG, "states", here)
    runner = make_runner(lambda *a, **k: None)
    assert [g for g, _ in config["axes"]["gpu"]] == ["h100-sxm-80gb", "h200-141gb"]
    assert config["axes"]["page_size"] == [16, 64, 256]
    for gpu, _ in config["axes"]["gpu"]:
        for f in config["axes"]["mem_fraction_static"]:
            for page in config["axes"]["page_size"]:
                s = replace(here, gpu=gpu, mem_fraction_static=f, page_size=page)
                assert problem(runner, "card", s, config) is None
                plan, _ = runner.card_setup(s)
                assert plan.tp == 4 and plan.page_size == page and plan.mamba_slots > 0
                assert MAMBA_TRACK_INTERVAL % page == 0
    with pytest.raises(ConfigError, match="page_size=96"):
        runner.card_setup(replace(here, page_size=96))
    # the fraction and page size whole, at the opening card; model x GPU; workload; loop
    assert len(grid_settings(config)) == 9 + 1 + 1 + 1
