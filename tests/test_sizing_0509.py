"""Pool sizing under SGLang 0.5.9: the answers 0.5.9's own sizing code gave (its
``ModelRunner.init_memory_pool``, run on this CPU by ``tests/reference/pools_sglang_0509.py``),
held as literals for each way 0.5.9 was found to differ from 0.5.23."""

import pytest

from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_presets import load_model
from pagedkv.entrypoints.cli import main
from pagedkv.errors import ConfigError, NotEnoughMemoryError
from pagedkv.sizing import plan_pool
from pagedkv.units import GiB, MiB


def plan(model: str, pre: int, post: int, f: float, tp: int, page: int, kv: str, version: str,
         **flags):
    return plan_pool(model, pre_free_bytes=pre * MiB, post_free_bytes=post * MiB,
                     mem_fraction_static=f, tp=tp, page_size=page, kv_cache_dtype=kv,
                     sglang_version=version, **flags)


def test_0509_sizes_request_rows_from_the_pool_before_the_cap():
    # SGLang 0.5.9: 271,792 tokens after --max-total-tokens 271796 and pages of 16, but
    # 4,096 request rows (and requests), counted on the profiled pool before the cap.
    args = ("qwen3-30b-a3b", 18257, 11057, 0.822, 2, 16, "fp8_e4m3")
    old = plan(*args, "0.5.9", max_total_tokens=271_796)
    assert (old.max_total_num_tokens, old.max_running_requests,
            old.req_to_token_pool_size) == (271_792, 4096, 4096)
    new = plan(*args, "0.5.23", max_total_tokens=271_796)
    assert (new.max_total_num_tokens, new.max_running_requests) == (271_792, 3397)


def test_0509_sizes_request_rows_from_the_pool_before_page_rounding():
    # SGLang 0.5.9: int(profiled / 40960 * 512) = 3,668 on the unrounded pool; the pool
    # rounded to pages of 128 (293,376 tokens) would give 3,667.
    old = plan("qwen3-235b-a22b", 86227, 32613, 0.778, 16, 128, "bf16", "0.5.9")
    assert (old.max_total_num_tokens, old.max_running_requests,
            old.req_to_token_pool_size) == (293_376, 3668, 3668)
    new = plan("qwen3-235b-a22b", 86227, 32613, 0.778, 16, 128, "bf16", "0.5.23")
    assert new.max_running_requests == 3667


def test_0509_gemma3_context_is_scaled_by_its_rope_factor():
    # transformers 4.57.1 keeps Gemma 3's one rope_scaling dict (linear, factor 8):
    # 131,072 * 8; transformers 5 keeps it per layer type, and 0.5.23 finds no factor.
    spec = load_model("gemma-3-27b")
    assert plan("gemma-3-27b", 81000, 30000, 0.85, 1, 1, "bf16", "0.5.9").context_len == 1_048_576
    assert plan("gemma-3-27b", 81000, 30000, 0.85, 1, 1, "bf16", "0.5.23").context_len == 131_072
    assert spec.context_len == 131_072


@pytest.mark.parametrize("model", ["mistral-7b-v0.3", "mixtral-8x7b"])
def test_0509_cannot_size_a_mistral_config_without_head_dim(model):
    # 0.5.9's ModelConfig takes v_head_dim (None) before it mends head_dim; its
    # get_cell_size_per_token then adds 128 + None: start-up fails with a TypeError.
    with pytest.raises(ConfigError, match=r"TypeError.*valid: add \"head_dim\": 128"):
        plan(model, 81000, 30000, 0.85, 2, 1, "bf16", "0.5.9")
    assert plan(model, 81000, 30000, 0.85, 2, 1, "bf16", "0.5.23").cell_size > 0
    config = dict(load_model(model).config, head_dim=128)
    mended = ModelSpec.from_config(config, name=model)
    assert not mended.head_dim_left_none
    assert plan_pool(mended, pre_free_bytes=81000 * MiB, post_free_bytes=30000 * MiB,
                     mem_fraction_static=0.85, tp=2, sglang_version="0.5.9").cell_size > 0


def h100_reading(model: str, version: str, tp: int, **flags):
    return plan_pool(model, pre_free_bytes=79 * GiB, post_free_bytes=40 * GiB,
                     mem_fraction_static=0.85, tp=tp, sglang_version=version, **flags)


