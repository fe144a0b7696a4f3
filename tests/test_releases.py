"""The releases as data: each behaviour a field, documented, demonstrated, and the only place
that knows a release's name."""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedkv.errors import ConfigError
from pagedkv.lessons.versions import DEMOS, OLDEST, version_changes
from pagedkv.managers.config import VERSION_DIFFERENCES, SchedulerConfig
from pagedkv.releases import (
    BEHAVIOURS,
    DEFAULT_RELEASE,
    DEFAULT_SGLANG_VERSION,
    RELEASES,
    SGLANG_VERSIONS,
    Release,
    as_release,
    check_sglang_version,
    describe,
    differences,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_releases_and_the_default() -> None:
    assert SGLANG_VERSIONS == ("0.5.23", "0.5.9") and DEFAULT_SGLANG_VERSION == "0.5.23"
    assert all(r.name == name for name, r in RELEASES.items())
    assert DEFAULT_RELEASE is RELEASES["0.5.23"] and OLDEST is RELEASES["0.5.9"]
    assert as_release("0.5.9") is RELEASES["0.5.9"] and as_release(OLDEST) is OLDEST
    assert check_sglang_version("0.5.9") == "0.5.9"
    for bad in ("0.4", None, 0.59, "0.5.10"):
        with pytest.raises(ConfigError, match=r"sglang_version=.* is invalid; valid: one of "
                                              r"0\.5\.23, 0\.5\.9"):
            as_release(bad)
    with pytest.raises(ConfigError, match="free_order='fifo' is invalid"):
        replace(DEFAULT_RELEASE, free_order="fifo")


def test_every_field_says_what_where_and_why() -> None:
    for f in fields(Release):
        if f.name == "name":
            continue
        assert f.metadata["what"] and f.metadata["description"], f.name
        assert re.fullmatch(r"[\w/.]+\.py(: [\w.]+(, [\w.]+)*)?", f.metadata["source"]), f.name
        if f.type == "bool":  # a flag says what each answer means
            assert set(f.metadata["shows"]) == {False, True}, f.name


def test_the_rule_list_is_the_fields_that_differ() -> None:
    differ = [b for b in BEHAVIOURS if getattr(OLDEST, b) != getattr(DEFAULT_RELEASE, b)]
    assert differences() == VERSION_DIFFERENCES and len(VERSION_DIFFERENCES) == len(differ)
    assert len(differ) == len(BEHAVIOURS) == 48  # every field is a difference between the two
    assert VERSION_DIFFERENCES[0] == (
        "admission charge per request", "ceil_page(extend) + min(max_new, CLIP)",
        "ceil_page(extend) + min(max_new, CLIP) + page_size",
        "mem_cache/prefill_budget.py: PrefillBudget.reserve")
    assert describe(OLDEST, "free_order") == "sorted page ids (free)"
    assert describe(DEFAULT_RELEASE, "chunked_prefill_size_20_35_gib") == "4096"
    assert describe(OLDEST, "forced_page_sizes").startswith("flashmla: 64 -> 64; cutlass_mla: 128")
    assert differences(OLDEST, OLDEST) == ()
    assert len(version_changes()) == len(differ)


def test_tuple_rows_label_their_parts_and_the_dsa_rows_type_no_numbers() -> None:
    """A tuple whose positions mean different things is read through its ``parts`` key, like
    a flag through ``shows``; the DeepSeek V3.2 rows say their rule in words and names, so the
    bytes (chapter 5 computes them from the preset) cannot drift from what pagedkv sizes."""
    assert describe(DEFAULT_RELEASE, "dsa_attention_backend") == (
        "attention: dsa, fp8_e4m3 prefill: flashmla_kv")
    assert describe(OLDEST, "dsa_attention_backend") == (
        "attention: nsa, fp8_e4m3 prefill: flashmla_auto")
    assert describe(OLDEST, "cuda_graph_max_bs_20_35_gib") == "tp < 4: 24, tp >= 4: 80"
    for release in (OLDEST, DEFAULT_RELEASE):
        for field in ("dsa_attention_backend", "dsa_fp8_latent_profiled_as_stored",
                      "context_len_skips_layered_rope"):
            words = re.sub(r"\b(fp8_e4m3|fp8|float32|bf16)\b", "", describe(release, field))
            assert not re.search(r"\d", words), (release, field, words)


@pytest.mark.parametrize("behaviour", BEHAVIOURS)
def test_every_field_has_a_demonstration_that_it_alone_changes(behaviour: str) -> None:
    demo = DEMOS[behaviour]
    new = demo.run(DEFAULT_RELEASE)
    flipped = demo.run(replace(DEFAULT_RELEASE, **{behaviour: getattr(OLDEST, behaviour)}))
    assert flipped != new
    assert flipped == demo.run(OLDEST) or behaviour in {
        "touch_waiting_prefixes",  # 0.5.9 also evicts the whole amount asked: both go
        "req_pool_reuses_last_freed",  # 0.5.9 also has no padding row: other row numbers
        "attention_backends",  # 0.5.9 also forces cutlass_mla's page size
    }


def test_scheduler_config_takes_a_release_or_its_name() -> None:
    assert SchedulerConfig().release is DEFAULT_RELEASE
    cfg = SchedulerConfig(sglang_version="0.5.9")
    assert cfg.release is OLDEST and cfg.sglang_version == "0.5.9"
    assert SchedulerConfig(release="0.5.9").release is OLDEST
    assert replace(cfg, max_prefill_tokens=100).release is OLDEST  # kept through replace
    assert replace(cfg, sglang_version="0.5.23").release is DEFAULT_RELEASE
    assert SchedulerConfig.from_env({}, sglang_version="0.5.9").release is OLDEST
    with pytest.raises(ConfigError, match=r"sglang_version='0\.4' is invalid"):
        SchedulerConfig(sglang_version="0.4")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_scheduler_config_refuses_a_ratio_that_is_not_a_positive_number(value: float) -> None:
    # a NaN ratio would make every budget NaN, where `a > b` and `not a <= b` part ways
    with pytest.raises(ConfigError, match="init_new_token_ratio="):
        SchedulerConfig(init_new_token_ratio=value)
    with pytest.raises(ConfigError, match="schedule_conservativeness="):
        SchedulerConfig(schedule_conservativeness=value)


@given(st.integers(-10**12, 10**12),
       st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=False)))
