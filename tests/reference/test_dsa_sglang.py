"""DeepSeek V3.2's DSA pool: pagedkv against SGLang 0.5.23's own functions and pool.

SGLang's DSA server arguments resolve from the GPU (``torch.cuda.get_device_capability`` in
``arg_groups/overrides.py``), which a CPU has not, so the oracle cannot start the model as a
server would. Two tests close the gap. The first calls the pieces one by one, each the
function SGLang itself runs, with the runtime state they read replaced by what a CUDA sm_90
server with default flags holds (no disaggregation, no HiSparse, no context parallelism, no
draft worker):

- ``arg_groups/overrides.py`` ``_dsa_kv_cache_dtype_default`` and
  ``_dsa_split_backend_resolution`` (the device capability: (9, 0)): the KV dtype and the
  backends, and the line SGLang logs;
- ``mem_cache/kv_cache_configurator.py`` ``calculate_mla_kv_cache_dim`` with those backends;
- ``model_executor/pool_configurator.py``
  ``DefaultPoolConfigurator._compute_dsa_indexer_cell_size`` and ``calculate_pool_sizes``;
- ``mem_cache/index_key_cache.py`` ``IndexKeyCache`` built on the meta device (its real
  buffers' shapes and bytes);
- ``configs/model_config.py`` ``is_deepseek_dsa``, ``get_dsa_index_head_dim``,
  ``dsa_layer_skips_topk`` on the preset's config.

(there the bytes available for KV, ``f * pre - weights``, are pagedkv's; the weights are the
preset's own, SGLang 0.5.23's ``DeepseekV32ForCausalLM`` bytes per GPU shipped in
``sglang_weight_bytes.json``; at tp 32, where SGLang cannot build the fp8 checkpoint and
pagedkv refuses it (``test_sglang_weight_bytes.py``), the tp=1 bytes / 32 given as an input,
as ``tests/test_dsa_indexer.py`` gives it). The second passes
the server arguments those passes resolved (``attention_backend`` dsa, pages of 64, the split
backends) to SGLang's ``KVCacheConfigurator``, which sizes the pool from the free-memory
readings and builds its ``DSATokenToKVPool`` on the meta device (``pools_sglang.pool_sizes``).
Cases: the 12 of ``tests/test_dsa_indexer.py`` (3 GPUs x tp 16/32 x bf16/fp8_e4m3) and the
preset's row of ``preset_answers.json`` that has room (H200, tp 8): 5 + 1 comparisons each,
79 in all with the config's.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace as NS

import sgl_boot

sgl_boot.require()
if sgl_boot.VERSION == "0.5.9":
    import pytest

    pytest.skip("SGLang 0.5.23's DSA functions (0.5.9 names them NSA and resolves them in "
                "ServerArgs)", allow_module_level=True)

import compare  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from pagedkv.configs.model_presets import load_model  # noqa: E402
from pagedkv.sizing import plan_pool  # noqa: E402
from pagedkv.units import GiB  # noqa: E402

HERE = Path(__file__).parent
CONFIG = json.loads((HERE.parents[1] / "pagedkv/presets/models/deepseek-v3.2.json").read_text())
HF = NS(**CONFIG)
LAYERS = CONFIG["num_hidden_layers"]
TORCH_KV = {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}
AREA = "DSA pool"


@pytest.fixture
def sm90(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime state SGLang's DSA functions read, as a CUDA sm_90 server has it."""
    from sglang.srt.arg_groups import overrides
    from sglang.srt.layers.cp import utils as cp_utils
    from sglang.srt.mem_cache import kv_cache_configurator as kcc
    from sglang.srt.model_executor import pool_configurator as pc

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(overrides, "get_platform",
                        lambda: NS(is_npu=False, is_xpu=False, is_hip=False))
    monkeypatch.setattr(overrides, "model_config_of", lambda view: NS(hf_config=HF))
    memory = NS(enable_hisparse=False, enable_hierarchical_cache=False,
                enable_unified_cache_external_linker=False)
    monkeypatch.setattr(pc, "get_memory", lambda: memory)
    monkeypatch.setattr(kcc, "get_memory", lambda: memory)
    monkeypatch.setattr(kcc, "get_disagg", lambda: NS(disaggregation_mode="null"))
    monkeypatch.setattr(cp_utils, "get_parallel",
                        lambda: NS(enable_dsa_cache_layer_split=False, attn_cp_size=1))


