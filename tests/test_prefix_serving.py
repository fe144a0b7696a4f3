"""The prefix-cache server loop: hand-checked runs, slot accounting, and random workloads."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkv.errors import AllocatorError, ConfigError, OutOfMemoryError
from pagedkv.lessons.prefix_serving import PrefixServer, serve
from pagedkv.workloads.prefix import PrefixRequest, multi_turn, shared_system_prompt


def test_one_at_a_time_every_later_request_reuses_the_system_prompt():
    reqs = shared_system_prompt(3, system_len=8, question_len=(2, 2), output_len=(3, 3))
    run = serve(reqs, size=64, max_running=1, check=True)
    assert run.hit_lens == [0, 8, 8]
    assert (run.prompt_tokens, run.reused_tokens) == (30, 16)
    prefills = [(s.step, s.computed, s.reused) for s in run.steps if s.kind == "prefill"]
    # prefill, 2 decode steps (the prefill samples the first of 3 outputs), next request
    assert prefills == [(0, 10, 0), (3, 2, 8), (6, 2, 8)]


def test_requests_admitted_together_all_miss_and_duplicates_are_freed():
    reqs = shared_system_prompt(3, system_len=8, question_len=(2, 2), output_len=(3, 3))
    run = serve(reqs, size=64, max_running=3, check=True)
    assert run.hit_lens == [0, 0, 0]
    first = run.steps[0]
    # one copy of the 8 shared tokens plus 3 x 2 own tokens stay; 2 x 8 duplicates are freed
    assert (first.kind, first.protected, first.running, first.free) == ("prefill", 14, 0, 50)


def test_finished_tokens_stay_cached_as_evictable():
    reqs = shared_system_prompt(2, system_len=8, question_len=(2, 2), output_len=(3, 3))
    run = serve(reqs, size=64, max_running=2, check=True)
    last = run.steps[-1]
    # 8 shared + 2 x (2 own prompt tokens + 2 cached outputs: the last one has no K/V)
    assert (last.running_reqs, last.protected, last.evictable) == (0, 0, 16)
    assert last.free == 64 - 16
    assert serve(reqs, size=64, max_running=2, radix=False).steps[-1].free == 64


def test_a_second_turn_reuses_the_whole_first_turn_but_its_last_token():
    reqs = multi_turn(1, 2, message_len=(5, 5), output_len=(4, 4))
    run = serve(reqs, size=64, check=True)
    assert run.hit_lens == [0, 5 + 4 - 1]


def test_pages_round_hits_down_and_drop_partial_pages():
    reqs = shared_system_prompt(2, system_len=10, question_len=(3, 3), output_len=(2, 2))
    run = serve(reqs, size=64, page_size=4, max_running=1, check=True)
    assert run.hit_lens == [0, 8]
    # request 0 cached 13 + 1 tokens = 14 -> 3 whole pages kept, the partial 4th freed;
    # request 1 adds 2 pages after the 2 shared ones, and its tail page is freed too
    assert run.steps[-1].evictable == 12 + 4 and run.steps[-1].free == 64 - 16


def test_a_full_pool_evicts_the_least_recently_used_conversation():
    reqs = multi_turn(2, 2, message_len=(20, 20), output_len=(10, 10))
    run = serve(reqs, size=96, max_running=1, check=True)
    # after both first turns (29 + 29 cached), turn 2 of chat 0 needs 20 new + 9 future
    # slots; 96 - 58 = 38 are free, so it hits 29 and evicts nothing, then chat 1's
    # second turn needs room and evicts chat 0
    assert run.hit_lens == [0, 0, 29, 29]
    assert sum(s.evicted for s in run.steps) > 0


def test_a_prompt_never_matches_in_full_one_token_is_always_computed():
    """SGLang matches at most len(prompt) - 1 tokens (``adjust_max_prefix_ids``): the last
    prompt token must run through the model to give the first output's logits."""
    same = [PrefixRequest(i, (1, 2, 3, 4, 5, 6, 7, 8), (9, 10)) for i in range(2)]
    assert serve(same, size=64, max_running=1, check=True).hit_lens == [0, 7]
    assert serve(same, size=64, page_size=4, max_running=1, check=True).hit_lens == [0, 4]
    again = [PrefixRequest(0, (1, 2, 3), (4, 5)), PrefixRequest(1, (1, 2, 3, 4), (6,))]
    run = serve(again, size=64, max_running=1, check=True)
    assert run.hit_lens == [0, 3]  # the first prompt + its cached output token 4, minus one
    assert [s.computed for s in run.steps if s.kind == "prefill"] == [3, 1]


