"""PrefillAdder, the running reservation, the ratio constants and the victim order, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.errors import ConfigError
from pagedkv.managers import AddReqResult, Policy, PrefillAdder, Req, RunningBatch, SchedulerConfig
from pagedkv.managers.schedule_policy import running_reservation


def req(prompt: int, max_new: int, output: int | None = None, generated: int = 0) -> Req:
    r = Req(0, prompt, output or max_new, max_new)
    r.generated = generated
    return r


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


def test_running_reservation_sglang() -> None:
    # two running requests: min(200 - 50, 4096) + min(9000 - 10, 4096) = 150 + 4096 tokens
    arrays = [np.array(v) for v in ([100, 100], [200, 9000], [50, 10], [149, 109])]
    got = running_reservation(SchedulerConfig(), 1, 0.5, *arrays)
    assert got == pytest.approx((150 + 4096) * 0.5)
    # reserve_all, page 16: ceil16(100 + 200 - 1) - ceil16(149) = 304 - 160 = 144;
    # ceil16(100 + 9000 - 1) - ceil16(109) = 9104 - 112 = 8992
    full = SchedulerConfig(policy=Policy.RESERVE_ALL)
    assert running_reservation(full, 16, 0.5, *arrays) == 144 + 8992
    assert running_reservation(SchedulerConfig(policy="no_reserve"), 1, 0.5, *arrays) == 0


def test_newcomer_test_and_charge() -> None:
    # pool: 1000 free; one running request reserves min(200 - 50, 4096) * 0.7 = 105
    adder = PrefillAdder(SchedulerConfig(), 1, 1000, 105.0)
    assert adder.rem_total_tokens == 895
    # A: 300 + min(500, 4096) = 800 < 895 -> admitted, charged 300 + 500 = 800 -> 95 left
    assert adder.add_one_req(req(300, 500)) is AddReqResult.CONTINUE
    assert adder.rem_total_tokens == 95 and adder.can_run_list[0].charge == 800
    # B: 10 + 100 = 110 >= 95 -> NO_TOKEN, not admitted
    assert adder.add_one_req(req(10, 100)) is AddReqResult.NO_TOKEN
    assert len(adder.can_run_list) == 1


def test_newcomer_uses_remaining_output_but_is_charged_full_clip() -> None:
    # a retracted request: prompt 100, 40 generated, max_new 60
    r = req(100, 60, generated=40)
    adder = PrefillAdder(SchedulerConfig(), 1, 200, 0.0)
    # test: extend 140 + min(60 - 40, 4096) = 160 < 200; charge: 140 + min(60, 4096) = 200
    assert adder.newcomer_need(r) == 160
    assert adder.add_one_req(r) is AddReqResult.NO_TOKEN  # admitted, then rem_total = 0
    assert adder.can_run_list[0].charge == 200


def test_charge_rounds_prompt_to_pages_and_clips_output() -> None:
    adder = PrefillAdder(SchedulerConfig(), 16, 20_000, 0.0)
    adder.add_one_req(req(300, 9000))
    # ceil16(300) = 304, min(9000, 4096) = 4096
    assert adder.can_run_list[0].charge == 304 + 4096
    assert adder.rem_input_tokens == 16384 - 304


def test_max_prefill_tokens_first_request_exempt() -> None:
    cfg = SchedulerConfig(max_prefill_tokens=100, chunked_prefill_size=None)
    adder = PrefillAdder(cfg, 1, 10_000, 0.0)
    # first request: 150 > 100 but exempt; the prompt budget is then spent -> OTHER
    assert adder.add_one_req(req(150, 10)) is AddReqResult.OTHER
    adder = PrefillAdder(cfg, 1, 10_000, 0.0)
    assert adder.add_one_req(req(60, 10)) is AddReqResult.CONTINUE
    # second request: 40 >= 100 - 60 = 40 -> OTHER without admitting
    assert adder.add_one_req(req(40, 10)) is AddReqResult.OTHER
    assert len(adder.can_run_list) == 1


def test_chunked_prefill_floors_to_pages_and_reserves_nothing() -> None:
    cfg = SchedulerConfig(chunked_prefill_size=70)
    adder = PrefillAdder(cfg, 16, 10_000, 0.0)
    r = req(150, 500)
    # ceil16(150) = 160 > 70 -> chunk of floor16(70) = 64 tokens, charged 64 (no output)
    assert adder.add_one_req(r) is AddReqResult.CONTINUE  # 6 chunk tokens left, not <= 0
    adm = adder.can_run_list[0]
    assert (adm.extend_len, adm.charge, adm.truncated) == (64, 64, True)
    assert adder.new_chunked_req is r
    # the next request cannot fit the 6 tokens left: floor16(6) = 0 -> OTHER
    assert adder.add_one_req(req(10, 5)) is AddReqResult.OTHER


def test_chunked_continuation() -> None:
    cfg = SchedulerConfig(chunked_prefill_size=64)
    r = req(150, 500)
    r.kv_len = 64  # first chunk done: 86 left
    adder = PrefillAdder(cfg, 16, 10_000, 0.0)
    assert adder.add_chunked_req(r) is r            # 86 > 64: another chunk of 64
    r.kv_len = 128                                  # 22 left
    adder = PrefillAdder(cfg, 16, 10_000, 0.0)
    assert adder.add_chunked_req(r) is None         # last chunk: 22 tokens
    # charged ceil16(22) = 32 plus min(500, 4096) now that the prompt is complete
    assert adder.can_run_list[0].charge == 32 + 500


def test_reserve_all_and_no_reserve_charges() -> None:
    full = PrefillAdder(SchedulerConfig(policy="reserve_all"), 16, 1000, 0.0)
    # footprint: ceil16(100 + 300 - 1) = 400
    assert full.newcomer_need(req(100, 300)) == 400
    full.add_one_req(req(100, 300))
    assert full.can_run_list[0].charge == 400
    none = PrefillAdder(SchedulerConfig(policy="no_reserve"), 16, 1000, 0.0)
    assert none.newcomer_need(req(100, 300)) == 112  # ceil16(100)
    none.add_one_req(req(100, 300))
    assert none.can_run_list[0].charge == 112


def batch_of(prompt: list[int], generated: list[int], max_new: list[int]) -> RunningBatch:
    b = RunningBatch()
    reqs = []
    for i, (p, g, m) in enumerate(zip(prompt, generated, max_new, strict=True)):
        r = Req(i, p, m, m)
        r.generated, r.kv_len = g, p + g - 1
        reqs.append(r)
    b.add(reqs, [0] * len(reqs))
    return b


def test_retraction_order_fewest_outputs_then_longest_prompt() -> None:
    b = batch_of([10, 20, 30, 5], [5, 3, 3, 8], [50, 50, 50, 50])
    # outputs 3, 3 (prompts 30, 20) -> 2 then 1; then 5 -> 0; then 8 -> 3
    assert b.retraction_order().tolist() == [2, 1, 0, 3]


def test_retract_decode_stops_when_the_rest_fits() -> None:
    b = batch_of([10, 20, 30, 5], [5, 3, 3, 8], [50, 50, 60, 70])
    # page 1: next step needs 4 slots, 1 free. Retract #2 (kv 30 + 3 - 1 = 32): 33 free >= 3.
    victims, ratio = b.retract_decode(1, 1, 20)
    assert victims.tolist() == [False, False, True, False]
    # ratio over the 3 that stay: (5 + 3 + 8 + 20 * 3) / (50 + 50 + 70 + 1) = 76 / 171
    assert ratio == pytest.approx(76 / 171)


def test_retract_decode_retracts_at_least_one_and_counts_pages() -> None:
    b = batch_of([16, 16], [1, 2], [50, 50])
    # page 4: kv 16 and 17; only kv 16 starts a new page -> 4 slots needed, 0 free.
    # Victim: request 0 (1 output); frees ceil4(16) = 16 -> fits request 1 (needs 0 pages).
    assert b.new_tokens_required_next_decode(4) == 4
    victims, ratio = b.retract_decode(0, 4, 20)
    assert victims.tolist() == [True, False]
    assert ratio == pytest.approx((2 + 20) / 51)