def sglang_server_args(kv: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, str, list[str]]:
    """SGLang's KV dtype and (prefill, decode) backends for ``--kv-cache-dtype kv``, and the
    lines its two passes log."""
    from sglang.srt.arg_groups import overrides

    view = NS(kv_cache_dtype=kv, dsa_prefill_backend=None, dsa_decode_backend=None,
              enable_hisparse=False, dcp_size=1)
    lines: list[str] = []
    monkeypatch.setattr(overrides.logger, "warning", lambda msg, *a: lines.append(msg % a))
    view.kv_cache_dtype = overrides._dsa_kv_cache_dtype_default(view).get("kv_cache_dtype", kv)
    chosen = overrides._dsa_split_backend_resolution(view)
    return view.kv_cache_dtype, chosen["dsa_prefill_backend"], chosen["dsa_decode_backend"], lines


def sglang_pool(kv: str, available: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Cell, tokens and "KV size" bytes as SGLang's own functions give them."""
    from sglang.srt.mem_cache import kv_cache_configurator as kcc
    from sglang.srt.mem_cache.index_key_cache import IndexKeyCache
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool
    from sglang.srt.model_executor.pool_configurator import DefaultPoolConfigurator

    dtype, prefill, decode, lines = sglang_server_args(kv, monkeypatch)
    monkeypatch.setattr(kcc, "get_exec", lambda: NS(kernel=NS(dsa_prefill_backend=prefill,
                                                              dsa_decode_backend=decode)))
    model_config = NS(kv_lora_rank=CONFIG["kv_lora_rank"], hf_config=HF,
                      qk_rope_head_dim=CONFIG["qk_rope_head_dim"])
    dim = kcc.calculate_mla_kv_cache_dim(model_config=model_config,
                                         kv_cache_dtype=TORCH_KV[kv])
    kv_size = torch._utils._element_size(TORCH_KV[kv])  # fp8 is stored as uint8: 1 byte
    kvc = NS(model_config=model_config, server_args=NS(enable_hisparse=False),
             is_draft_worker=False, use_mla_backend=True, mambaish_config=None,
             layer_info=NS(start_layer=0, end_layer=LAYERS))
    indexer = DefaultPoolConfigurator._compute_dsa_indexer_cell_size(
        None, kvc=kvc, num_layers=LAYERS)
    cell = dim * LAYERS * kv_size + indexer  # _compute_cell_size's MLA branch, dcp 1
    page = 64  # deepseek_v2.py: 64 * index_kpool
    sizer = NS(_fixed_overhead_bytes=0, _cell_size=cell, _zero_kv_max_tokens=0)
    tokens = DefaultPoolConfigurator.calculate_pool_sizes(sizer, available, page)
    tokens = tokens.max_total_num_tokens
    pool = NS(page_size=page, index_kpool=1, index_head_dim=HF.index_head_dim,
              quant_block_size=DSATokenToKVPool.quant_block_size,
              index_k_with_scale_buffer_dtype=DSATokenToKVPool.index_k_with_scale_buffer_dtype,
              device="meta", layer_num=LAYERS, skip_topk_layers=[False] * LAYERS,
              custom_mem_pool=None,
              memory_saver_adapter=NS(region=lambda *a, **k: contextlib.nullcontext()))
    keys = IndexKeyCache(pool, tokens)  # index_buf_size = size (dcp 1)
    index_bytes = sum(b.numel() * b.element_size() for b in keys.buffer)
    latent_bytes = (tokens + page) * dim * kv_size * LAYERS  # MLATokenToKVPool._create_buffers
    return {"cell": cell, "tokens": tokens, "kv_size": latent_bytes + index_bytes,
            "dtype": dtype, "backend_line": lines[-1]}


def pagedkv_pool(plan) -> dict[str, object]:
    return {"cell": plan.cell_size, "tokens": plan.max_total_num_tokens,
            "kv_size": plan.k_size_bytes,
            "dtype": {"bf16": "bfloat16"}.get(plan.kv_cache_dtype, plan.kv_cache_dtype),
            "backend_line": plan.server_args_lines[-1]}


def test_config_reads_as_sglang_reads_it() -> None:
    from sglang.srt.configs import model_config as mc

    spec = load_model("deepseek-v3.2")
    compare.same(AREA, [mc.is_deepseek_dsa(HF), mc.get_dsa_index_head_dim(HF),
                        sum(mc.dsa_layer_skips_topk(HF, i) for i in range(LAYERS))],
                 [spec.index_head_dim > 0, spec.index_head_dim, 0], "DSA config")


def tp_32_weights(tp: int) -> int | None:
    """None (the preset's shipped weights), but at tp 32, which SGLang 0.5.23 cannot build and
    pagedkv refuses, the tp=1 bytes / 32 as an input."""
    return load_model("deepseek-v3.2").weight_bytes(1) // 32 if tp == 32 else None


CASES = [(gpu, tp, kv) for gpu in ("h100-sxm-80gb", "h200-141gb", "a100-80gb")
         for tp in (16, 32) for kv in ("bf16", "fp8_e4m3")]
TABLE = [c for c in json.loads((HERE.parent / "preset_answers.json").read_text())["cases"]
         if c["model"] == "deepseek-v3.2"]
CASES += [(c["gpu"], c["tp"], "bf16") for c in TABLE  # no room: shared with MLA, compared
          if c["tp"] not in (16, 32) and "error" not in c["answer"]]  # in test_pool_sizing.py


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-tp{c[1]}-{c[2]}")
def test_pool_equals_sglang_functions(case, sm90, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu, tp, kv = case
    plan = plan_pool("deepseek-v3.2", gpu=gpu, tp=tp, kv_cache_dtype=kv,
                     weights_bytes=tp_32_weights(tp))
    available = int(plan.post_free_bytes - plan.pre_free_bytes * (1 - plan.mem_fraction_static))
    ours = sglang_pool(kv, available, monkeypatch)
    theirs = pagedkv_pool(plan)
    for key in ours:
        compare.same(AREA, ours[key], theirs[key], key)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-tp{c[1]}-{c[2]}")
def test_pool_equals_sglang_own_pool(case, sm90, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: SGLang's ``KVCacheConfigurator`` sizes the pool and builds its
    ``DSATokenToKVPool`` on the meta device (``pools_sglang.pool_sizes``), with the server
    arguments its own DSA passes resolve for an sm_90 card (attention backend ``dsa``, pages of
    64, the split backends): tokens, request rows, cell and the pool's own log line."""
    import pools_sglang

    gpu, tp, kv = case
    plan = plan_pool("deepseek-v3.2", gpu=gpu, tp=tp, kv_cache_dtype=kv,
                     weights_bytes=tp_32_weights(tp))
    dtype, prefill, decode, _ = sglang_server_args(kv, monkeypatch)
    monkeypatch.undo()  # the pool is built under SGLang's own runtime context
    out = pools_sglang.pool_sizes(
        CONFIG, pre_gib=plan.pre_free_bytes / GiB, post_gib=plan.post_free_bytes / GiB,
        mem_fraction_static=plan.mem_fraction_static, tp=tp, page_size=64,
        kv_cache_dtype=dtype, attention_backend="dsa", dsa_prefill_backend=prefill,
        dsa_decode_backend=decode, chunked_prefill_size=plan.chunked_prefill_size)
    compare.same(AREA, [out["configurator"], out["cell_size"], out["max_total_num_tokens"],
                        out["max_running_requests"], out["log_lines"]],
                 [plan.configurator, plan.cell_size, plan.max_total_num_tokens,
                  plan.max_running_requests, plan.pool_log_lines()], "pool")
