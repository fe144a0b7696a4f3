"""``simulate`` on a linear-attention hybrid (Qwen3-Next): the full-attention KV pool and the
state slots SGLang sizes, with the radix cache on (its default) or off (one slot per running
request)."""

from __future__ import annotations

import pytest

from pagedkv.entrypoints.cli import main
from pagedkv.entrypoints.simulation import simulate, simulated_engine
from pagedkv.errors import ConfigError
from pagedkv.sizing import plan_pool
from pagedkv.workloads.synthetic import RequestSpec

MODEL = dict(model="qwen3-next-80b-a3b", gpu="h100-sxm-80gb", tp=4)


def test_the_pools_are_sized_with_the_radix_cache_off():
    engine = simulated_engine(**MODEL, radix_cache=False)
    plan = plan_pool("qwen3-next-80b-a3b", gpu="h100-sxm-80gb", tp=4, disable_radix_cache=True)
    assert engine.plan == plan and engine.mamba_pool is not None
    assert engine.mamba_pool.size == plan.mamba_slots == engine.config.max_running_requests
    assert engine.mamba_pool.bytes_per_slot == plan.state_bytes
    # --max-running-requests with the radix cache off: one slot per request (SGLang's
    # _handle_max_mamba_cache), the rest of the budget to the KV pool
    capped = simulated_engine(**MODEL, radix_cache=False, max_running_requests=64)
    assert capped.mamba_pool is not None and capped.mamba_pool.size == 64
    assert capped.plan.max_total_num_tokens > plan.max_total_num_tokens


def test_a_run_holds_one_slot_per_running_request():
    engine = simulated_engine(**MODEL, radix_cache=False, max_running_requests=8)
    s = engine.scheduler([RequestSpec(300, 40, 40, 0.0) for _ in range(20)])
    pool = s.req_to_token_pool
    peak = 0
    while s.step():
        held = pool.mamba_pool.size - pool.mamba_allocator.available_size()  # type: ignore[attr-defined]
        assert held == sum(r.req_pool_idx >= 0 for r in s.reqs)
        peak = max(peak, held)
    assert peak == 8 and all(r.finished for r in s.reqs)
    result = simulate([RequestSpec(300, 40, 40, 0.0)] * 3, **MODEL, radix_cache=False)
    assert result.metrics.num_requests == 3


def test_the_radix_cache_runs_by_default(capsys):
    """SGLang 0.5.23's default server: the radix cache on, sized at 3 + 2 track slots per
    running request (the overlap loop's extra_buffer), each running request holding its
    state and its 2 track slots; shared prefixes are reused from checkpointed states."""
    engine = simulated_engine(**MODEL)
    plan = plan_pool("qwen3-next-80b-a3b", gpu="h100-sxm-80gb", tp=4)
    assert engine.plan == plan and engine.config.max_running_requests == plan.mamba_slots // 5
    assert main(["simulate", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--num-requests", "20",
                 "--workload", "system-prompt"]) == 0
    out = capsys.readouterr().out
    assert "completed: 20 of 20 requests" in out and "radix cache on" in out
    assert (f"state slots: {plan.mamba_slots:,} of {plan.state_bytes / 2**20:,.2f} MiB each, 3 "
            "(its state and 2 track slots) held by each running request") in out
    reuse = next(line for line in out.splitlines() if line.startswith("prefix reuse:"))
    assert not reuse.startswith("prefix reuse: 0 of")
    assert main(["simulate", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--num-requests", "5",
                 "--disable-radix-cache"]) == 0
    out = capsys.readouterr().out
    plan = simulated_engine(**MODEL, radix_cache=False).plan
    assert (f"state slots: {plan.mamba_slots:,} of {plan.state_bytes / 2**20:,.2f} MiB each, one "
            "held by each running request") in out


REFUSED_0509 = (r"sglang_version='0\.5\.9' is invalid; valid: 0\.5\.23 for a linear-attention "
                r"hybrid with the radix cache")


def test_0509_refuses_the_radix_cache_by_name_before_any_run(monkeypatch, capsys):
    """Refused when the engine is built, at the boundary: no scheduler is ever built."""
    from pagedkv.managers.scheduler import Scheduler

    def no_scheduler(*args, **kwargs):
        raise AssertionError("the refusal must come before a scheduler is built")

    monkeypatch.setattr(Scheduler, "__init__", no_scheduler)
    with pytest.raises(ConfigError, match=REFUSED_0509):
        simulated_engine(**MODEL, sglang_version="0.5.9")
    with pytest.raises(ConfigError, match=REFUSED_0509):
        simulate([RequestSpec(300, 4, 4, 0.0)], **MODEL, sglang_version="0.5.9")
    assert main(["simulate", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--num-requests", "5",
                 "--sglang-version", "0.5.9"]) == 2
    assert "sglang_version='0.5.9' is invalid; valid: 0.5.23 for a linear-attention hybrid" \
        in capsys.readouterr().err
    # with the radix cache off 0.5.9 is modelled: the engine is built
    assert simulated_engine(**MODEL, sglang_version="0.5.9", radix_cache=False).mamba_pool


def test_0509_refuses_a_sliding_window_hybrid_before_any_run(monkeypatch):
    from pagedkv.managers.scheduler import Scheduler

    monkeypatch.setattr(Scheduler, "__init__", lambda *a, **k: pytest.fail("a scheduler was built"))
    with pytest.raises(ConfigError, match=r"sglang_version='0\.5\.9' is invalid; valid: 0\.5\.23 "
                                          r"for a sliding-window hybrid's scheduler"):
        simulated_engine(model="gpt-oss-20b", gpu="h100-sxm-80gb", sglang_version="0.5.9")


def test_the_page_record_follows_the_tree_over_state_slots():
    """The visualizer's page record with the mamba radix cache on: the tree's KV pages are
    owned by the tree (its state slots are not KV pages), every step's owners consistent."""
    import numpy as np

    specs = [RequestSpec(300, 40, 40, 0.1 * i, input_ids=np.arange(300) + i % 2)
             for i in range(10)]
    result = simulate(specs, **MODEL, record_pages=True, record_page_tables=True)
    assert result.metrics.num_requests == 10
    assert result.trace.page_events is not None and result.trace.page_events.step
