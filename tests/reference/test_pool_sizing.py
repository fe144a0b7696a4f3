"""KV-pool sizing: SGLang's own sizing code against :func:`pagedkv.sizing.plan_pool`.

Every case is one model preset on one rank: free memory before and after the weights load
(whole MiB, as a GPU reports them), ``mem_fraction_static``, tensor-parallel size, page size,
KV dtype and, in some cases, ``--max-running-requests`` and ``--max-total-tokens``. SGLang's
side runs the installed release's own sizing and builds the pools on the meta device: 0.5.23's
``KVCacheConfigurator`` (:mod:`pools_sglang`), 0.5.9's ``ModelRunner.init_memory_pool``
(:mod:`pools_sglang_0509`); pagedkv's plans the pool with ``sglang_version`` set to that
release. Compared: the configurator SGLang picks (0.5.23: always the one-pool
``DefaultPoolConfigurator`` for these models; 0.5.9 has none), bytes per token, context
length, ``max_total_num_tokens``, ``max_running_requests``, the request table's rows and
the log lines (the allocation line with its K/V or latent sizes, and the warning a cap above
the profiled pool gets), or the start-up error. The families: dense attention (MHA/GQA),
mixture-of-experts models with dense attention (their weights differ, their KV does not),
multi-head latent attention, and sliding-window hybrids (gpt-oss, Llama 4 Scout) under
``--disable-hybrid-swa-memory``.
"""

from __future__ import annotations

import json
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

from pagedkv.configs.model_config import ModelSpec  # noqa: E402
from pagedkv.configs.model_presets import MODEL_PRESETS, load_model  # noqa: E402
from pagedkv.errors import ConfigError, NotEnoughMemoryError  # noqa: E402
from pagedkv.gpus import GPU_PRESETS  # noqa: E402
from pagedkv.releases import as_release  # noqa: E402
from pagedkv.sizing import plan_pool  # noqa: E402
from pagedkv.units import MiB  # noqa: E402

PRESETS = Path(__file__).parents[2] / "pagedkv" / "presets" / "models"
#: Sliding-window hybrids sized under --disable-hybrid-swa-memory (one full-length pool for
#: every layer): gpt-oss from configs/ (see configs/README.md), Llama 4 Scout's preset.
SWA_DISABLED = {"gpt-oss-20b": Path(__file__).parent / "configs" / "gpt-oss-20b.json",
                "llama-4-scout": PRESETS / "llama-4-scout.json"}
FAMILIES: dict[str, list[str]] = {"dense": [], "moe": [], "mla": [],
                                  "swa-disabled": list(SWA_DISABLED)}
for _name in MODEL_PRESETS:
    _spec = load_model(_name)
    if _spec.is_hybrid or _spec.index_head_dim:  # own pools: test_pool_sizing_hybrid.py,
        continue  # DeepSeek V3.2's indexer: test_dsa_sglang.py
    FAMILIES["mla" if _spec.is_mla else "moe" if _spec.is_moe else "dense"].append(_name)
KV_DTYPES = {"bf16": "auto", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}


def sglang_kv_dtype(case: dict[str, Any]) -> str:
    """``--kv-cache-dtype`` for SGLang: ``auto`` (the model's bf16) for pagedkv's bf16, except
    for the sliding-window hybrids: gpt-oss's config names no dtype (SGLang's gpt-oss hook
    serves it in bf16, and hooks do not run here), so bf16 is named (Llama 4's is bf16)."""
    if case["kv"] == "bf16" and case["model"] in SWA_DISABLED:
        return "bf16"
    return KV_DTYPES[case["kv"]]


def config_path(name: str) -> Path:
    return SWA_DISABLED.get(name) or PRESETS / f"{name}.json"


