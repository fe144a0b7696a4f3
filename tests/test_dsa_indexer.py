"""DeepSeek V3.2 (sparse attention, DSA) sized as SGLang 0.5.23 does: literal answers.

Every number below is worked by hand from SGLang 0.5.23's code (paths under
``python/sglang/srt/``):

- cell: ``model_executor/pool_configurator.py`` ``DefaultPoolConfigurator._compute_cell_size``
  = ``calculate_mla_kv_cache_dim * layers * kv_size`` + ``_compute_dsa_indexer_cell_size``.
  Latent (``mem_cache/kv_cache_configurator.py`` ``calculate_mla_kv_cache_dim``): bf16
  (512 + 64) * 2 = 1152 B; fp8_e4m3 with the flashmla_kv backends (sm_90) 512 + 512 // 128 * 4
  + 64 * 2 = 656 B. Index key: 128 + 128 // 128 * 4 = 132 B (uint8,
  ``DSATokenToKVPool.index_k_with_scale_buffer_dtype``), all 61 layers (no
  ``dsa_layer_skips_topk`` layer: ``index_topk_freq`` 1). Cell: 61 * (1152 + 132) = 78,324 B
  (bf16), 61 * (656 + 132) = 48,068 B (fp8).
- tokens: ``calculate_pool_sizes``: ``available // cell // 64 * 64`` (page size 64:
  ``arg_groups/model_overrides/deepseek_v2.py``), ``available = f * pre - weights``
  (``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``).
- "KV size": ``mem_cache/memory_pool.py`` ``DSATokenToKVPool.get_kv_size_bytes`` = latent
  buffers ``(size + 64) * latent * 61`` + index keys (``mem_cache/index_key_cache.py``
  ``IndexKeyCache.__init__``/``_buffer_shape``: ``(size + 65) // 64`` rows of 64 * 132 B per
  layer).
- ``max_running_requests``: ``kv_cache_configurator.py`` ``resolve_max_num_reqs``:
  ``min(tokens // 2, min(max(int(tokens / 163840 * 512), 2048), 4096))``.

Worked case, H200 (143,771 MiB), tp 16, bf16, 40.125 GiB of weights per GPU, f = 0.879:
``143771 * 2**20 * 0.879 - 40.125 * 2**30 = 89,430,995,313`` B; ``// 78324 = 1,141,808``;
pages of 64: 1,141,760 tokens. KV size: ``1,141,824 * 1152 * 61 + 17,841 * 8448 * 61 =
89,432,222,976`` B = 83.29 GB. Rows: ``int(1141760 / 163840 * 512) = 3568``.
"""

import pytest

from pagedkv import load_model
from pagedkv.configs.dsa_config import indexer_bytes_per_token, latent_bytes_per_token
from pagedkv.configs.model_config import ModelSpec
from pagedkv.dsa_indexer import index_cache_bytes
from pagedkv.entrypoints.cli import main
from pagedkv.errors import ConfigError, NotEnoughMemoryError
from pagedkv.sizing import plan_pool
from pagedkv.units import GiB

V32 = "deepseek-v3.2"


def test_bytes_per_token_and_per_page():
    assert indexer_bytes_per_token(128) == 132
    assert 64 * indexer_bytes_per_token(128) == 8448  # one page of one layer's index keys
    assert latent_bytes_per_token(512, 64, "bf16") == 1152
    assert latent_bytes_per_token(512, 64, "fp8_e4m3") == 656
    model = load_model(V32)
    assert (model.index_head_dim, model.family, model.architecture) == (
        128, "mla", "DeepseekV32ForCausalLM")
    assert model.cell_size("bf16") == 78_324 and model.cell_size("fp8_e4m3") == 48_068
    assert model.cell_size("bf16", tp=8) == 78_324  # MLA: not divided by tp
    assert load_model("deepseek-v3").index_head_dim == 0  # no index_topk: plain MLA
    assert index_cache_bytes(1_141_760, 64, 61, 128) == 17_841 * 8448 * 61


