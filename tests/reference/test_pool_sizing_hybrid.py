"""Hybrid pool sizing: SGLang's own sizing code against :func:`pagedkv.sizing.plan_pool`.

Two families, 200+ random single-rank starts each, as in ``test_pool_sizing.py`` (free memory
before and after the weights in whole MiB, ``mem_fraction_static``, tp, page size, KV dtype),
plus each family's own flags:

- sliding-window hybrids (gpt-oss): ``--swa-full-tokens-ratio``, ``--max-running-requests``,
  ``--disable-radix-cache`` and ``--chunked-prefill-size`` (which decide between
  ``HybridSWAPoolConfigurator`` and ``SWARequestCapPoolConfigurator``) and
  ``--max-total-tokens``;
- linear-attention hybrids (Qwen3-Next): ``--mamba-full-memory-ratio``,
  ``--max-mamba-cache-size``, ``--max-running-requests``, ``--disable-radix-cache``,
  ``--disable-overlap-schedule`` (with the radix cache, 0.5.23 resolves
  ``--mamba-radix-cache-strategy auto`` from it and the page size, by its own
  ``_mamba_radix_cache_resolution``, run before its sizing: the track slots each request
  holds) and ``--max-total-tokens``.

Compared: the configurator SGLang picks (0.5.9 has none), its bytes per token, the context
length, the full and SWA token counts, the state slots, ``max_running_requests``, the request
table's rows and every line logged from sizing to the pools (the configurator's, SGLang's
warnings, the pools' own allocation lines), or the start-up error's first words. SGLang's side
is the installed release's own code: 0.5.23's configurators (:mod:`pools_sglang`), 0.5.9's
``ModelRunner.init_memory_pool`` (:mod:`pools_sglang_0509`, where ``--chunked-prefill-size``
does not enter the sizing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

if sgl_boot.VERSION == "0.5.9":
    import pools_sglang_0509 as pools_sglang
else:
    import pools_sglang

from pagedkv.configs.model_presets import MODEL_PRESETS, load_model  # noqa: E402
from pagedkv.errors import ConfigError, NotEnoughMemoryError  # noqa: E402
from pagedkv.gpus import GPU_PRESETS  # noqa: E402
from pagedkv.sizing import plan_pool  # noqa: E402
from pagedkv.units import GiB, MiB  # noqa: E402

PRESETS = Path(__file__).parents[2] / "pagedkv" / "presets" / "models"
FAMILIES: dict[str, list[str]] = {"swa": [], "linear": []}
for _name in MODEL_PRESETS:
    _family = load_model(_name).family
    if _family in FAMILIES:
        FAMILIES[_family].append(_name)
KV_DTYPES = ("bf16", "fp8_e4m3", "fp8_e5m2")
CARDS_MIB = sorted({g.memory_mib for g in GPU_PRESETS.values()})
CASES_PER_FAMILY = 200
OLD = sgl_boot.VERSION == "0.5.9"


def sglang_config(name: str) -> dict[str, Any]:
    """The preset's config as SGLang reads it here: gpt-oss's mxfp4 weight format is refused
    on a machine without CUDA/ROCm, and does not enter the KV sizing, so it is dropped."""
    config = json.loads((PRESETS / f"{name}.json").read_text())
    config.pop("quantization_config", None)
    return pools_sglang.readable_config(config) if OLD else config


def make_case(family: str, seed: int) -> dict[str, Any]:
    """A random single-rank start of a hybrid preset, with the family's flags."""
    rng = np.random.default_rng([11 + list(FAMILIES).index(family), seed])
    name = str(rng.choice(FAMILIES[family]))
    spec = load_model(name)
    tps = [t for t in (1, 2, 4, 8, 16) if spec.num_attention_heads % t == 0
           and not (spec.num_key_value_heads % t and t % spec.num_key_value_heads)]
    if family == "linear":
        text = spec.config
        tps = [t for t in tps if not (text["linear_num_key_heads"] % t
                                      or text["linear_num_value_heads"] % t)]
    card = int(rng.choice(CARDS_MIB)) if rng.random() < 0.5 else int(rng.integers(16, 200) * 1024)
    pre = card - int(rng.integers(300, 2500))
    post = int(pre * rng.uniform(0.2, 0.92))
    case: dict[str, Any] = {
        "model": name, "pre_mib": pre, "post_mib": post,
        "f": round(float(rng.uniform(0.55, 0.95)), 3), "tp": int(rng.choice(tps)),
        "page_size": int(rng.choice([1, 16, 32, 64, 128])), "kv": str(rng.choice(KV_DTYPES)),
        "max_running_requests": int(rng.integers(1, 3000)) if rng.random() < 0.4 else None,
        "max_total_tokens": int(rng.integers(1000, 3_000_000)) if rng.random() < 0.25 else None,
        "disable_radix_cache": bool(rng.random() < 0.5)}
    if family == "swa":
        # down to 1/2000: SWA pools too small for one window (SGLang's start-up error)
        case["swa_full_tokens_ratio"] = (round(float(10 ** rng.uniform(-3.3, 0)), 5)
                                         if rng.random() < 0.5 else None)
        case["chunked_prefill_size"] = int(rng.choice([-1, 2048, 4096, 8192, 16384]))
    else:
        case["mamba_full_memory_ratio"] = (round(float(rng.uniform(0.05, 4.0)), 3)
                                           if rng.random() < 0.4 else None)
        case["max_mamba_cache_size"] = int(rng.integers(1, 3000)) if rng.random() < 0.25 else None
        case["disable_overlap_schedule"] = bool(rng.random() < 0.3)
    return case


