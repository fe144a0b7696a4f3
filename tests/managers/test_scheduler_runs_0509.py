"""Whole runs on tiny pools, every admission and retraction worked out by hand: SGLang 0.5.9
with ``--disable-radix-cache`` (the server chapters 4 and 5 were first written against) and
``--disable-overlap-schedule`` (the normal loop: each step's result processed in the step)."""

from __future__ import annotations

import json

import pytest

from pagedkv.entrypoints import simulate
from pagedkv.errors import ConfigError
from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.metrics import Metrics
from pagedkv.workloads.synthetic import RequestSpec, fixed, sharegpt_like

DECAY_03 = (0.21 - 0.21 * 0.14) / 600  # schedule_conservativeness 0.3: init 0.21, min 0.0294


def run(specs: list[RequestSpec], pool: int, page: int = 1, **cfg: object) -> Scheduler:
    s = Scheduler(specs, max_total_num_tokens=pool, page_size=page, radix_cache=False,
                  config=SchedulerConfig(sglang_version="0.5.9", disable_overlap_schedule=True,
                                         **cfg))
    while s.step():
        s.check_invariants()
    return s


def events(s: Scheduler) -> list[tuple[int, str, int]]:
    return [(e.step, e.kind, e.rid) for e in s.trace.events]


def test_admission_waits_for_a_finish() -> None:
    # pool 100, page 1; A(20 prompt, 10 out), B(30, 20 out, max_new 60), C(10, 5)
    s = run([RequestSpec(20, 10, 10), RequestSpec(30, 20, 60), RequestSpec(10, 5, 5)], 100)
    # step 0: A: 20 + 10 = 30 < 100, charged 30 -> 70 left; B: 30 + 60 = 90 >= 70: NO_TOKEN
    #         (batch_is_full set on the empty running batch)
    # step 1: A's pass becomes the running batch (a fresh object: batch_is_full False); B is
    #         offered again: A reserves (10 - 1) * 0.7 = 6.3, 80 free -> 73.7 < 90: NO_TOKEN
    # steps 1-9: A decodes 9 tokens (1 from prefill + 9 = 10) and finishes at step 9
    # step 10: batch_is_full still set -> update_running_batch finds the batch empty: idle
    # step 11: B: 90 < 100, charged 90 -> 10 left; C: 10 + 5 = 15 >= 10: NO_TOKEN
    # step 12: B's pass becomes the running batch (flag cleared); C: 70 free - 59 * 0.7
    #          = 28.7 > 15: admitted. C decodes at 13-16 (finishes), B at 13-31.
    assert events(s) == [(0, "admit", 0), (9, "finish", 0), (11, "admit", 1), (12, "admit", 2),
                         (16, "finish", 2), (31, "finish", 1)]
    kinds = s.trace.steps["kind"]
    assert len(kinds) == 32 and kinds[10] == "idle" and kinds.count("idle") == 1
    assert kinds.count("prefill") == 3 and kinds.count("decode") == 28
    ratio = s.trace.steps["new_token_ratio"]
    assert ratio[0] == 0.7 and ratio[1] == pytest.approx(0.7 - 0.602 / 600)
    assert ratio[10] == 0.7  # reset when idle
    assert [r.generated for r in s.reqs] == [10, 20, 5]
    # 10 ms per prefill or decode step, idle steps take no time: B is admitted at the start
    # of step 11 (10 working steps done), C at the start of step 12
    assert [r.queue_s for r in s.reqs] == pytest.approx([0.0, 0.10, 0.11])
    assert [r.first_token_s for r in s.reqs] == pytest.approx([0.01, 0.11, 0.12])
    assert [r.finish_s for r in s.reqs] == pytest.approx([0.10, 0.31, 0.16])
    m = Metrics.from_run(s.reqs, s.trace)
    assert (m.num_prefill_steps, m.num_decode_steps, m.num_idle_steps) == (3, 28, 1)
    assert m.output_tokens == 35 and m.tokens_per_step == pytest.approx(35 / 31)
    assert m.duration_s == pytest.approx(0.31) and m.mean_queue_s == pytest.approx(0.21 / 3)
    # B's peak: 30 + 19 - 1 = 48 after its 19th token; the 20th finishes it in the same step
    assert m.peak_tokens_used == 48 and m.peak_usage == 0.48


