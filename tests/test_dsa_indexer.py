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

The weights are the preset's own: the bytes SGLang 0.5.23's ``DeepseekV32ForCausalLM``
allocates per GPU (``pagedkv/presets/models/sglang_weight_bytes.json``, recounted by
``tests/reference/test_sglang_weight_bytes.py``): 44,019,139,824 B at tp 16. SGLang 0.5.23
cannot build this fp8 checkpoint at tp 32 (its dense MLP's 576-wide shard is not a multiple of
the 128-wide fp8 block) and pagedkv refuses the preset's own weights there; the tp 32 cases
give the tp=1 bytes / 32 (674,030,369,424 // 32 = 21,063,449,044 B) as an input and check the
pool's arithmetic only.

Worked case, H200 (143,771 MiB), tp 16, bf16, 44,019,139,824 B of weights per GPU, f = 0.879:
``143771 * 2**20 * 0.879 - 44,019,139,824 = 88,494,347,040`` B; ``// 78324 = 1,129,849``;
pages of 64: 1,129,792 tokens. KV size: ``1,129,856 * 1152 * 61 + 17,654 * 8448 * 61 =
88,494,841,344`` B = 82.42 GB. Rows: ``int(1129792 / 163840 * 512) = 3530``.
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
# weights per GPU: the preset's own (see the module docstring).
CASES = {
    ("h100-sxm-80gb", 16, "bf16"): (0.787, 297_280, 2048, 23_289_171_456, 1),
    ("h100-sxm-80gb", 16, "fp8_e4m3"): (0.787, 484_416, 2048, 23_287_984_640, 2),
    ("h100-sxm-80gb", 32, "bf16"): (0.761, 561_984, 2048, 44_021_847_552, 3),
    ("h100-sxm-80gb", 32, "fp8_e4m3"): (0.761, 915_712, 2861, 44_019_520_768, 5),
    ("h200-141gb", 16, "bf16"): (0.879, 1_129_792, 3530, 88_494_841_344, 6),
    ("h200-141gb", 16, "fp8_e4m3"): (0.879, 1_841_024, 4096, 88_497_417_984, 11),
    ("h200-141gb", 32, "bf16"): (0.865, 1_395_968, 4096, 109_342_810_368, 8),
    ("h200-141gb", 32, "fp8_e4m3"): (0.865, 2_274_624, 4096, 109_339_702_784, 13),
    ("a100-80gb", 16, "bf16"): (0.787, 301_056, 2048, 23_584_922_880, 1),
    ("a100-80gb", 16, "fp8_e4m3"): (0.787, 490_624, 2048, 23_586_390_784, 2),
    ("a100-80gb", 32, "bf16"): (0.762, 566_720, 2048, 44_392_790_016, 3),
    ("a100-80gb", 32, "fp8_e4m3"): (0.762, 923_520, 2886, 44_394_835_712, 5),
}


def given_weights(tp: int) -> int | None:
    """None (the preset's own weights), but at tp 32, which SGLang 0.5.23 cannot build, the
    tp=1 bytes / 32 as an input."""
    return 674_030_369_424 // 32 if tp == 32 else None


def test_tp_32_is_refused_with_the_presets_own_weights():
    with pytest.raises(ConfigError, match=r"at tp=32: SGLang 0.5.23 cannot build .* 576 is not"):
        plan_pool(V32, gpu="h200-141gb", tp=32)


@pytest.mark.parametrize("case", sorted(CASES), ids=lambda c: f"{c[0]}-tp{c[1]}-{c[2]}")
def test_pool_as_sglang_0523_sizes_it(case):
    gpu, tp, kv = case
    f, tokens, running, kv_bytes, b_max = CASES[case]
    plan = plan_pool(V32, gpu=gpu, tp=tp, kv_cache_dtype=kv, weights_bytes=given_weights(tp))
    assert (plan.mem_fraction_static, plan.max_total_num_tokens, plan.max_running_requests,
            plan.k_size_bytes, plan.v_size_bytes, plan.batch_cap, plan.page_size) == (
        f, tokens, running, kv_bytes, 0, b_max, 64)
    assert plan.cell_size == {"bf16": 78_324, "fp8_e4m3": 48_068}[kv]
    assert plan.indexer_cell_size == 61 * 132 == 8052
    dtype = {"bf16": "torch.bfloat16", "fp8_e4m3": "torch.float8_e4m3fn"}[kv]
    assert f"KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, KV size: " \
           f"{kv_bytes / GiB:.2f} GB" in plan.log_lines()


def test_start_up_lines_h200_tp16():
    assert load_model(V32).weight_bytes(16) == 44_019_139_824
    plan = plan_pool(V32, gpu="h200-141gb", tp=16)
    assert plan.log_lines() == [
        "Use dsa attention backend for DeepSeek with DSA.",
        "Setting page size to 64 for DeepSeek DSA.",
        "Set DSA backends for bfloat16 KV Cache: prefill=flashmla_sparse, decode=fa3.",
        "Load weight begin. avail mem=140.40 GB",
        "Load weight end. type=DeepseekV32ForCausalLM, avail mem=99.41 GB, mem usage=41.00 GB.",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1129792, KV size: 82.42 GB",
        "max_total_num_tokens=1129792, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=3530, context_len=163840",
    ]
    assert plan.as_dict()["indexer_bytes_per_token"] == 8052


def test_0509_names_the_backend_nsa_and_sizes_the_same_cell():
    """0.5.9 ``server_args.py`` ``_handle_model_specific_adjustments`` /
    ``_set_default_nsa_backends`` (fp8: prefill flashmla_auto), ``model_runner_kv_cache_mixin``
    ``profile_max_num_token`` (the same 132 B per token and layer)."""
    plan = plan_pool(V32, gpu="h200-141gb", tp=16, kv_cache_dtype="fp8_e4m3",
                     sglang_version="0.5.9")
    assert plan.server_args_lines == (
        "Use nsa attention backend for DeepSeek with DSA.",
        "Setting page size to 64 for DeepSeek DSA.",
        "Set NSA backends for fp8_e4m3 KV Cache: prefill=flashmla_auto, decode=flashmla_kv.")
    # 0.5.9 profiles the fp8 latent as 576 B (get_cell_size_per_token) but its
    # NSATokenToKVPool stores 656 (calculate_mla_kv_cache_dim): 61 * (576 + 132) = 43,188
    assert (plan.cell_size, plan.page_size, plan.max_total_num_tokens) == (43_188, 64, 2_087_424)
    assert plan.k_size_bytes == (2_087_424 + 64) * 656 * 61 + (2_087_424 // 64 + 1) * 8448 * 61


def test_h100_tp8_has_no_room():
    with pytest.raises(NotEnoughMemoryError, match=r"^Not enough memory"):
        plan_pool(V32, gpu="h100-sxm-80gb", tp=8)  # 80.11 GiB of weights on 79.65 GiB free


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
    assert main(["size", "--model", V32, "--gpu", "h200-141gb", "--tp", "8"]) == 0
    out = capsys.readouterr().out
    assert "Setting page size to 64 for DeepSeek DSA." in out
    assert "one index key of 132 B (fp8 key + fp32 scale)" in out
    assert "#tokens: 607040" in out


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

    engine = simulated_engine(model=V32, gpu="h200-141gb", tp=8)
    assert engine.meta is not None
    assert (engine.meta.page_size, engine.meta.max_total_num_tokens) == (64, 607_040)
    assert (engine.page_size, engine.meta.cell_size) == (64, 78_324)
