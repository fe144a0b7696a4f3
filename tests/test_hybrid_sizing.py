"""Hybrid models sized as SGLang 0.5.23 does: literal answers taken from SGLang's own sizing
code (``tests/reference/pools_sglang.py`` on the same inputs), bad input, and the refusals
that remain (other releases, the scheduler)."""

import json

import pytest

from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_hybrid import window_from_attention_chunk
from pagedkv.configs.model_presets import load_model
from pagedkv.errors import ConfigError, NotEnoughMemoryError
from pagedkv.hybrid_pools import cap_by_mamba, swa_request_cap, swa_tokens_per_request
from pagedkv.sizing import plan_pool
from pagedkv.units import GiB

#: Qwen3-Next-80B-A3B's fields that size its pools (its published config.json's values).
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "full_attention_interval": 4, "head_dim": 256, "hidden_size": 2048,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "num_attention_heads": 16, "num_hidden_layers": 48,
    "num_key_value_heads": 2, "num_experts": 512, "torch_dtype": "bfloat16"}

H100_READING = {"pre_free_bytes": 79 * GiB, "post_free_bytes": 60 * GiB,
                "mem_fraction_static": 0.85, "page_size": 16}


def test_gpt_oss_layers_window_and_bytes():
    m = load_model("gpt-oss-20b")
    assert (m.family, m.num_swa_layers, m.num_full_attention_layers, m.sliding_window) == (
        "swa", 12, 12, 127)
    assert m.full_cell_size() == m.swa_cell_size() == 12 * 8 * (64 + 64) * 2 == 24_576
    assert m.cell_size() == 49_152  # every layer full-length: --disable-hybrid-swa-memory


@pytest.mark.parametrize(("flags", "configurator", "full", "swa", "running"), [
    ({}, "HybridSWAPoolConfigurator", 1_168_720, 934_976, 4096),
    ({"swa_full_tokens_ratio": 0.3}, "HybridSWAPoolConfigurator", 1_618_224, 485_456, 4096),
    ({"max_running_requests": 64, "disable_radix_cache": True, "chunked_prefill_size": 8192},
     "SWARequestCapPoolConfigurator", 2_068_928, 34_768, 64),
])
def test_gpt_oss_pools_equal_sglang_own(flags, configurator, full, swa, running):
    """gpt-oss-20b, 79 GiB free before and 60 after loading, f = 0.85, pages of 16."""
    plan = plan_pool("gpt-oss-20b", **H100_READING, **flags)
    assert (plan.configurator, plan.max_total_num_tokens, plan.swa_max_total_num_tokens,
            plan.max_running_requests) == (configurator, full, swa, running)
    lines = plan.log_lines()
    assert lines[-4].startswith(f"Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: "
                                f"{full}, K size: ")
    assert lines[-2] == f"SWAKVPool mem usage: 48.15 GB, swa size: {swa}, full size: {full}"
    assert ("Use sliding window memory pool. full_layer_tokens="
            f"{full}, swa_layer_tokens={swa}" in lines) == (configurator != "SWARequestCap"
                                                             "PoolConfigurator")


def test_the_request_cap_is_sglang_formula():
    """(window + eviction interval 128 + page + page) * requests + 2 chunks + page."""
    assert swa_request_cap(page_size=16, window=127, max_running_requests=64,
                           chunked_prefill_size=8192) == (127 + 128 + 32) * 64 + 16384 + 16


def test_a_request_s_swa_budget_is_its_need_plus_the_interval_plus_two_pages_less_one():
    # gpt-oss's window 127 at page size 1: need 128, held up to 128 more, budget 257
    assert swa_tokens_per_request(page_size=1, window=127) == 257 == (127 + 1) + 128 + 1
    assert swa_tokens_per_request(page_size=16, window=127) == (127 + 1) + 128 + 2 * 16 - 1
    for bad in ({"page_size": 0, "window": 127}, {"page_size": 1, "window": 0}):
        with pytest.raises(ConfigError, match=next(iter(k for k, v in bad.items() if v == 0))):
            swa_tokens_per_request(**bad)


