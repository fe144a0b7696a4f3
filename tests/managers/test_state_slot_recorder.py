"""The state-slot series a linear-attention hybrid's page record carries: parts that sum to
the pool after every step, track slots with the mamba radix cache only, states left in the
tree when the run ends."""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.entrypoints import simulate
from pagedkv.errors import ConfigError
from pagedkv.managers.state_slot_recorder import PARTS, StateSlotLog
from pagedkv.workloads.synthetic import uniform


def test_only_steps_whose_counts_change_are_kept() -> None:
    log = StateSlotLog(10)
    for step, counts in enumerate([(0, 0, 0, 10), (0, 0, 0, 10), (2, 4, 0, 4), (2, 4, 0, 4),
                                   (0, 0, 1, 9)]):
        log.observe(step, counts)
    assert log.to_dict() == {"slots": 10, "step": [0, 2, 4], "live": [0, 2, 0],
                             "track": [0, 4, 0], "tree": [0, 0, 1], "free": [10, 4, 9]}


def test_parts_that_miss_a_slot_are_refused() -> None:
    with pytest.raises(ConfigError, match="summing to the pool's 10 slots"):
        StateSlotLog(10).observe(0, (1, 2, 3, 3))


def _slots(radix: bool, overlap: bool) -> tuple[dict, dict]:
    """The state-slot series and the trace's dict of a small Qwen3-Next run on 4 H200s."""
    reqs = uniform(24, (300, 1500), (50, 400), 400, seed=3)
    out = simulate(reqs, model="qwen3-next-80b-a3b", gpu="h200-141gb", tp=4, radix_cache=radix,
                   record_pages=True, disable_overlap_schedule=not overlap).trace.to_dict()
    return out["page_events"]["state_slots"], out


@pytest.mark.parametrize("overlap", [True, False])
def test_a_qwen3_next_run_records_its_state_slots(overlap: bool) -> None:
    ss, _ = _slots(radix=True, overlap=overlap)
    parts = np.array([ss[k] for k in PARTS])
    assert (parts.sum(axis=0) == ss["slots"]).all()
    assert ss["step"] == sorted(set(ss["step"]))
    # extra_buffer: two track slots per request with the overlap loop (ping-pong); SGLang
    # 0.5.23 takes no_buffer without it, so no track slots then
    live, track = np.array(ss["live"]), np.array(ss["track"])
    assert (track == (2 * live if overlap else 0)).all()
    assert live.max() > 1  # requests ran side by side
    assert live[-1] == 0 and ss["tree"][-1] > 0  # all finished, the tree keeps states


def test_the_trace_meta_carries_the_state_pool() -> None:
    from pagedkv.configs.model_presets import load_model
    from pagedkv.gpus import get_gpu
    from pagedkv.sizing import plan_pool
    ss, out = _slots(radix=False, overlap=True)
    plan = plan_pool(load_model("qwen3-next-80b-a3b"), gpu=get_gpu("h200-141gb"), tp=4,
                     disable_radix_cache=True)
    meta = out["meta"]
    assert (meta["mamba_slots"], meta["state_bytes"]) == (plan.mamba_slots, plan.state_bytes)
    assert meta["state_pool_bytes"] == plan.mamba_slots * plan.state_bytes > 0
    assert ss["slots"] == plan.mamba_slots


def test_without_the_radix_cache_only_requests_hold_slots() -> None:
    ss, _ = _slots(radix=False, overlap=True)
    assert set(ss["track"]) == {0} and set(ss["tree"]) == {0}
    assert max(ss["live"]) > 1 and ss["live"][-1] == 0 and ss["free"][-1] == ss["slots"]