def test_the_ignore_eos_check_is_the_same_in_both_forms(paged: int, room: float) -> None:
    # PrefillAdder.add_one_req_ignore_eos: 0.5.9 writes `paged > room`, 0.5.23
    # `not paged <= room`; for an int against any int or non-NaN float they agree, so pagedkv
    # keeps one (the budgets are never NaN: see the test above)
    assert (paged > room) == (not paged <= room)


_COMPARISONS = (
    re.compile(r"""(==|!=|\bin\b)\s*[(\[]?\s*["']\d+\.\d+\.\d+["']"""),  # x == "0.5.9"
    re.compile(r"""["']\d+\.\d+\.\d+["']\s*(==|!=|\bin\b)"""),
    re.compile(r"""version\w*\s*(==|!=|<=|>=|<|>)"""),  # sglang_version == ...
    re.compile(r"""[<>]=?\s*\(0,\s*\d+"""),  # release tuples: < (0, 5, ...)
    re.compile(r"""["']\d+\.\d+\.\d+["']\s*:"""),  # a table keyed by release name
    re.compile(r"""v0509|v0523"""),
)


def test_no_release_is_compared_outside_the_release_module() -> None:
    found = []
    for folder in ("pagedkv", "widgets", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.relative_to(ROOT).as_posix() == "pagedkv/releases.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#")[0]
                if any(p.search(code) for p in _COMPARISONS):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