FLAGS = ("max_running_requests", "max_total_tokens", "swa_full_tokens_ratio",
         "chunked_prefill_size", "mamba_full_memory_ratio", "max_mamba_cache_size")


def sglang_side(case: dict[str, Any]) -> list[Any]:
    # SGLang's request-capped SWA sizing reads this flag; pagedkv sizes with its default. A
    # value left behind by another test (the event-loop harness sets it per case) would make
    # the two sides disagree for a reason that is not in either's sizing.
    assert "SGLANG_SWA_EVICTION_INTERVAL" not in os.environ, os.environ["SGLANG_SWA_EVICTION_INTERVAL"]
    flags = {k: case[k] for k in FLAGS if case.get(k) is not None}
    for flag in ("disable_radix_cache", "disable_overlap_schedule"):
        if case.get(flag):
            flags[flag] = True
    spec = load_model(case["model"])
    config = sglang_config(case["model"])
    kv = "bf16" if case["kv"] == "bf16" else case["kv"]  # gpt-oss names no dtype: bf16 named
    out = pools_sglang.pool_sizes(
        config, pre_gib=case["pre_mib"] / 1024, post_gib=case["post_mib"] / 1024,
        mem_fraction_static=case["f"], tp=case["tp"], page_size=case["page_size"],
        kv_cache_dtype=kv, sliding_window_size=spec.sliding_window, **flags)
    head = [out.get("configurator"), out["cell_size"], out["context_len"]]
    if "error" in out:
        return [*head, out["error"]]
    return [*head, out["max_total_num_tokens"], out["swa_max_total_num_tokens"],
            out["max_mamba_cache_size"], out["max_running_requests"], out["req_to_token_size"],
            out["log_lines"]]


def pagedkv_side(case: dict[str, Any]) -> list[Any]:
    spec = load_model(case["model"])
    kv, tp = case["kv"], case["tp"]
    ratio = case.get("swa_full_tokens_ratio") or 0.8
    cell: float = (spec.full_cell_size(kv, tp) + ratio * spec.swa_cell_size(kv, tp)
                   if spec.family == "swa" and not OLD else spec.cell_size(kv, tp))
    configurator: str | None = None if OLD else "DefaultPoolConfigurator"
    if spec.family == "swa" and not OLD:
        capped = (case["max_running_requests"] is not None and case["disable_radix_cache"]
                  and case["chunked_prefill_size"] > 0)
        configurator = "SWARequestCapPoolConfigurator" if capped else "HybridSWAPoolConfigurator"
    head = [configurator, cell, spec.context_len]
    try:
        plan = plan_pool(
            spec, pre_free_bytes=case["pre_mib"] * MiB, post_free_bytes=case["post_mib"] * MiB,
            mem_fraction_static=case["f"], tp=tp, page_size=case["page_size"],
            kv_cache_dtype=kv, max_total_tokens=case["max_total_tokens"],
            sglang_version=sgl_boot.VERSION,
            max_running_requests=case["max_running_requests"],
            disable_radix_cache=case["disable_radix_cache"],
            **{k: case[k] for k in ("swa_full_tokens_ratio", "chunked_prefill_size",
                                    "mamba_full_memory_ratio", "max_mamba_cache_size",
                                    "disable_overlap_schedule")
               if k in case})
    except NotEnoughMemoryError as exc:
        return [*head, str(exc).split(":")[0].split(".")[0]]
    assert plan.configurator == (configurator or "")  # 0.5.9: none
    return [*head, plan.max_total_num_tokens, plan.swa_max_total_num_tokens,
            plan.mamba_slots or None, plan.max_running_requests, plan.req_to_token_pool_size,
            plan.pool_log_lines()]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_hybrid_pool_sizes_equal_sglang_own(family: str) -> None:
    if not FAMILIES[family]:
        pytest.skip(f"no preset of the {family} family")
    compare.compare_seeds(f"pool sizing ({family})", range(CASES_PER_FAMILY),
                          lambda seed: make_case(family, seed), sglang_side, pagedkv_side)


