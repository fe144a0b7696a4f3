"""Every preset's start-up, checked against SGLang 0.5.23's own sizing code.

``tests/preset_answers.json`` holds pagedkv's answer for every model preset on three GPU
presets and two tp sizes (``tests/test_preset_answers.py`` holds pagedkv to it). Here SGLang's
``ModelConfig``, ``KVCacheConfigurator`` and pools (``pools_sglang.py``) size the same starts:
free memory before loading is the card's, after loading the card's less the weights per GPU
(the meta-device count, or the given size of a quantized checkpoint), ``mem_fraction_static``
the one pagedkv resolves for the card (compared with SGLang's own resolution in
``test_server_args.py``). Compared: the table's numbers, and every line from sizing to the
pools (or the start-up error's first words).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sgl_boot

sgl_boot.require()
if sgl_boot.VERSION == "0.5.9":
    import pytest

    pytest.skip("preset answers are pagedkv's 0.5.23 sizing", allow_module_level=True)

import compare  # noqa: E402
import pools_sglang  # noqa: E402
import pytest  # noqa: E402

from pagedkv.configs.model_presets import load_model  # noqa: E402
from pagedkv.errors import NotEnoughMemoryError  # noqa: E402
from pagedkv.gpus import get_gpu  # noqa: E402
from pagedkv.server_args import default_mem_fraction_static  # noqa: E402
from pagedkv.sizing import plan_pool  # noqa: E402
from pagedkv.units import GiB  # noqa: E402

HERE = Path(__file__).parent
TABLE = json.loads((HERE.parent / "preset_answers.json").read_text())["cases"]
PRESETS = HERE.parents[1] / "pagedkv" / "presets" / "models"


def weights_bytes(case: dict[str, Any]) -> int:
    given = case["weights_gib_per_gpu"]
    return load_model(case["model"]).weight_bytes(case["tp"]) if given is None else int(given * GiB)


def mem_fraction(case: dict[str, Any]) -> float:
    gpu, spec = get_gpu(case["gpu"]), load_model(case["model"])
    return default_mem_fraction_static(gpu.memory_mib, case["tp"], mla=spec.is_mla,
                                       prefill_cuda_graph=gpu.platform == "cuda")


def sglang_side(case: dict[str, Any]) -> list[Any]:
    spec, gpu = load_model(case["model"]), get_gpu(case["gpu"])
    if weights_bytes(case) >= gpu.memory_bytes:
        return ["the weights do not fit: the load fails before sizing"]
    config = json.loads((PRESETS / f"{case['model']}.json").read_text())
    if (config.get("quantization_config") or {}).get("quant_method") == "mxfp4":
        config.pop("quantization_config")  # refused without CUDA/ROCm; no KV effect
    pre = gpu.memory_bytes / GiB
    out = pools_sglang.pool_sizes(
        config, pre_gib=pre, post_gib=(gpu.memory_bytes - weights_bytes(case)) / GiB,
        mem_fraction_static=mem_fraction(case), tp=case["tp"],
        kv_cache_dtype="auto" if config.get("torch_dtype") else "bf16",
        sliding_window_size=spec.sliding_window,
        chunked_prefill_size=plan_chunk(case))
    if "error" in out:
        return [out["error"]]
    return [out["max_total_num_tokens"], out["swa_max_total_num_tokens"],
            out["max_mamba_cache_size"], out["max_running_requests"], out["log_lines"]]


def plan_chunk(case: dict[str, Any]) -> int:
    from pagedkv.server_args import gpu_memory_defaults

    return gpu_memory_defaults(get_gpu(case["gpu"]).memory_mib, case["tp"])[0]


def pagedkv_side(case: dict[str, Any]) -> list[Any]:
    try:
        plan = plan_pool(case["model"], gpu=case["gpu"], tp=case["tp"],
                         weights_bytes=weights_bytes(case))
    except NotEnoughMemoryError as exc:
        if str(exc).startswith("Not enough memory: weights take"):
            return ["the weights do not fit: the load fails before sizing"]
        return [str(exc).split(":")[0].split(".")[0]]
    answer = case["answer"]
    assert plan.mem_fraction_static == answer["mem_fraction_static"]
    assert plan.mem_fraction_static == mem_fraction(case)
    return [answer["max_total_num_tokens"], answer["swa_max_total_num_tokens"],
            answer["max_mamba_cache_size"], answer["max_running_requests"],
            plan.pool_log_lines()]


#: DeepSeek V3.2 needs the server arguments SGLang's DSA passes resolve from the GPU (backends,
#: pages of 64): test_dsa_sglang.py resolves them with those passes and compares its pools.
SIZED_HERE = sorted({c["model"] for c in TABLE if not load_model(c["model"]).index_head_dim})


@pytest.mark.parametrize("model", SIZED_HERE)
def test_preset_answers_equal_sglang_own(model: str) -> None:
    cases = [c for c in TABLE if c["model"] == model]
    compare.compare_seeds("preset answers", range(len(cases)), lambda i: cases[i],
                          sglang_side, pagedkv_side)


@pytest.mark.parametrize("gpu", ["h100-sxm-80gb", "h200-141gb", "mi300x"])
def test_gemma3_with_enable_multimodal_equals_sglang_own(gpu: str) -> None:
    """--enable-multimodal: SGLang keeps Gemma 3's vision path, lowers the default fraction
    by its encoder (``adjust_mem_fraction_for_vlm``) and reserves 100 MiB of the KV budget."""
    from sglang.srt.arg_groups.memory_hook import adjust_mem_fraction_for_vlm

    card, spec = get_gpu(gpu), load_model("gemma-3-27b")
    config = json.loads((PRESETS / "gemma-3-27b.json").read_text())
    plan = plan_pool(spec, gpu=gpu, enable_multimodal=True)
    text_f = default_mem_fraction_static(card.memory_mib, prefill_cuda_graph=card.platform == "cuda")
    sglang_f = adjust_mem_fraction_for_vlm(
        text_f, pools_sglang.model_config(config, enable_multimodal=True), False, card.memory_mib)
    compare.same("preset answers", sglang_f, plan.mem_fraction_static, "mem_fraction_static")
    out = pools_sglang.pool_sizes(
        config, pre_gib=card.memory_bytes / GiB,
        post_gib=(card.memory_bytes - spec.weight_bytes()) / GiB, mem_fraction_static=sglang_f,
        chunked_prefill_size=plan_chunk({"gpu": gpu, "tp": 1}), enable_multimodal=True)
    compare.same("preset answers", [out["max_total_num_tokens"], out["max_running_requests"],
                                    out["log_lines"]],
                 [plan.max_total_num_tokens, plan.max_running_requests, plan.pool_log_lines()])
