"""PrefillAdder on real memory, by hand: the budgets, the newcomer test, the charge, chunking,
both releases (0.5.23 charges one page more per admitted piece)."""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.errors import ConfigError
from pagedkv.lessons.admission import running_state
from pagedkv.managers import AddReqResult, Policy, PrefillAdder, Req, SchedulerConfig
from pagedkv.managers.schedule_policy import running_reservation

OLD, NEW = "0.5.9", "0.5.23"


def req(prompt: int, max_new: int, output: int | None = None, generated: int = 0,
        rid: int = 0, ignore_eos: bool = False) -> Req:
    r = Req(rid, prompt, output or max_new, max_new, ignore_eos=ignore_eos)
    r.generated = generated
    return r


def adder_with(free: int, page: int = 1, running: list[Req] | None = None, ratio: float = 0.7,
               radix: bool = False, **cfg: object) -> PrefillAdder:
    """A PrefillAdder over a real pool with exactly ``free`` free slots beside ``running``."""
    config = SchedulerConfig(**cfg)
    running = running or []
    held = sum(-(-(r.prompt_len + r.generated - 1) // page) * page for r in running)
    batch = running_state(running, held + free, config, page, radix=radix)
    return PrefillAdder(config, batch.tree_cache, batch.allocator, batch, ratio)


def offer(adder: PrefillAdder, r: Req) -> AddReqResult:
    r.prefix_len = r.cache_protected_len = 0
    r.last_node = adder.tree_cache.root_node
    return adder.add_one_req(r)


def test_ratio_constants_are_sglangs() -> None:
    cfg = SchedulerConfig()
    assert cfg.init_ratio == 0.7                       # min(0.7 * 1.0, 1)
    assert cfg.min_ratio == pytest.approx(0.098)       # 0.7 * 0.14
    assert cfg.ratio_decay == pytest.approx(0.602 / 600)
    half = SchedulerConfig(schedule_conservativeness=0.5)
    assert half.init_ratio == pytest.approx(0.35) and half.min_ratio == pytest.approx(0.049)
    assert SchedulerConfig(schedule_conservativeness=2.0).init_ratio == 1.0  # capped at 1


def test_from_env_reads_sglang_variables() -> None:
    env = {"SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "256", "SGLANG_INIT_NEW_TOKEN_RATIO": "0.5",
           "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR": "0.2", "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS": "100",
           "SGLANG_RETRACT_DECODE_STEPS": "5"}
    cfg = SchedulerConfig.from_env(env, max_prefill_tokens=99)
    assert (cfg.clip_max_new_tokens, cfg.retract_decode_steps, cfg.max_prefill_tokens) == (256, 5, 99)
    assert cfg.min_ratio == pytest.approx(0.1) and cfg.ratio_decay == pytest.approx(0.004)
    with pytest.raises(ConfigError, match="SGLANG_RETRACT_DECODE_STEPS"):
        SchedulerConfig.from_env({"SGLANG_RETRACT_DECODE_STEPS": "x"})
    with pytest.raises(ConfigError, match="policy='fifo'"):
        SchedulerConfig(policy="fifo")
    with pytest.raises(ConfigError, match="chunked_prefill_size=0"):
        SchedulerConfig(chunked_prefill_size=0)
    with pytest.raises(ConfigError, match=r"sglang_version='0\.4'"):
        SchedulerConfig(sglang_version="0.4")


def test_running_reservation_per_request_products_in_order() -> None:
    # two running requests: min(200 - 50, 4096) + min(9000 - 10, 4096) = 150 + 4096 tokens
    arrays = [np.array(v) for v in ([100, 100], [200, 9000], [50, 10], [149, 109])]
    assert running_reservation(SchedulerConfig(), 1, 0.5, *arrays) == (150 + 4096) * 0.5
    # the sum is Python's, request after request: 0.1 * 3 is not 0.3 in floats
    ones = [np.ones(3, dtype=np.int64), np.full(3, 2), np.ones(3, dtype=np.int64), np.ones(3)]
    assert running_reservation(SchedulerConfig(), 1, 0.1, *ones) == 0.1 + 0.1 + 0.1
    # 0.5.23 reserves a running ignore-EOS request at ratio 1.0; 0.5.9 at the ratio
    eos = np.array([True, False])
    assert running_reservation(SchedulerConfig(), 1, 0.5, *arrays, eos) == 150 + 4096 * 0.5
    assert running_reservation(SchedulerConfig(sglang_version=OLD), 1, 0.5, *arrays, eos) == (
        (150 + 4096) * 0.5)
    # reserve_all, page 16: ceil16(100 + 200 - 1) - ceil16(149) = 304 - 160 = 144;
    # ceil16(100 + 9000 - 1) - ceil16(109) = 9104 - 112 = 8992
    full = SchedulerConfig(policy=Policy.RESERVE_ALL)
    assert running_reservation(full, 16, 0.5, *arrays) == 144 + 8992
    assert running_reservation(SchedulerConfig(policy="no_reserve"), 1, 0.5, *arrays) == 0


@pytest.mark.parametrize(("version", "page_extra"), [(OLD, 0), (NEW, 1)])
def test_newcomer_test_and_charge(version: str, page_extra: int) -> None:
    # 1000 free; one running request (prompt 10, 50 out of 200) reserves 150 * 0.7 = 105
    adder = adder_with(1000, running=[req(10, 200, generated=50, rid=9)], sglang_version=version)
    assert adder.rem_total_tokens == 895
    # A: 300 + 500 (+ 1 in 0.5.23) < 895 -> admitted, charged 300 + 500 (+ 1)
    assert offer(adder, req(300, 500)) is AddReqResult.CONTINUE
    assert adder.rem_total_tokens == 95 - page_extra
    assert adder.cur_rem_tokens == 1000 - 300 - page_extra
    # B: 10 + 84 (+ 1) is 94 (95) against 95 (94): admitted in 0.5.9 only
    result = offer(adder, req(10, 84))
    assert len(adder.can_run_list) == 2 - page_extra
    assert result is (AddReqResult.NO_TOKEN if page_extra else AddReqResult.CONTINUE)


def test_boundary_is_strict() -> None:
    # total_tokens == rem_total_tokens is refused (the test is total < rem_total)
    assert offer(adder_with(100, sglang_version=OLD), req(50, 50)) is AddReqResult.NO_TOKEN
    assert offer(adder_with(100, sglang_version=OLD), req(50, 49)) is AddReqResult.CONTINUE
    assert offer(adder_with(101, sglang_version=OLD), req(50, 50)) is AddReqResult.CONTINUE
    # 0.5.23 adds a page: 50 + 49 + 1 == 100 is refused, 50 + 48 + 1 is not
    assert offer(adder_with(100, sglang_version=NEW), req(50, 49)) is AddReqResult.NO_TOKEN
    assert offer(adder_with(100, sglang_version=NEW), req(50, 48)) is AddReqResult.CONTINUE


def test_newcomer_uses_remaining_output_but_is_charged_full_clip() -> None:
    # a retracted request: prompt 100, 40 generated, max_new 60; 0.5.9
    r = req(100, 60, generated=40)
    adder = adder_with(201, sglang_version=OLD)
    # test: extend 140 + min(60 - 40, 4096) = 160 < 201; charge: 140 + min(60, 4096) = 200
    assert adder.newcomer_need(r, 140) == 160
    assert offer(adder, r) is AddReqResult.CONTINUE
    assert adder.rem_total_tokens == 1 and r.extend_len == 140


def test_charge_rounds_prompt_to_pages_and_clips_output() -> None:
    adder = adder_with(20_000, page=16, sglang_version=NEW)
    offer(adder, req(300, 9000))
    # ceil16(300) = 304 + one page (0.5.23) + min(9000, 4096) = 4096
    assert adder.rem_total_tokens == 20_000 - 304 - 16 - 4096
    assert adder.rem_input_tokens == 16384 - 304  # no page on the compute budgets
    assert adder.log_input_tokens == 300  # 0.5.23 logs raw tokens


@pytest.mark.parametrize("version", [OLD, NEW])
def test_max_prefill_tokens(version: str) -> None:
    # without chunking both releases stop at max_prefill_tokens; the first request is exempt
    cfg = {"max_prefill_tokens": 100, "chunked_prefill_size": None, "sglang_version": version}
    adder = adder_with(10_000, **cfg)
    assert offer(adder, req(150, 10)) is AddReqResult.OTHER  # admitted; the budget is spent
    adder = adder_with(10_000, **cfg)
    assert offer(adder, req(60, 10)) is AddReqResult.CONTINUE
    assert offer(adder, req(40, 10)) is AddReqResult.OTHER  # 40 >= 100 - 60: not admitted
    assert len(adder.can_run_list) == 1


def test_max_prefill_tokens_with_chunking_only_in_0509() -> None:
    cfg = {"max_prefill_tokens": 100, "chunked_prefill_size": 1000}
    old = adder_with(10_000, sglang_version=OLD, **cfg)
    new = adder_with(10_000, sglang_version=NEW, **cfg)
    for adder in (old, new):
        offer(adder, req(60, 10))
        offer(adder, req(60, 10, rid=1))
    assert (len(old.can_run_list), len(new.can_run_list)) == (1, 2)
    assert new.rem_input_tokens == -20 and new.budget_state() is AddReqResult.OTHER


def test_chunked_prefill_floors_to_pages_and_reserves_nothing() -> None:
    adder = adder_with(10_000, page=16, chunked_prefill_size=70, sglang_version=OLD)
    r = req(150, 500)
    # ceil16(150) = 160 > 70 -> a chunk of floor16(70) = 64 tokens, charged 64 (no output)
    assert offer(adder, r) is AddReqResult.CONTINUE  # 6 chunk tokens left, not <= 0
    assert (r.extend_len, adder.new_chunked_req) == (64, r)
    assert adder.rem_total_tokens == 10_000 - 64
    # the next request cannot fit the 6 tokens left: floor16(6) = 0 -> OTHER
    assert offer(adder, req(10, 5, rid=1)) is AddReqResult.OTHER


@pytest.mark.parametrize("version", [OLD, NEW])
def test_chunked_continuation_is_not_floored(version: str) -> None:
    # a carried chunked request takes min(rem_chunk_tokens, int(rem_total_tokens)): no pages
    r = req(150, 500)
    r.prefix_len = 64  # first chunk done: 86 left
    adder = adder_with(10_000, page=16, chunked_prefill_size=50, sglang_version=version)
    assert adder.add_chunked_req(r) is r and r.extend_len == 50
    r.prefix_len = 130  # 20 left: the last chunk, charged ceil16(20) + min(500, 4096)
    adder = adder_with(10_000, page=16, chunked_prefill_size=50, sglang_version=version)
    assert adder.add_chunked_req(r) is None and r.extend_len == 20
    assert adder.rem_total_tokens == 10_000 - 32 - 500 - (16 if version == NEW else 0)
    # memory short: int(rem_total_tokens) = 37 tokens, not a page multiple
    r.prefix_len = 64
    adder = adder_with(37, page=1, chunked_prefill_size=50, sglang_version=OLD)
    assert adder.add_chunked_req(r) is r and r.extend_len == 37
    # nothing left (a running request holds the pool and reserves more): the whole chunk
    # budget anyway, the request must make progress
    adder = adder_with(0, running=[req(10, 200, generated=1, rid=9)], chunked_prefill_size=50,
                       sglang_version=OLD)
    assert adder.rem_total_tokens < 0
    assert adder.add_chunked_req(r) is r and r.extend_len == 50


def test_ignore_eos_with_the_radix_cache_off() -> None:
    # the worst case: the newcomer runs to max_new_tokens (ratio 1.0); alone on 100 free
    # slots, 100 - 30 - 60 = 10 > 1: admitted; 100 - 30 - 69 = 1 <= 1: refused
    assert offer(adder_with(100, sglang_version=OLD), req(30, 60, ignore_eos=True)).name == "CONTINUE"
    assert offer(adder_with(100, sglang_version=OLD), req(30, 69, ignore_eos=True)).name == "NO_TOKEN"
    # 0.5.23 charges a page more: 100 - 30 - 1 - 68 = 1 -> refused
    assert offer(adder_with(100, sglang_version=NEW), req(30, 68, ignore_eos=True)).name == "NO_TOKEN"


def test_reserve_all_and_no_reserve() -> None:
    full = adder_with(1024, page=16, policy="reserve_all", sglang_version=OLD)
    # footprint: ceil16(100 + 300 - 1) = 400, charged whole: the prompt's 112 and the rest
    assert full.newcomer_need(req(100, 300), 100) == 400
    offer(full, req(100, 300))
    assert full.rem_total_tokens == 1024 - 400
    none = adder_with(1024, page=16, policy="no_reserve", sglang_version=OLD)
    assert none.newcomer_need(req(100, 300), 100) == 112  # ceil16(100)
    offer(none, req(100, 300))
    assert none.rem_total_tokens == 1024 - 112