def test_retraction_by_hand() -> None:
    # pool 100, page 1, conservativeness 0.3 (ratio 0.21, floor 0.0294)
    specs = [RequestSpec(10, 2, 2), RequestSpec(10, 60, 60), RequestSpec(10, 60, 60)]
    s = run(specs, 100, schedule_conservativeness=0.3)
    # step 0: A 10 + 2 = 12 < 100 (charge 12, 88 left); B 10 + 60 = 70 < 88 (18 left);
    #         C 70 >= 18: NO_TOKEN.
    # step 1: the pass is the running batch (flag cleared); C offered again: A reserves
    #         1 * 0.21, B 59 * 0.21, 80 free -> 67.4 < 70: NO_TOKEN. Decode; A finishes.
    # step 2: batch_is_full -> decode (A filtered, flag cleared); B kv 12, 3 out.
    # step 3: free 88, B reserves (60 - 3) * (0.21 - 2 * decay) = 11.94 -> rem 76.06;
    #         C: 70 < 76.06 -> admitted.
    # steps 4-42: B and C decode, 2 slots a step: free 78 -> 0 after 39 steps.
    # step 43: needs 2, 0 free -> retract C (40 outputs < B's 42), freeing kv 49;
    #          ratio (42 + 20 * 1) / (60 + 1) > 1 -> 1.0.
    # steps 44-60: B decodes to 60 and finishes; C refused meanwhile (50 + 20 >= 48 - 17).
    # step 61 idle (ratio back to 0.21); step 62 C re-prefilled over 10 + 40 = 50 tokens.
    # steps 63-81: C decodes 19 tokens (41 -> 60) and finishes.
    assert events(s) == [(0, "admit", 0), (0, "admit", 1), (1, "finish", 0), (3, "admit", 2),
                         (43, "retract", 2), (60, "finish", 1), (62, "reprefill", 2),
                         (81, "finish", 2)]
    old = 0.21 - 41 * DECAY_03  # decays at steps 1, 2 and 4-42
    assert s.trace.log.count(f"KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                             f"#new_tokens_gained: 49, #new_token_ratio: {old:.4f} -> 1.0000") == 1
    retract = s.trace.events_of("retract")[0]
    assert retract.extra == {"output_len": 40, "freed": 49, "kept": 0}
    c = s.reqs[2]
    assert (c.num_retractions, c.recomputed_tokens, c.generated) == (1, 49, 60)
    assert s.trace.events_of("reprefill")[0].extra["extend"] == 50
    assert s.trace.steps["tokens_free"][43] == 100 - 52  # B holds 52 after step 43


def test_reserve_all_never_retracts_and_no_reserve_does() -> None:
    specs = [RequestSpec(10, 2, 2), RequestSpec(10, 60, 60), RequestSpec(10, 60, 60)]
    full = run(specs, 100, policy="reserve_all")
    assert not full.trace.events_of("retract")
    greedy = run(specs, 100, policy="no_reserve")
    assert greedy.trace.events_of("retract")
    # no_reserve admits all three at once: 10 + 10 + 10 prompt pages fit
    assert [e.step for e in greedy.trace.events_of("admit")] == [0, 0, 0]


def test_paged_decode_needs_whole_pages() -> None:
    # page 8, pool 32 (4 pages): two requests of prompt 8. After prefill each holds 1 page
    # (kv 8); the first decode needs 2 new pages (kv 8 % 8 == 0). Then 7 tokens fit in them.
    specs = [RequestSpec(8, 9, 9), RequestSpec(8, 9, 9)]
    s = run(specs, 32 + 8, page=8, policy="no_reserve")
    assert s.trace.steps["pages_used"][:3] == [2, 4, 4]
    assert s.trace.steps["tokens_used"][:3] == [16, 18, 20]
    assert s.trace.steps["tokens_free"][:3] == [24, 8, 8]


def test_chunked_prefill_run() -> None:
    # chunk 16: a prompt of 40 is prefilled as 16 + 16 + 8 over three steps
    s = run([RequestSpec(40, 3, 3)], 100, chunked_prefill_size=16)
    chunks = s.trace.events_of("chunk")
    assert [(e.step, e.extra["prefix"], e.extra["tokens"]) for e in chunks] == [(0, 0, 16), (1, 16, 16),
                                                                       (2, 32, 8)]
    assert s.trace.steps["kind"][:4] == ["prefill"] * 3 + ["decode"]
    assert s.trace.steps["num_running"][:3] == [1, 1, 1]


def test_page_tables_recorded() -> None:
    s = Scheduler([RequestSpec(5, 3, 3)], max_total_num_tokens=32, page_size=4,
                  record_page_tables=True, config=SchedulerConfig(disable_overlap_schedule=True))
    s.run()
    tables = s.trace.page_tables
    assert tables[0] == [[0, 5, [1, 2]]]          # pages 1 and 2 (page 0 is padding)
    assert tables[1] == [[0, 6, [1, 2]]]
    assert tables[-1] == []


def test_request_larger_than_pool_is_rejected() -> None:
    # max_req_input_len = min(context_len - 1, pool - 1) - 5 = 94: a prompt of 94 is refused,
    # 93 is served with max_new_tokens clamped to 99 - 93 - 1 = 5 (SGLang at arrival)
    with pytest.raises(ConfigError, match=r"request 0 prompt_len=94 .* max_req_input_len=94"):
        Scheduler([RequestSpec(94, 10, 10)], max_total_num_tokens=100)
    with pytest.raises(ConfigError, match=r"prompt_len=60 .* max_req_input_len=58"):
        Scheduler([RequestSpec(60, 1, 1)], max_total_num_tokens=100, context_len=64)
    s = run([RequestSpec(93, 10, 10)], 100)
    assert s.reqs[0].max_new_tokens == 5 and s.reqs[0].generated == 5
    with pytest.raises(ConfigError, match="chunked_prefill_size"):
        Scheduler([RequestSpec(9, 1, 1)], max_total_num_tokens=64, page_size=16,
                  config=SchedulerConfig(chunked_prefill_size=8))


def test_simulate_requests_format_and_metrics() -> None:
    res = simulate(fixed(20, 100, 50, rate=50.0, seed=1), model="llama-3-8b",
                   gpu="h100-sxm-80gb", page_size=16, max_total_tokens=2000, arrival_rate=50.0)
    d = json.loads(res.trace.to_json())
    assert set(d) >= {"meta", "steps", "events", "page_tables", "log"}
    assert set(d["meta"]) >= {"model", "gpu", "policy", "page_size", "mem_fraction_static",
                              "max_total_num_tokens", "cell_size", "num_pages",
                              "gpu_memory_bytes", "weights_bytes", "kv_pool_bytes",
                              "arrival_rate", "sglang_version", "radix_cache"}
    meta = d["meta"]
    assert meta["max_total_num_tokens"] == 2000 and meta["num_pages"] == 125
    assert meta["cell_size"] == 131072 and meta["kv_pool_bytes"] == 2000 * 131072
    assert list(d["steps"]) == ["step", "time_s", "kind", "tokens_used", "tokens_reserved",
                                "tokens_free", "pages_used", "num_running", "num_waiting",
                                "new_token_ratio", "tokens_evictable", "tokens_protected"]
    assert len({len(col) for col in d["steps"].values()}) == 1
    assert d["page_tables"] is None
    m = res.metrics
    assert m.output_tokens == 20 * 50 and m.num_requests == 20
    assert m.duration_s > 0 and m.output_tokens_per_s == pytest.approx(1000 / m.duration_s)
    assert all(r.generated == 50 for r in res.requests)
    # the modeled decode step reads 16 GB of weights at 3.35 TB/s: about 4.8 ms
    times = d["steps"]["time_s"]
    decode = [b - a for a, b, k in zip(times[:-1], times[1:], d["steps"]["kind"][1:], strict=True)
              if k == "decode"]
    assert min(decode) == pytest.approx(16.06e9 / 3.35e12, rel=0.01)


def test_simulate_sharegpt_like_all_finish() -> None:
    specs = sharegpt_like(200, max_new_tokens=512, rate=None, seed=3)
    res = simulate(specs, model="llama-3-8b", gpu="h100-sxm-80gb", max_total_tokens=12_000)
    assert all(r.generated == spec.output_len for r, spec in zip(res.requests, specs, strict=True))
    assert res.metrics.num_retractions == len(res.trace.events_of("retract"))