def test_a_prefill_pass_stops_at_max_prefill_tokens_but_always_takes_one():
    reqs = shared_system_prompt(3, system_len=8, question_len=(2, 2), output_len=(3, 3))
    run = serve(reqs, size=64, max_running=3, max_prefill_tokens=5, check=True)
    prefills = [(s.step, s.computed, s.reused) for s in run.steps if s.kind == "prefill"]
    # step 0: request 0 alone (10 tokens, exempt); step 1: the others compute 2 each
    assert prefills == [(0, 10, 0), (1, 4, 16)]
    assert run.hit_lens == [0, 8, 8]


def test_check_invariants_catches_a_row_off_its_path_and_a_stray_lock():
    reqs = shared_system_prompt(2, system_len=8, question_len=(2, 2), output_len=(3, 3))
    server = PrefixServer(64, max_context_len=32)
    running = []
    for spec in reqs:
        req = server.admit(spec, reserved=0, budget=None)
        server.cache_unfinished_req(req)
        running.append(req)
    server.check_invariants(running)
    node = running[1].last_node
    while node is not server.tree.root_node:  # one lock too many, consistent up the path
        node.lock_ref += 1
        node = node.parent
    with pytest.raises(AllocatorError, match="running requests pass through it"):
        server.check_invariants(running)
    node = running[1].last_node
    while node is not server.tree.root_node:
        node.lock_ref -= 1
        node = node.parent
    server.req_pool.write(running[1].row, [0], [63])
    with pytest.raises(AllocatorError, match="not its locked tree path"):
        server.check_invariants(running)


def test_bad_streams_and_pools_get_named_errors():
    good = shared_system_prompt(2, 4, (1, 1), (1, 1))
    with pytest.raises(ConfigError, match="rid"):
        serve(list(reversed(good)), size=64)
    with pytest.raises(ConfigError, match="follows"):
        serve([PrefixRequest(0, (1,), (2,), follows=0)], size=64)
    with pytest.raises(OutOfMemoryError,
                       match=r"needs 31 slots \(31 prompt \+ 1 output - 1.*size=16"):
        serve(shared_system_prompt(1, 30, (1, 1), (1, 1)), size=16)
    with pytest.raises(ConfigError, match=r"requests=.*at least one"):
        serve([], size=16)
    with pytest.raises(ConfigError, match=r"requests\[0\]"):
        serve([(1, 2)], size=16)
    with pytest.raises(ConfigError, match="question_len"):
        shared_system_prompt(2, 4, (1, 2, 3), (1, 1))
    with pytest.raises(ConfigError, match="page_size=0"):
        PrefixServer(64, page_size=0)
    with pytest.raises(ConfigError, match="input_ids"):
        PrefixRequest(0, (), (1,))


workloads = st.one_of(
    st.builds(shared_system_prompt, n=st.integers(1, 12), system_len=st.integers(1, 40),
              question_len=st.just((1, 20)), output_len=st.just((1, 20)),
              seed=st.integers(0, 9)),
    st.builds(multi_turn, conversations=st.integers(1, 4), turns=st.integers(1, 3),
              message_len=st.just((1, 12)), output_len=st.just((1, 12)),
              system_len=st.integers(0, 10), seed=st.integers(0, 9)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=workloads, p=st.sampled_from([1, 2, 4, 16]), pages=st.integers(12, 40),
       max_running=st.integers(1, 6))
def test_random_runs_keep_every_slot_accounted_for(reqs, p, pages, max_running):
    """Integrity checks after every step; the split always sums to the pool; at the end
    nothing runs and every slot is free or evictable; disabling the cache changes no
    request's outcome, only what is reused."""
    size = pages * 16
    run = serve(reqs, size=size, page_size=p, max_running=max_running, check=True)
    for s in run.steps:
        assert s.free + s.running + s.protected + s.evictable == size
        assert min(s.free, s.running, s.protected, s.evictable) >= 0
    last = run.steps[-1]
    assert last.finished_reqs == len(reqs) and last.running == last.protected == 0
    assert all(h % p == 0 and h < n for h, n in zip(run.hit_lens, run.prompt_lens, strict=True))
    assert sum(s.computed + s.reused for s in run.steps) == run.prompt_tokens
    plain = serve(reqs, size=size, page_size=p, max_running=max_running, radix=False)
    assert plain.reused_tokens == 0 and plain.steps[-1].free == size