def test_a_swa_pool_too_small_for_one_window_is_sglang_error():
    with pytest.raises(NotEnoughMemoryError, match=r"^SWA pool \(\d+ tokens\) cannot hold even "
                                                   r"one request: the prefill admission floor"):
        plan_pool("gpt-oss-20b", **H100_READING, swa_full_tokens_ratio=0.00001)


def test_max_total_tokens_resizes_both_pools():
    plan = plan_pool("gpt-oss-20b", **H100_READING, max_total_tokens=100_000)
    assert (plan.max_total_num_tokens, plan.swa_max_total_num_tokens) == (100_000, 80_000)
    assert plan.log_lines()[3] == ("Use sliding window memory pool. full_layer_tokens=100000, "
                                   "swa_layer_tokens=80000")


@pytest.mark.parametrize(("tp", "flags", "tokens", "running", "slots", "ratio", "mamba_line"), [
    (1, {}, 1_110_192, 63, 315, 5, "conv_state size: 0.52GB, ssm_state size: 22.22GB "),
    (1, {"disable_overlap_schedule": True}, 1_110_192, 78, 315, 4,
     "conv_state size: 0.52GB, ssm_state size: 22.22GB "),
    (1, {"disable_overlap_schedule": True, "page_size": 1}, 1_110_201, 105, 315, 3,
     "conv_state size: 0.52GB, ssm_state size: 22.22GB "),
    (1, {"max_running_requests": 64, "disable_radix_cache": True}, 1_899_344, 64, 64, 1,
     "conv_state size: 0.11GB, ssm_state size: 4.57GB "),
    (4, {"max_mamba_cache_size": 100}, 4_048_624, 20, 100, 5,
     "conv_state size: 0.04GB, ssm_state size: 1.78GB "),
])
def test_qwen3_next_pools_equal_sglang_own(tp, flags, tokens, running, slots, ratio, mamba_line):
    """Qwen3-Next-80B-A3B: 12 full-attention layers keep KV, 36 gated delta nets one state slot
    per request (73.7 MiB on one GPU: a bf16 convolution window and an fp32 matrix per layer).
    With the radix cache on, each running request counts 3 state slots plus the ping-pong
    track slots of the strategy SGLang 0.5.23 resolves: ``extra_buffer`` with the overlap
    loop (2) or, without it, with pages over one token (1); ``no_buffer`` otherwise (0)."""
    m = ModelSpec.from_config(QWEN3_NEXT, name="qwen3-next")
    assert (m.family, m.num_linear_layers, m.num_full_attention_layers) == ("linear", 36, 12)
    assert m.state_bytes(1) == (36 * 8192 * 3 * 2, 36 * 32 * 128 * 128 * 4)
    plan = plan_pool(m, **{**H100_READING, **flags}, tp=tp)
    assert (plan.max_total_num_tokens, plan.max_running_requests, plan.mamba_slots) == (
        tokens, running, slots)
    assert running == slots // ratio or flags.get("disable_radix_cache")
    lines = plan.log_lines()
    assert lines[-3] == f"Mamba Cache is allocated. max_mamba_cache_size: {slots}, {mamba_line}"
    capped = [line for line in lines if line.startswith("max_running_requests is capped to")]
    assert capped == ([] if flags.get("disable_radix_cache") else [
        f"max_running_requests is capped to {running} by the mamba state cache "
        f"(max_mamba_cache_size={slots}, {ratio} state slots per request). To raise it: increase "
        "--mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with "
        "--mamba-ssm-dtype bfloat16."])


