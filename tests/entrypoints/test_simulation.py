"""The simulated run goes through ``Engine`` like a real one: ``simulate`` is
``simulated_engine(...).run(...)``, its result is an ``EngineResult`` with the pool's plan, and
``Engine.run_scheduler`` is the one loop (Ctrl-C handling included)."""

from __future__ import annotations

import pytest

from pagedkv.configs.model_presets import load_model
from pagedkv.entrypoints import Engine, EngineResult, simulate, simulated_engine
from pagedkv.gpus import get_gpu
from pagedkv.model_executor.sim_executor import RooflineStepTime, SimExecutor
from pagedkv.sizing import plan_pool
from pagedkv.workloads.synthetic import RequestSpec, fixed

OPTIONS = {"model": "llama-3-8b", "gpu": "l4", "page_size": 16, "max_total_tokens": 2048}


def test_simulate_is_a_run_of_the_simulated_engine() -> None:
    specs = fixed(12, 300, 40)
    res = simulate(specs, **OPTIONS)
    engine = simulated_engine(**OPTIONS)
    again = engine.run(specs)
    assert isinstance(res, EngineResult) and isinstance(engine, Engine)
    assert res.trace.to_dict() == again.trace.to_dict()
    assert res.metrics == again.metrics
    # the pool SGLang would build, as plan_pool sizes it, capped at 2048 tokens
    plan = plan_pool(load_model("llama-3-8b"), gpu=get_gpu("l4"), page_size=16,
                     max_total_tokens=2048)
    assert res.plan == plan and res.plan.max_total_num_tokens == 2048
    assert isinstance(engine.executor, SimExecutor)
    assert isinstance(engine.executor.step_time, RooflineStepTime)
    assert res.trace.meta.model == "llama-3-8b" and res.trace.meta.gpu == engine.meta.gpu
    assert res.metrics.output_tokens == 12 * 40 and not res.interrupted
    assert res.outputs == [[]] * 12 and res.clamps == []


def test_an_engine_runs_again_from_a_fresh_scheduler() -> None:
    engine = simulated_engine(**OPTIONS)
    first = engine.run(fixed(5, 200, 30)).trace.to_dict()
    assert engine.run(fixed(5, 200, 30)).trace.to_dict() == first


@pytest.mark.parametrize("interruptible", [True, False])
def test_ctrl_c_ends_the_one_loop_with_the_finished_requests(interruptible: bool) -> None:
    specs = [RequestSpec(8, out, out) for out in (2, 2, 40, 40)]
    engine = Engine(SimExecutor(), max_total_num_tokens=256, page_size=4,
                    disable_overlap_schedule=True)
    sched = engine.scheduler(specs)

    def stop_after_two_finish(s: object) -> None:
        if sched.num_finished >= 2:
            raise KeyboardInterrupt

    if not interruptible:
        with pytest.raises(KeyboardInterrupt):
            engine.run_scheduler(sched, on_step=stop_after_two_finish)
        return
    res = engine.run_scheduler(sched, specs, on_step=stop_after_two_finish, interruptible=True)
    assert res.interrupted
    assert res.metrics.output_tokens == 4  # the two 2-token requests, nothing of the others
    assert [r.finish_s is not None for r in res.requests] == [True, True, False, False]


def test_the_one_loop_may_pause_and_go_on() -> None:
    """``Scheduler.steps`` is the loop every caller iterates: a step-by-step walk that stops
    after step 5 and goes on ends with the trace of an uninterrupted (fast-forwarded) run."""
    specs = [RequestSpec(8 * (i + 1), 12, 12) for i in range(6)]
    engine = Engine(SimExecutor(), max_total_num_tokens=96, page_size=4)
    whole = engine.scheduler(specs)
    whole.run()
    walk = engine.scheduler(specs, fast_forward=False)  # one step per step()
    for s in walk.steps():
        assert s is walk
        if walk.num_steps >= 5:
            break
    assert walk.num_steps == 5 and not walk.done()
    for _ in walk.steps():
        pass
    assert walk.trace.to_dict() == whole.trace.to_dict()