@pytest.mark.skipif(OLD, reason="0.5.9 resolves auto to no_buffer: no track interval check")
@pytest.mark.parametrize("disable_overlap_schedule", [False, True])
@pytest.mark.parametrize("disable_radix_cache", [False, True])
def test_extra_buffer_page_check_equals_sglang_own(disable_radix_cache: bool,
                                                   disable_overlap_schedule: bool) -> None:
    """``mamba_track_interval (256) % page_size == 0``, asserted by SGLang's
    ``validate_mamba_extra_buffer`` when ``auto`` resolves to ``extra_buffer``: pagedkv refuses
    (a ConfigError naming the interval) exactly the starts SGLang refuses."""
    config = sglang_config("qwen3-next-80b-a3b")
    flags = {k: True for k, on in (("disable_radix_cache", disable_radix_cache),
                                   ("disable_overlap_schedule", disable_overlap_schedule)) if on}
    refused: list[bool] = []
    for page_size in (1, 2, 3, 16, 48, 64, 96, 128, 200, 256, 384, 512, 1024):
        ours = pools_sglang.extra_buffer_start_check(config, page_size=page_size, **flags)
        try:
            plan_pool("qwen3-next-80b-a3b", pre_free_bytes=140 * GiB, post_free_bytes=100 * GiB,
                      mem_fraction_static=0.85, tp=1, page_size=page_size, **flags)
            theirs = None
        except ConfigError as exc:
            assert "mamba_track_interval=256" in str(exc)
            theirs = "AssertionError"
        compare.same("extra_buffer start check", ours, theirs, f"page_size={page_size}, {flags}")
        refused.append(ours is not None)
    # SGLang refuses 3, 48, 96, 200, 384, 512 and 1024 exactly when extra_buffer is resolved
    assert sum(refused) == (0 if disable_radix_cache else 7)


@pytest.mark.skipif(not OLD, reason="0.5.23 refuses before building the pools (its own error)")
@pytest.mark.parametrize("disable_radix_cache", [False, True])
def test_no_state_slot_is_0509s_worker_assertion(disable_radix_cache: bool) -> None:
    # 100 MiB of budget: the state share (0.9 / 1.9 of it) holds no 74 MiB slot, so 0.5.9
    # builds a pool of 0 slots and 0 request rows, and TpModelWorker asserts.
    case = {"model": "qwen3-next-80b-a3b", "pre_mib": 10000, "post_mib": 1100, "f": 0.9,
            "tp": 1, "page_size": 1, "kv": "bf16", "max_running_requests": None,
            "max_total_tokens": None, "disable_radix_cache": disable_radix_cache,
            "mamba_full_memory_ratio": None, "max_mamba_cache_size": None}
    ours = sglang_side(case)
    assert ours[-1] == "max_running_request is zero"
    compare.same("pool sizing (linear)", ours, pagedkv_side(case))


#: The starts whose answers tests/test_sizing_0509.py holds as literals (79 GiB free before
#: the weights, 40 GiB after, f 0.85): (case, SGLang 0.5.9's full tokens, SWA tokens, state
#: slots, max_running_requests, request rows).
LITERALS_0509 = [
    ({"model": "gpt-oss-20b", "tp": 1, "max_total_tokens": 100_000, "swa_full_tokens_ratio": None,
      "chunked_prefill_size": -1}, (111_111, 88_888, None, 2402, 2402)),
    ({"model": "qwen3-next-80b-a3b", "tp": 4, "max_total_tokens": None,
      "mamba_full_memory_ratio": None, "max_mamba_cache_size": None},
     (1_294_932, None, 741, 247, 247)),
]


@pytest.mark.skipif(not OLD, reason="SGLang 0.5.9's answers")
@pytest.mark.parametrize(("start", "answer"), LITERALS_0509)
def test_0509_literals_are_sglangs_answers(start: dict[str, Any], answer: tuple) -> None:
    case = {"pre_mib": 79 * 1024, "post_mib": 40 * 1024, "f": 0.85, "page_size": 1,
            "kv": "bf16", "max_running_requests": None, "disable_radix_cache": False, **start}
    ours = sglang_side(case)
    assert tuple(ours[3:8]) == answer
    compare.same("pool sizing (directed)", ours, pagedkv_side(case))