@pytest.mark.parametrize(("page_size", "flags", "refused"), [
    (512, {}, True), (48, {}, True), (3, {"disable_overlap_schedule": True}, True),
    (256, {}, False), (128, {"disable_overlap_schedule": True}, False), (1, {}, False),
    (512, {"disable_radix_cache": True}, False), (48, {"sglang_version": "0.5.9"}, False),
])
def test_extra_buffer_pages_must_divide_the_track_interval(page_size, flags, refused):
    """SGLang 0.5.23's ``validate_mamba_extra_buffer`` asserts ``mamba_track_interval (256) %
    page_size == 0`` whenever ``auto`` resolves to ``extra_buffer`` (radix cache on, overlap
    loop on or pages over one token); off with the radix cache off, and in 0.5.9 (no_buffer)."""
    m = ModelSpec.from_config(QWEN3_NEXT)
    call = lambda: plan_pool(m, **{**H100_READING, **flags, "page_size": page_size})  # noqa: E731
    if refused:
        with pytest.raises(ConfigError, match=rf"^page_size={page_size} is invalid; valid: a "
                                              r"divisor of mamba_track_interval=256 .*"
                                              r"--disable-radix-cache$"):
            call()
    else:
        assert call().page_size == page_size


def test_the_track_interval_check_precedes_memory_errors():
    """A server-argument check: SGLang refuses before it sizes anything."""
    m = ModelSpec.from_config(QWEN3_NEXT)
    with pytest.raises(ConfigError, match="mamba_track_interval"):
        plan_pool(m, pre_free_bytes=79 * GiB, post_free_bytes=1, mem_fraction_static=0.85,
                  page_size=512)


def test_no_state_slot_is_sglang_error():
    m = ModelSpec.from_config(QWEN3_NEXT)
    with pytest.raises(NotEnoughMemoryError, match=r"^Not enough GPU memory for hybrid "
                                                   r"\(mamba/linear-attention\) state cache"):
        plan_pool(m, pre_free_bytes=79 * GiB, post_free_bytes=12 * GiB, mem_fraction_static=0.85)


@pytest.mark.parametrize(("flags", "match"), [
    ({"swa_full_tokens_ratio": 0.0}, r"swa_full_tokens_ratio=0\.0 is invalid"),
    ({"swa_full_tokens_ratio": float("nan")}, r"swa_full_tokens_ratio=nan is invalid"),
    ({"mamba_full_memory_ratio": -1.0}, r"mamba_full_memory_ratio=-1\.0 is invalid; valid: "
                                        r"a number > 0"),
    ({"max_mamba_cache_size": 0}, r"max_mamba_cache_size=0 is invalid"),
])
def test_bad_hybrid_flags_are_named(flags, match):
    with pytest.raises(ConfigError, match=match):
        plan_pool("gpt-oss-20b", **H100_READING, **flags)


def test_a_tp_that_splits_no_linear_head_is_named():
    m = ModelSpec.from_config({**QWEN3_NEXT, "num_attention_heads": 48,
                               "num_key_value_heads": 48, "linear_num_key_heads": 12})
    with pytest.raises(ConfigError, match=r"tp=8 is invalid; valid: a divisor of "
                                          r"linear_num_key_heads=12"):
        m.state_bytes(8)