# (gpu, tp, kv dtype) -> (f, max_total_num_tokens, max_running_requests, KV size bytes, B_max)
# weights per GPU: 40.125 GiB at tp 16, 20.0625 GiB at tp 32 (642 GiB in all).
CASES = {
    ("h100-sxm-80gb", 16, "bf16"): (0.787, 309_184, 2048, 24_221_540_352, 1),
    ("h100-sxm-80gb", 16, "fp8_e4m3"): (0.787, 503_872, 2048, 24_223_195_648, 3),
    ("h100-sxm-80gb", 32, "bf16"): (0.761, 555_840, 2048, 43_540_624_896, 3),
    ("h100-sxm-80gb", 32, "fp8_e4m3"): (0.761, 905_728, 2830, 43_539_609_856, 5),
    ("h200-141gb", 16, "bf16"): (0.879, 1_141_760, 3568, 89_432_222_976, 6),
    ("h200-141gb", 16, "fp8_e4m3"): (0.879, 1_860_480, 4096, 89_432_628_992, 11),
    ("h200-141gb", 32, "bf16"): (0.865, 1_389_824, 4096, 108_861_587_712, 8),
    ("h200-141gb", 32, "fp8_e4m3"): (0.865, 2_264_704, 4096, 108_862_868_224, 13),
    ("a100-80gb", 16, "bf16"): (0.787, 313_024, 2048, 24_522_304_512, 1),
    ("a100-80gb", 16, "fp8_e4m3"): (0.787, 510_080, 2048, 24_521_601_792, 3),
    ("a100-80gb", 32, "bf16"): (0.762, 560_640, 2048, 43_916_580_096, 3),
    ("a100-80gb", 32, "fp8_e4m3"): (0.762, 913_536, 2854, 43_914_924_800, 5),
}


@pytest.mark.parametrize("case", sorted(CASES), ids=lambda c: f"{c[0]}-tp{c[1]}-{c[2]}")
def test_pool_as_sglang_0523_sizes_it(case):
    gpu, tp, kv = case
    f, tokens, running, kv_bytes, b_max = CASES[case]
    plan = plan_pool(V32, gpu=gpu, tp=tp, kv_cache_dtype=kv,
                     weights_bytes=int(642 * GiB / tp))
    assert (plan.mem_fraction_static, plan.max_total_num_tokens, plan.max_running_requests,
            plan.k_size_bytes, plan.v_size_bytes, plan.batch_cap, plan.page_size) == (
        f, tokens, running, kv_bytes, 0, b_max, 64)
    assert plan.cell_size == {"bf16": 78_324, "fp8_e4m3": 48_068}[kv]
    assert plan.indexer_cell_size == 61 * 132 == 8052
    dtype = {"bf16": "torch.bfloat16", "fp8_e4m3": "torch.float8_e4m3fn"}[kv]
    assert f"KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, KV size: " \
           f"{kv_bytes / GiB:.2f} GB" in plan.log_lines()


def test_start_up_lines_h200_tp16():
    plan = plan_pool(V32, gpu="h200-141gb", tp=16, weights_bytes=int(40.125 * GiB))
    assert plan.log_lines() == [
        "Use dsa attention backend for DeepSeek with DSA.",
        "Setting page size to 64 for DeepSeek DSA.",
        "Set DSA backends for bfloat16 KV Cache: prefill=flashmla_sparse, decode=fa3.",
        "Load weight begin. avail mem=140.40 GB",
        "Load weight end. type=DeepseekV32ForCausalLM, avail mem=100.28 GB, mem usage=40.12 GB.",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1141760, KV size: 83.29 GB",
        "max_total_num_tokens=1141760, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=3568, context_len=163840",
    ]
    assert plan.as_dict()["indexer_bytes_per_token"] == 8052