def config_of(case: dict[str, Any]) -> dict[str, Any]:
    """The case's config.json; with ``head_dim`` written in where the case says so (a
    Mistral/Mixtral config mended as 0.5.9 needs it: ``Release.null_head_dim_sized``)."""
    config = json.loads(config_path(case["model"]).read_text())
    if case.get("head_dim_added"):
        config["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
    return config


def spec_of(name: str, case: dict[str, Any] | None = None):
    if case and case.get("head_dim_added"):
        return ModelSpec.from_config(config_of(case), name=name)
    return load_model(config_path(name), disable_hybrid_swa_memory=name in SWA_DISABLED)
CARDS_MIB = sorted({g.memory_mib for g in GPU_PRESETS.values()})
CASES_PER_FAMILY = 200


def make_case(family: str, seed: int) -> dict[str, Any]:
    """A random single-rank start: the preset, its memory readings (MiB) and flags."""
    rng = np.random.default_rng([list(FAMILIES).index(family), seed])
    name = str(rng.choice(FAMILIES[family]))
    spec = spec_of(name)
    tps = [t for t in (1, 2, 4, 8, 16) if spec.num_attention_heads % t == 0
           and (spec.is_mla or not (spec.num_key_value_heads % t and t % spec.num_key_value_heads))]
    card = int(rng.choice(CARDS_MIB)) if rng.random() < 0.5 else int(rng.integers(16, 200) * 1024)
    pre = card - int(rng.integers(300, 2500))
    post = int(pre * rng.uniform(0.05, 0.9))
    case = {"model": name, "pre_mib": pre, "post_mib": post,
            "f": round(float(rng.uniform(0.55, 0.95)), 3), "tp": int(rng.choice(tps)),
            "page_size": int(rng.choice([1, 1, 16, 32, 64, 128])),
            "kv": str(rng.choice(list(KV_DTYPES))), "max_running_requests": None,
            "max_total_tokens": None}
    if rng.random() < 0.25:
        case["max_running_requests"] = int(rng.integers(1, 5000))
    if rng.random() < 0.25:
        case["max_total_tokens"] = int(rng.integers(1000, 2_000_000))
    if spec.is_multimodal:  # served text-only unless --enable-multimodal
        case["enable_multimodal"] = bool(rng.random() < 0.5)
    if sgl_boot.VERSION == "0.5.9" and spec.head_dim_left_none:
        case["head_dim_added"] = bool(rng.random() < 0.5)  # else 0.5.9's TypeError
    return case


def sglang_side(case: dict[str, Any]) -> list[Any]:
    flags = {k: case[k] for k in ("max_running_requests", "max_total_tokens") if case[k]}
    if case.get("enable_multimodal"):
        flags["enable_multimodal"] = True
    if case["model"] in SWA_DISABLED:
        flags["disable_hybrid_swa_memory"] = True
    config = config_of(case)
    if case["model"] in SWA_DISABLED:
        # SGLang registers the mxfp4 weight format only on CUDA/ROCm machines, so ModelConfig
        # refuses it here; the weights' format does not enter the KV pool's sizing.
        config.pop("quantization_config", None)
    if sgl_boot.VERSION == "0.5.9":
        config = pools_sglang.readable_config(config)
    out = pools_sglang.pool_sizes(
        config, pre_gib=case["pre_mib"] / 1024, post_gib=case["post_mib"] / 1024,
        mem_fraction_static=case["f"], tp=case["tp"], page_size=case["page_size"],
        kv_cache_dtype=sglang_kv_dtype(case), **flags)
    head = [out.get("configurator"), out["cell_size"], out["context_len"]]
    if "error" in out:
        return [*head, "TypeError" if out["error"] == "TypeError" else "error"]
    return [*head, out["max_total_num_tokens"], out["max_running_requests"],
            out["req_to_token_size"], out["log_lines"]]


#: The configurator SGLang picks for a one-pool model (0.5.9 sizes without one).
CONFIGURATOR = None if sgl_boot.VERSION == "0.5.9" else "DefaultPoolConfigurator"


def pagedkv_side(case: dict[str, Any]) -> list[Any]:
    spec = spec_of(case["model"], case)
    cell = spec.cell_size(case["kv"], case["tp"])
    context = spec.sglang_context_len(as_release(sgl_boot.VERSION))
    try:
        plan = plan_pool(spec, pre_free_bytes=case["pre_mib"] * MiB,
                         post_free_bytes=case["post_mib"] * MiB,
                         mem_fraction_static=case["f"], tp=case["tp"],
                         page_size=case["page_size"], kv_cache_dtype=case["kv"],
                         max_total_tokens=case["max_total_tokens"],
                         max_running_requests=case["max_running_requests"],
                         enable_multimodal=bool(case.get("enable_multimodal")),
                         sglang_version=sgl_boot.VERSION)
    except NotEnoughMemoryError:
        return [CONFIGURATOR, cell, context, "error"]
    except ConfigError as exc:  # SGLang 0.5.9's TypeError on a config without head_dim
        assert "TypeError" in str(exc)
        return [CONFIGURATOR, None, context, "TypeError"]
    # SGLang's lines from profiling to the pools: its warnings (a cap above the profiled pool,
    # a --max-running-requests above half the pool) and the allocation line.
    lines = plan.pool_log_lines()
    return [plan.configurator or None, plan.cell_size, plan.context_len, plan.max_total_num_tokens,
            plan.max_running_requests, plan.req_to_token_pool_size, lines]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pool_sizes_equal_sglang_own(family: str) -> None:
    if not FAMILIES[family]:
        pytest.skip(f"no preset of the {family} family")
    compare.compare_seeds(f"pool sizing ({family})", range(CASES_PER_FAMILY),
                          lambda seed: make_case(family, seed), sglang_side, pagedkv_side)


#: The starts whose answers tests/test_sizing_0509.py holds as literals: (case, SGLang 0.5.9's
#: context length, max_total_num_tokens, max_running_requests, request rows), or "TypeError".
LITERALS_0509 = [
    ({"model": "qwen3-30b-a3b", "pre_mib": 18257, "post_mib": 11057, "f": 0.822, "tp": 2,
      "page_size": 16, "kv": "fp8_e4m3", "max_running_requests": None,
      "max_total_tokens": 271_796}, (40960, 271_792, 4096, 4096)),
    ({"model": "qwen3-235b-a22b", "pre_mib": 86227, "post_mib": 32613, "f": 0.778, "tp": 16,
      "page_size": 128, "kv": "bf16", "max_running_requests": None, "max_total_tokens": None},
     (40960, 293_376, 3668, 3668)),
    ({"model": "gemma-3-27b", "pre_mib": 81000, "post_mib": 30000, "f": 0.85, "tp": 1,
      "page_size": 1, "kv": "bf16", "max_running_requests": None, "max_total_tokens": None},
     (1_048_576,)),
    ({"model": "gemma-3-27b", "pre_mib": 79 * 1024, "post_mib": 40 * 1024, "f": 0.85, "tp": 1,
      "page_size": 1, "kv": "bf16", "max_running_requests": None, "max_total_tokens": None,
      "enable_multimodal": True}, (1_048_576, 59_510, 2048, 2048)),
    ({"model": "mixtral-8x7b", "pre_mib": 81000, "post_mib": 30000, "f": 0.85, "tp": 2,
      "page_size": 1, "kv": "bf16", "max_running_requests": None, "max_total_tokens": None},
     "TypeError"),
]


@pytest.mark.skipif(sgl_boot.VERSION != "0.5.9", reason="SGLang 0.5.9's answers")
@pytest.mark.parametrize(("case", "answer"), LITERALS_0509)
def test_0509_literals_are_sglangs_answers(case: dict[str, Any], answer: Any) -> None:
    ours = sglang_side(case)
    if answer == "TypeError":
        assert ours[-1] == "TypeError"
    else:
        got = (ours[2], *ours[3:6]) if len(answer) > 1 else (ours[2],)
        assert got == answer
    compare.same("pool sizing (directed)", ours, pagedkv_side(case))
