"""validate_sizes, validate_requests and default_max_running_requests alone: SGLang's arrival
checks and clamps, with hand-worked values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.errors import ConfigError
from pagedkv.managers.config import Policy, SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.scheduler_components import (
    default_max_running_requests,
    validate_requests,
    validate_sizes,
)
from pagedkv.managers.scheduler_components.request_validator import _check_each, _clamp_all
from pagedkv.sizing import max_req_input_len
from pagedkv.workloads.synthetic import RequestSpec


def check(specs: list[RequestSpec], release: str = "0.5.23", radix: bool = True,
          **cfg: object) -> list[Req]:
    """``specs`` validated on a 64-slot pool of pages of 4, no context length."""
    reqs = [Req.from_spec(i, s) for i, s in enumerate(specs)]
    validate_requests(reqs, config=SchedulerConfig(sglang_version=release, **cfg), page_size=4,
                      max_total_num_tokens=64, context_len=None, radix_cache=radix)
    return reqs


def test_sizes_pass_through_and_bad_ones_name_the_parameter() -> None:
    cfg = SchedulerConfig(chunked_prefill_size=8)
    assert validate_sizes(4, 64, cfg, None) == (4, 64, None)
    assert validate_sizes(4, 64, cfg, 512) == (4, 64, 512)
    for args, name in [((4, 66, cfg, None), "max_total_num_tokens"), ((0, 64, cfg, None), "page_size"),
                       ((16, 64, cfg, None), "chunked_prefill_size"),
                       ((4, 64, cfg, 0), "context_len"), ((4, 2, cfg, None), "max_total_num_tokens"),
                       ((4, math.nan, cfg, None), "max_total_num_tokens")]:
        with pytest.raises(ConfigError, match=name):
            validate_sizes(*args)


def test_max_new_tokens_is_clamped_as_each_release_clamps_it() -> None:
    # max_req_len = min(64 - 1, 64 - 1) = 63: cap = 63 - 10 - 1 = 52; 0.5.23 also
    # 64 - ceil_to_page(10) - 4 - 1 = 47
    assert check([RequestSpec(10, 100, 100)])[0].max_new_tokens == 47
    assert check([RequestSpec(10, 100, 100)], "0.5.9")[0].max_new_tokens == 52
    assert check([RequestSpec(10, 5, 5)])[0].max_new_tokens == 5  # below the cap: kept


def test_a_prompt_too_long_and_a_bad_follows_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"request 0 prompt_len.*max_req_input_len=58"):
        check([RequestSpec(58, 1, 1)])
    check([RequestSpec(57, 1, 1)])
    with pytest.raises(ConfigError, match="request 1 follows"):
        check([RequestSpec(5, 1, 1), RequestSpec(5, 1, 1, follows=1)])


def test_ignore_eos_with_the_radix_cache_off_must_pass_sglangs_worst_case_test() -> None:
    # 0.5.23: 64 - ceil_to_page(40) - 4 (extra page) - 16 = 4 > 1 passes; 20 -> clamped to
    # 64 - 40 - 4 - 1 = 19: slack 64 - 40 - 4 - 19 = 1 refused
    check([RequestSpec(40, 16, 16, ignore_eos=True)], radix=False)
    with pytest.raises(ConfigError, match=r"\(ignore_eos\)"):
        check([RequestSpec(40, 20, 20, ignore_eos=True)], radix=False)
    check([RequestSpec(40, 20, 20, ignore_eos=True)], radix=True)  # the tree can evict


def test_reserve_all_refuses_a_footprint_as_large_as_the_pool() -> None:
    with pytest.raises(ConfigError, match="reserve_all"):
        check([RequestSpec(30, 40, 40)], "0.5.9", policy=Policy.RESERVE_ALL)


def test_default_max_running_requests() -> None:
    assert default_max_running_requests(100_000, 4096) == 4096  # 12,500 clamped to 4,096
    assert default_max_running_requests(10_000, 8192) == 2048  # 625 raised to 2,048
    assert default_max_running_requests(1000, None) == 500  # tokens // 2
    assert default_max_running_requests(1, None) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 80), st.integers(1, 90), st.booleans()), min_size=1,
                max_size=12),
       st.sampled_from(["0.5.23", "0.5.9"]), st.booleans(), st.sampled_from(list(Policy)),
       st.sampled_from([1, 4, 16]))
def test_the_column_path_clamps_and_refuses_as_the_loop_does(
        rows: list[tuple[int, int, bool]], release: str, radix: bool, policy: Policy,
        page: int) -> None:
    """``_clamp_all`` (numpy) leaves every ``max_new_tokens`` as ``_check_each`` does, and
    declines (changing nothing) exactly when the loop refuses a request."""
    specs = [RequestSpec(p, min(o, 20), o, ignore_eos=eos) for p, o, eos in rows]
    cfg = SchedulerConfig(sglang_version=release, policy=policy)
    limit = max_req_input_len(128, 128)
    fast, slow = ([Req.from_spec(i, s) for i, s in enumerate(specs)] for _ in range(2))
    took = _clamp_all(fast, cfg, page, 128, limit, radix)
    try:
        _check_each(slow, cfg, page, 128, limit, radix)
        refused = False
    except ConfigError:
        refused = True
    assert took is not refused
    if took:
        assert [r.max_new_tokens for r in fast] == [r.max_new_tokens for r in slow]
    else:
        assert [r.max_new_tokens for r in fast] == [s.max_new_tokens for s in specs]