def test_size_prints_both_pools_and_exits_2_on_bad_flags(tmp_path, capsys):
    from pagedkv.entrypoints.cli import main

    args = ["size", "--model", "gpt-oss-20b", "--free-before-gib", "79", "--free-after-gib",
            "60", "--mem-fraction-static", "0.85", "--page-size", "16"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "a full pool for 12 full-attention layers and a sliding-window pool for 12" in out
    assert "+ 24,576 B per SWA token (934,976 SWA tokens)" in out
    assert main([*args, "--swa-full-tokens-ratio", "1.5"]) == 2
    assert "swa_full_tokens_ratio=1.5 is invalid" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_NEXT))
    assert main(["size", "--model", str(tmp_path), "--free-before-gib", "79",
                 "--free-after-gib", "60", "--mem-fraction-static", "0.85", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["configurator"] == "DefaultPoolConfigurator"
    assert report["state_bytes_per_request"] == 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 4)


def test_simulate_and_size_refuse_pages_the_track_interval_refuses(capsys):
    from pagedkv.entrypoints.cli import main

    args = ["simulate", "--model", "qwen3-next-80b-a3b", "--gpu", "h100-sxm-80gb", "--tp", "4"]
    # pages SGLang's extra_buffer strategy refuses are named, as its start-up names them
    assert main([*args, "--page-size", "512"]) == 2
    assert "page_size=512 is invalid; valid: a divisor of mamba_track_interval=256" in (
        capsys.readouterr().err)
    assert main(["size", *args[1:], "--page-size", "48"]) == 2
    assert "page_size=48 is invalid" in capsys.readouterr().err


def test_gemma3_enable_multimodal_reserves_the_feature_cache():
    """Gemma-3-27B on an H100: text-only by default (SGLang's mm_disabled_models); with
    --enable-multimodal the fraction shrinks by its 27-layer, 1152-wide encoder
    (0.83 * 0.95 * (1 - 0.1 * (27 * 1152^2 / (24 * 1024^2) - 1))) and 100 MiB leave the KV
    budget (checked against SGLang in tests/reference/test_preset_sglang_answers.py)."""
    text = plan_pool("gemma-3-27b", gpu="h100-sxm-80gb")
    assert text.mem_fraction_static == 0.83
    assert not any(line.startswith("Reserving") for line in text.log_lines())
    vlm = plan_pool("gemma-3-27b", gpu="h100-sxm-80gb", enable_multimodal=True)
    ratio = 27 * 1152**2 / (24 * 1024**2)
    assert vlm.mem_fraction_static == 0.83 * (0.95 * (1 - 0.1 * (ratio - 1)))
    assert vlm.log_lines()[2] == ("Reserving 0.10 GB of the KV budget for post-sizing multimodal "
                                  "allocations (feature-transport pools + embedding cache).")
    assert vlm.max_total_num_tokens < text.max_total_num_tokens


def test_llama4_scout_splits_every_fourth_layer_and_takes_the_chunk_as_window():
    """Llama 4: 36 chunked-attention layers in the SWA pool, 12 global ones in the full pool;
    SGLang's window is attention_chunk_size (its model class gives none)."""
    m = load_model("llama-4-scout")
    assert (m.family, m.num_swa_layers, m.num_full_attention_layers, m.sliding_window) == (
        "swa", 36, 12, 8192)
    assert m.vision == (34, 1408) and m.context_len == 10_485_760
    plan = plan_pool(m, gpu="h100-sxm-80gb", tp=4)
    assert (plan.max_total_num_tokens, plan.swa_max_total_num_tokens) == (376_279, 301_023)


@pytest.mark.parametrize("disable_hybrid_swa_memory", [False, True])
def test_llama4_says_it_takes_the_chunk_as_window_before_load_weight_end(
        disable_hybrid_swa_memory: bool) -> None:
    """SGLang (0.5.9 and 0.5.23) logs the chunk taken as the window while loading the model,
    with or without the hybrid pools: Llama 4's class gives no window, its config has none."""
    m = load_model("llama-4-scout", disable_hybrid_swa_memory=disable_hybrid_swa_memory)
    lines = plan_pool(m, gpu="h100-sxm-80gb", tp=4).log_lines()
    assert lines[1] == "Setting sliding_window_size to be attention_chunk_size: 8192"
    assert lines[2].startswith("Load weight end.")


@pytest.mark.parametrize(("arch", "text", "hybrid", "window"), [
    ("Llama4ForConditionalGeneration", {"attention_chunk_size": 8192}, True, 8192),
    # a window key wins only for a sliding-window hybrid (the middle branch)
    ("Llama4ForConditionalGeneration", {"attention_chunk_size": 8192, "sliding_window": 4096}, True, None),
    ("Llama4ForConditionalGeneration", {"attention_chunk_size": 8192, "sliding_window": 4096}, False, 8192),
    # the model class's own window wins over everything
    ("GptOssForCausalLM", {"attention_chunk_size": 8192}, True, None),
    ("LlamaForCausalLM", {}, False, None),
])
def test_window_from_attention_chunk_follows_sglangs_three_branches(
        arch: str, text: dict[str, int], hybrid: bool, window: int | None) -> None:
    assert window_from_attention_chunk(text, arch, hybrid) == window


def test_models_without_a_chunk_print_no_chunk_line() -> None:
    for name in ("llama-3-8b", "gemma-3-27b", "qwen3-30b-a3b"):
        assert not any("attention_chunk_size" in x for x in plan_pool(name, gpu="h200-141gb").log_lines())


def test_profile_tokens_names_what_it_found() -> None:
    """``profile_tokens`` before caps and pages: a one-pool model needs no byte count and has
    no state; Qwen3-Next's state share comes off first, its slots and bytes named (the plan
    keeps them)."""
    from pagedkv.hybrid_pools import DEFAULT_MAMBA_FULL_MEMORY_RATIO
    from pagedkv.kv_cache_configurator import TokenProfile, profile_tokens
    from pagedkv.releases import DEFAULT_RELEASE

    kw = {"vision": False, "tp": 1, "mamba_ratio": DEFAULT_MAMBA_FULL_MEMORY_RATIO,
          "max_mamba_cache_size": None, "max_running_requests": None,
          "disable_radix_cache": False}
    reading = (79 * GiB, 60 * GiB, 0.85)
    llama = load_model("llama-3-8b")
    dense = profile_tokens(llama, *reading, llama.cell_size(), DEFAULT_RELEASE, **kw)
    # (60 - 79 * 0.15) GiB = 48.15 GiB of 128 KiB cells
    assert dense == TokenProfile(int(48.15 * GiB) // (128 * 1024), None, False)
    m = ModelSpec.from_config(QWEN3_NEXT, name="qwen3-next")
    hybrid = profile_tokens(m, *reading, m.cell_size(), DEFAULT_RELEASE, **kw)
    plan = plan_pool(m, **H100_READING)
    assert (hybrid.mamba_slots, hybrid.conv_state_bytes, hybrid.ssm_state_bytes) == (
        plan.mamba_slots, *m.state_bytes(1)) == (315, 36 * 8192 * 3 * 2, 36 * 32 * 128 * 128 * 4)
    assert hybrid.available is not None and hybrid.tokens == hybrid.available // m.cell_size()
    assert not hybrid.weights_fill_budget and hybrid.lines == ()
    assert hybrid.tokens >= plan.max_total_num_tokens


def test_the_mamba_cap_line_is_sglangs_own_words() -> None:
    """Radix cache off: one state slot per request; the line is SGLang 0.5.23's verbatim
    (``kv_cache_configurator.py``), plural included: "1 state slots per request"."""
    cap, lines = cap_by_mamba(10, 4, disable_radix_cache=True)
    assert cap == 4 and "(max_mamba_cache_size=4, 1 state slots per request)" in lines[0]


def test_size_counts_the_track_slots_of_the_default_strategy(capsys):
    """``pagedkv size`` on Qwen3-Next, 4 H200s: 5 state slots a request by default (the radix
    cache's extra_buffer strategy: 3 and two track slots, SGLang 0.5.23), 3 with
    ``--disable-overlap-schedule`` at pages of one token (its no_buffer strategy)."""
    from pagedkv.entrypoints.cli import main

    for flags, ratio in (([], 5), (["--disable-overlap-schedule"], 3)):
        assert main(["size", "--model", "qwen3-next-80b-a3b", "--gpu", "h200-141gb",
                     "--tp", "4", *flags]) == 0
        assert f"max_mamba_cache_size=2338, {ratio} state slots per request" in \
            capsys.readouterr().out