def test_0509_redistributes_a_capped_sliding_window_pool():
    # set_num_tokens_hybrid_swa: the 100,000 tokens --max-total-tokens leaves of the count
    # profiled at every layer's bytes become 111,111 full + 88,888 window tokens; 0.5.23's
    # configurator caps the full pool itself (100,000 + 80,000).
    old = h100_reading("gpt-oss-20b", "0.5.9", 1, max_total_tokens=100_000)
    assert (old.max_total_num_tokens, old.swa_max_total_num_tokens, old.req_to_token_pool_size,
            old.max_running_requests) == (111_111, 88_888, 2402, 2402)
    assert old.pool_log_lines() == [
        "Use sliding window memory pool. full_layer_tokens=111111, swa_layer_tokens=88888",
        "KV Cache is allocated. #tokens: 88888, K size: 1.02 GB, V size: 1.02 GB",
        "KV Cache is allocated. #tokens: 111111, K size: 1.27 GB, V size: 1.27 GB",
        "SWAKVPool mem usage: 4.58 GB, swa size: 88888, full size: 111111"]
    new = h100_reading("gpt-oss-20b", "0.5.23", 1, max_total_tokens=100_000)
    assert (new.max_total_num_tokens, new.swa_max_total_num_tokens) == (100_000, 80_000)


def test_0509_state_slots_leave_out_the_padding_slot():
    # handle_max_mamba_cache: int(share // slot) = 741 slots (0.5.23: 740), 741 // 3 = 247
    # requests and request rows, no warning; the KV pool gets 1,294,932 tokens.
    old = h100_reading("qwen3-next-80b-a3b", "0.5.9", 4)
    assert (old.mamba_slots, old.max_total_num_tokens, old.req_to_token_pool_size,
            old.max_running_requests) == (741, 1_294_932, 247, 247)
    assert old.pool_log_lines() == [
        "Mamba Cache is allocated. max_mamba_cache_size: 741, conv_state size: 0.31GB, "
        "ssm_state size: 13.04GB ",
        "KV Cache is allocated. #tokens: 1294932, K size: 7.41 GB, V size: 7.41 GB"]
    assert h100_reading("qwen3-next-80b-a3b", "0.5.23", 4).mamba_slots == 740


@pytest.mark.parametrize("disable_radix_cache", [False, True])
def test_0509_no_state_slot_fails_the_workers_assertion(disable_radix_cache):
    # 100 MiB of budget holds no 74 MiB state slot: 0.5.9 builds 0 slots and 0 request rows,
    # and TpModelWorker.__init__ asserts "max_running_request is zero".
    with pytest.raises(NotEnoughMemoryError, match=r"^max_running_request is zero: "
                                                   r"max_mamba_cache_size=0 state slots"):
        plan_pool("qwen3-next-80b-a3b", pre_free_bytes=10000 * MiB, post_free_bytes=1100 * MiB,
                  mem_fraction_static=0.9, sglang_version="0.5.9",
                  disable_radix_cache=disable_radix_cache)


def test_0509_has_no_pool_configurator():
    # 0.5.9 sizes in ModelRunnerKVCacheMixin.init_memory_pool: no configurator class to name.
    assert h100_reading("qwen3-4b", "0.5.9", 1).configurator == ""
    assert h100_reading("qwen3-4b", "0.5.9", 1).as_dict()["configurator"] == ""
    assert h100_reading("qwen3-4b", "0.5.23", 1).configurator == "DefaultPoolConfigurator"
    assert h100_reading("gpt-oss-20b", "0.5.9", 1).configurator == ""


def test_0509_keeps_no_kv_budget_for_image_features():
    # Gemma-3-27B with --enable-multimodal: 0.5.9's profile_max_num_token takes nothing out
    # (59,510 tokens, as text-only); 0.5.23 keeps 100 MiB for image features and says so.
    old = h100_reading("gemma-3-27b", "0.5.9", 1, enable_multimodal=True)
    assert old.max_total_num_tokens == 59_510
    assert old.pool_log_lines() == [
        "KV Cache is allocated. #tokens: 59510, K size: 14.08 GB, V size: 14.08 GB"]
    new = h100_reading("gemma-3-27b", "0.5.23", 1, enable_multimodal=True)
    assert new.max_total_num_tokens == 59_304 and new.pool_log_lines()[0].startswith("Reserving")


def test_size_cli_sizes_hybrids_under_0509_and_names_mixtrals_failure(capsys):
    assert main(["size", "--model", "qwen3-next-80b-a3b", "--gpu", "h100-sxm-80gb", "--tp", "4",
                 "--sglang-version", "0.5.9"]) == 0
    out = capsys.readouterr().out
    assert "Mamba Cache is allocated. max_mamba_cache_size: " in out
    assert "ModelRunner.init_memory_pool" in out and "DefaultPoolConfigurator" not in out
    assert main(["size", "--model", "mixtral-8x7b", "--gpu", "h100-sxm-80gb", "--tp", "2",
                 "--sglang-version", "0.5.9"]) == 2
    err = capsys.readouterr().err
    assert "TypeError" in err and 'add "head_dim": 128 to config.json' in err