def test_0509_names_the_backend_nsa_and_sizes_the_same_cell():
    """0.5.9 ``server_args.py`` ``_handle_model_specific_adjustments`` /
    ``_set_default_nsa_backends`` (fp8: prefill flashmla_auto), ``model_runner_kv_cache_mixin``
    ``profile_max_num_token`` (the same 132 B per token and layer)."""
    plan = plan_pool(V32, gpu="h200-141gb", tp=16, kv_cache_dtype="fp8_e4m3",
                     weights_bytes=int(40.125 * GiB), sglang_version="0.5.9")
    assert plan.server_args_lines == (
        "Use nsa attention backend for DeepSeek with DSA.",
        "Setting page size to 64 for DeepSeek DSA.",
        "Set NSA backends for fp8_e4m3 KV Cache: prefill=flashmla_auto, decode=flashmla_kv.")
    # 0.5.9 profiles the fp8 latent as 576 B (get_cell_size_per_token) but its
    # NSATokenToKVPool stores 656 (calculate_mla_kv_cache_dim): 61 * (576 + 132) = 43,188
    assert (plan.cell_size, plan.page_size, plan.max_total_num_tokens) == (43_188, 64, 2_109_056)
    assert plan.k_size_bytes == (2_109_056 + 64) * 656 * 61 + (2_109_056 // 64 + 1) * 8448 * 61


def test_h100_tp8_has_no_room():
    with pytest.raises(NotEnoughMemoryError, match=r"^Not enough memory"):
        plan_pool(V32, gpu="h100-sxm-80gb", tp=8, weights_bytes=int(80.25 * GiB))


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--page-size", "16", "page_size=16 is invalid; valid: 64"),
    ("--kv-cache-dtype", "fp8_e5m2", "kv_cache_dtype='fp8_e5m2' is invalid; valid: bf16 or fp8_e4m3"),
    ("--kv-cache-dtype", "fp16", "kv_cache_dtype='fp16' is invalid"),
    ("--gpu", "mi300x", "gpu='mi300x' is invalid; valid: a CUDA GPU preset"),
])
def test_bad_input_exits_2_naming_it(flag, value, message, capsys):
    args = {"--gpu": "h200-141gb", "--page-size": "64", "--kv-cache-dtype": "bf16", flag: value}
    argv = ["size", "--model", V32, "--tp", "8", "--weights-gib", "80"]
    assert main([*argv, *(x for kv in args.items() for x in kv)]) == 2
    assert message in capsys.readouterr().err


def test_cli_prints_the_lines_and_the_indexer(capsys):
    assert main(["size", "--model", V32, "--gpu", "h200-141gb", "--tp", "8",
                 "--weights-gib", "80.25"]) == 0
    out = capsys.readouterr().out
    assert "Setting page size to 64 for DeepSeek DSA." in out
    assert "one index key of 132 B (fp8 key + fp32 scale)" in out
    assert "#tokens: 605184" in out


def _v32(**changes):
    config = dict(load_model(V32).config, **changes)
    return ModelSpec.from_config(config, name="v32-variant")


def test_config_fields_sglang_refuses_or_pagedkv_does_not_model():
    with pytest.raises(ConfigError, match="index_head_dim=64; SGLang's DSATokenToKVPool asserts"):
        _v32(index_head_dim=64)
    with pytest.raises(ConfigError, match="index_topk_freq=2 changes which layers keep index"):
        _v32(index_topk_freq=2)
    with pytest.raises(ConfigError, match="index_kpool=2"):
        _v32(index_kpool=2)
    # DeepseekV3ForCausalLM with index_topk is DSA too (is_deepseek_dsa); without it, MLA
    assert _v32(architectures=["DeepseekV3ForCausalLM"]).index_head_dim == 128
    assert _v32(architectures=None, model_type="deepseek_v32").cell_size() == 78_324
    no_topk = {k: v for k, v in load_model(V32).config.items() if k != "index_topk"}
    assert ModelSpec.from_config(no_topk).cell_size() == 61 * 1152


def test_simulate_runs_the_scheduler_on_pages_of_64():
    """The pool's pages are the ones SGLang forces: the scheduler allocates 64 at a time."""
    from pagedkv.entrypoints.simulation import simulated_engine

    engine = simulated_engine(model=V32, gpu="h200-141gb", tp=8, weights_bytes=int(80.25 * GiB))
    assert engine.meta is not None
    assert (engine.meta.page_size, engine.meta.max_total_num_tokens) == (64, 605_184)
    assert (engine.page_size, engine.meta.cell_size) == (64, 78_324)
