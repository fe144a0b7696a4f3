"""Pool sizing under SGLang 0.5.9: the answers 0.5.9's own sizing code gave (its
``ModelRunner.init_memory_pool``, run on this CPU by ``tests/reference/pools_sglang_0509.py``),
held as literals for each way 0.5.9 was found to differ from 0.5.23."""

import pytest

from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_presets import load_model
from pagedkv.errors import ConfigError
from pagedkv.sizing import plan_pool
from pagedkv.units import MiB


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
