"""DeepSeek V3.2's pool under SGLang 0.5.9 (which calls its sparse attention NSA): pagedkv's
``sglang_version="0.5.9"`` against 0.5.9's own server-argument methods and pool.

0.5.9 resolves the KV dtype and the prefill/decode backends in ``ServerArgs``
(``_set_default_nsa_kv_cache_dtype``, ``_set_default_nsa_backends``) from the GPU's compute
capability, which a CPU has not: they are called on a real ``ServerArgs`` with the capability's
major set to 9 (sm_90), and the arguments they resolve (attention backend ``nsa``, pages of 64:
``_handle_model_specific_adjustments``) go to 0.5.9's ``ModelRunner.init_memory_pool``, which
sizes the pool and builds its ``NSATokenToKVPool`` on the meta device
(``pools_sglang_0509.pool_sizes``). Cases: 3 GPUs x tp 16/32 x bf16/fp8_e4m3, 2 comparisons
each.
"""

from __future__ import annotations

import json
from pathlib import Path

import sgl_boot

sgl_boot.require()
if sgl_boot.VERSION != "0.5.9":
    import pytest

    pytest.skip("SGLang 0.5.9's NSA methods (test_dsa_sglang.py covers 0.5.23)",
                allow_module_level=True)

import compare  # noqa: E402
import pools_sglang_0509  # noqa: E402
import pytest  # noqa: E402

from pagedkv.configs.model_presets import load_model  # noqa: E402
from pagedkv.sizing import plan_pool  # noqa: E402
from pagedkv.units import GiB  # noqa: E402

HERE = Path(__file__).parent
CONFIG = json.loads((HERE.parents[1] / "pagedkv/presets/models/deepseek-v3.2.json").read_text())
AREA = "DSA pool 0.5.9"
def tp_32_weights(tp: int) -> int | None:
    """None (the preset's shipped weights), but at tp 32, which SGLang 0.5.23 cannot build and
    pagedkv refuses, the tp=1 bytes / 32 as an input (as ``tests/test_dsa_indexer.py``)."""
    return load_model("deepseek-v3.2").weight_bytes(1) // 32 if tp == 32 else None


CASES = [(gpu, tp, kv) for gpu in ("h100-sxm-80gb", "h200-141gb", "a100-80gb")
         for tp in (16, 32) for kv in ("bf16", "fp8_e4m3")]


def sglang_server_args(kv: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, str, str]:
    """0.5.9's KV dtype, (prefill, decode) backends and the backend line, on sm_90."""
    from sglang.srt import server_args as sa_mod

    lines: list[str] = []
    monkeypatch.setattr(sa_mod.logger, "warning", lambda msg, *a: lines.append(msg % a))
    sa = pools_sglang_0509.server_args(kv_cache_dtype=kv)
    sa._set_default_nsa_kv_cache_dtype(9)
    sa._set_default_nsa_backends(sa.kv_cache_dtype, 9)
    return sa.kv_cache_dtype, sa.nsa_prefill_backend, sa.nsa_decode_backend, lines[-1]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-tp{c[1]}-{c[2]}")
def test_pool_equals_sglang_0509_own_pool(case, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu, tp, kv = case
    plan = plan_pool("deepseek-v3.2", gpu=gpu, tp=tp, kv_cache_dtype=kv, sglang_version="0.5.9",
                     weights_bytes=tp_32_weights(tp))
    dtype, prefill, decode, line = sglang_server_args(kv, monkeypatch)
    compare.same(AREA, line, plan.server_args_lines[-1], "backend line")
    out = pools_sglang_0509.pool_sizes(
        CONFIG, pre_gib=plan.pre_free_bytes / GiB, post_gib=plan.post_free_bytes / GiB,
        mem_fraction_static=plan.mem_fraction_static, tp=tp, page_size=64,
        kv_cache_dtype=dtype, attention_backend="nsa", nsa_prefill_backend=prefill,
        nsa_decode_backend=decode)
    compare.same(AREA, [out["cell_size"], out["max_total_num_tokens"],
                        out["max_running_requests"], out["log_lines"]],
                 [plan.cell_size, plan.max_total_num_tokens, plan.max_running_requests,
                  plan.pool_log_lines()], "pool")
