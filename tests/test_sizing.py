"""SGLang's pool arithmetic, checked by hand and against real start-up logs."""

import re

import pytest

from pagedkv.configs.model_presets import load_model
from pagedkv.errors import ConfigError, NotEnoughMemoryError
from pagedkv.gpus import GPU_PRESETS, get_gpu
from pagedkv.sizing import (
    batch_cap,
    default_mem_fraction_static,
    gpu_memory_defaults,
    plan_pool,
    prefill_cuda_graph_sizes,
    profile_max_num_token,
    req_to_token_pool_size,
)
from pagedkv.units import GiB, gib

H100 = get_gpu("h100-sxm-80gb")


def rounding_bound(cell_size: int, f: float) -> int:
    """Tokens the 2-decimal rounding of the logged GiB values can move the result by.

    pre and post are each off by up to 0.005 GiB: rest = post - pre * (1 - f) by up to
    0.005 * (1 + (1 - f)) GiB.
    """
    return int(0.005 * (2 - f) * GiB / cell_size) + 1


def test_profile_max_num_token_by_hand():
    # rest = 10 - 20 * (1 - 0.8) = 6 GiB; 6 GiB / 128 KiB = 49,152 tokens
    assert profile_max_num_token(gib(20), gib(10), 131_072, 0.8) == 49_152


def test_log_l1_llama31_8b_h100():
    """L1: #tokens 444500; K 27.13 GB, V 27.13 GB; max_running_requests 2049.

    The log is from January 2025, whose release added a padding row to the 2,048 request
    slots; 0.5.9 and 0.5.23 give 2,048.
    """
    plan = plan_pool(load_model("llama-3.1-8b"), pre_free_bytes=gib(78.81),
                     post_free_bytes=gib(63.72), mem_fraction_static=0.88)
    # (63.72 - 78.81 * 0.12) GiB / 128 KiB = 444,520.9
    assert plan.max_total_num_tokens == 444_520
    assert abs(plan.max_total_num_tokens - 444_500) <= rounding_bound(131_072, 0.88)
    assert round(plan.k_size_bytes / GiB, 2) == 27.13
    assert round(plan.v_size_bytes / GiB, 2) == 27.13
    assert plan.req_to_token_pool_size == plan.max_running_requests == 2048


def test_log_l2_qwq32b_4x_l4_tp4():
    """L2: #tokens 46611; K 1.42 GB, V 1.42 GB (per GPU, 2 of the 8 KV heads each)."""
    plan = plan_pool(load_model("qwq-32b"), pre_free_bytes=gib(21.63), post_free_bytes=gib(6.09),
                     mem_fraction_static=0.85, tp=4)
    assert plan.cell_size == 2 * 64 * 2 * 128 * 2 == 65_536
    assert abs(plan.max_total_num_tokens - 46_611) <= rounding_bound(65_536, 0.85)
    assert round(plan.k_size_bytes / GiB, 2) == 1.42
    assert round(plan.v_size_bytes / GiB, 2) == 1.42


def test_log_l3_qwen3_4b_rtx4090():
    """L3: pool 87,552 tokens = 12.0 GiB at 147,456 B per token."""
    # the report predates 0.5.23, whose default f (0.704) leaves only 68,414 tokens
    plan = plan_pool(load_model("qwen3-4b"), gpu=get_gpu("rtx-4090"), max_total_tokens=87_552,
                     sglang_version="0.5.9")
    assert plan.cell_size == 147_456
    assert plan.max_total_num_tokens == 87_552
    assert round(plan.pool_bytes / GiB, 1) == 12.0


def test_default_mem_fraction_static_h100():
    # 0.5.9: reserve = 512 + 1.5 * 8192 + 2 * 256 + 1 * 1 / 8 * 1024 = 13,440 MiB
    v0509 = default_mem_fraction_static(81_559, sglang_version="0.5.9")
    assert v0509 == round((81_559 - 13_440) / 81_559, 3) == 0.835
    # 0.5.23 adds 8 MiB for each of the 58 prefill CUDA-graph sizes up to 8,192: 13,904 MiB
    assert len(prefill_cuda_graph_sizes(8192)) == 58
    from pagedkv.server_args import prefill_cuda_graph_size_runs

    assert prefill_cuda_graph_size_runs(8192) == [(4, 32, 4), (48, 256, 16), (288, 512, 32),
                                                  (576, 1024, 64), (1280, 4096, 256),
                                                  (4608, 8192, 512)]
    assert prefill_cuda_graph_size_runs(4) == [(4, 4, 0)] and prefill_cuda_graph_size_runs(3) == []
    assert default_mem_fraction_static(81_559) == round((81_559 - 13_904) / 81_559, 3) == 0.830


def test_default_mem_fraction_static_small_card_and_floor():
    # RTX 4090, 0.5.9: 512 + 1.5 * 2048 + 2 * 24 + 128 = 3,760 MiB
    assert default_mem_fraction_static(24_564, sglang_version="0.5.9") == 0.847
    # 0.5.23: chunk 4096, decode graphs to 48, 50 prefill sizes: 512+6144+128+96+400 = 7,280
    assert gpu_memory_defaults(24_564) == (4096, 48)
    assert gpu_memory_defaults(24_564, tp=4) == (4096, 160)
    assert gpu_memory_defaults(24_564, sglang_version="0.5.9") == (2048, 24)
    assert default_mem_fraction_static(24_564) == round((24_564 - 7_280) / 24_564, 3) == 0.704
    # H100 at tp 8 (graph bs 512): 512 + 12288 + 1024 + 1024 = 14,848 MiB > 10 GiB floor
    assert default_mem_fraction_static(81_559, tp=8, sglang_version="0.5.9") == round(
        (81_559 - 14_848) / 81_559, 3)
    # T4, 0.5.23: 512 + 3072 + 128 + 16 + 42 * 8 = 4,064; the 10 GiB floor is for > 60 GiB
    assert default_mem_fraction_static(15_360) == round((15_360 - 4_064) / 15_360, 3) == 0.735
    # an MLA model reserves 1.5 GiB for prefill graphs instead; ROCm captures none
    assert default_mem_fraction_static(81_559, mla=True) == round((81_559 - 14_976) / 81_559, 3)
    assert default_mem_fraction_static(196_592, prefill_cuda_graph=False) == 0.867


@pytest.mark.parametrize(("bad", "name"), [
    ({"sglang_version": "0.4"}, "sglang_version"), ({"tp": 0}, "tp"), ({"pp": -1}, "pp"),
    ({"chunked_prefill_size": 0}, "chunked_prefill_size"),
    ({"cuda_graph_max_bs": 1.5}, "cuda_graph_max_bs")])
def test_default_mem_fraction_static_bad_input(bad, name):
    with pytest.raises(ConfigError, match=name):
        default_mem_fraction_static(81_559, **bad)


def test_plan_pool_default_fraction_follows_the_release():
    """Llama-3.1-8B on an L4: 0.5.23's larger reserve leaves a ninth of 0.5.9's pool."""
    new = plan_pool("llama-3.1-8b", gpu="l4")
    old = plan_pool("llama-3.1-8b", gpu="l4", sglang_version="0.5.9")
    assert (new.mem_fraction_static, old.mem_fraction_static) == (0.684, 0.837)
    assert new.max_total_num_tokens < old.max_total_num_tokens / 8


def test_card_arithmetic_llama3_8b_h100():
    """The seed card: pool = f * HBM - weights ~ 55 GB at f ~ 0.83 (decimal GB)."""
    plan = plan_pool(load_model("llama-3-8b"), gpu=H100, sglang_version="0.5.9")
    assert plan.mem_fraction_static == 0.835
    expected = 0.835 * 81_559 * 2**20 - 16_060_522_496
    assert plan.pool_bytes == pytest.approx(expected, abs=131_072)
    assert round(plan.pool_bytes / 1e9) == 55
    # B_max = floor(pool / (8192 tokens * 128 KiB)) = floor(51.55 GiB / 1 GiB)
    assert plan.batch_cap == 51


def test_batch_cap_by_hand():
    assert batch_cap(64e9, 8192, 131_072) == 59  # the seed's (80 - 16) GB over 1 GiB per request
    assert batch_cap(0.5 * GiB, 8192, 131_072) == 0


def test_max_total_tokens_cap_and_page_rounding():
    base = plan_pool(load_model("llama-3-8b"), gpu=H100)
    capped = plan_pool(load_model("llama-3-8b"), gpu=H100, max_total_tokens=100_003, page_size=16)
    assert capped.max_total_num_tokens == 100_000  # 100,003 floored to a multiple of 16
    paged = plan_pool(load_model("llama-3-8b"), gpu=H100, page_size=64)
    assert paged.max_total_num_tokens == base.max_total_num_tokens // 64 * 64
    # the padding page: K rows = tokens + page_size
    assert paged.k_size_bytes == (paged.max_total_num_tokens + 64) * 8 * 128 * 32 * 2


def test_req_to_token_pool_size():
    assert req_to_token_pool_size(444_520, 131_072) == 2048  # floor at 2048
    assert req_to_token_pool_size(10_000_000, 8192) == 4096  # cap at 4096
    assert req_to_token_pool_size(5_000_000, 1_000_000) == 2560


def test_mla_reports_one_kv_size():
    plan = plan_pool(load_model("deepseek-v3"), gpu=get_gpu("h200-141gb"), tp=8,
                     weights_bytes=gib(80.0))
    d = plan.as_dict()
    assert "kv_size_gib" in d and "k_size_gib" not in d
    assert plan.v_size_bytes == 0
    assert "KV size:" in plan.log_lines()[2]


@pytest.mark.parametrize("f", [0, -0.1, 1.01, 2])
def test_fraction_outside_range(f):
    message = rf"mem_fraction_static={f!r} is invalid; valid: a fraction in \(0, 1\]"
    with pytest.raises(ConfigError, match=message):
        plan_pool(load_model("llama-3-8b"), gpu=H100, mem_fraction_static=f)


def test_page_size_zero():
    with pytest.raises(ConfigError, match="page_size=0 is invalid; valid: an integer >= 1"):
        plan_pool(load_model("llama-3-8b"), gpu=H100, page_size=0)


def test_weights_larger_than_the_card():
    with pytest.raises(NotEnoughMemoryError, match=r"weights take 131.42 GiB of 79.65 GiB free"):
        plan_pool(load_model("llama-3.1-70b"), gpu=H100)


def test_fraction_too_small_for_weights_is_sglangs_startup_error():
    # weights 16,060,522,496 B of 81,559 MiB: f must exceed 0.18780
    with pytest.raises(NotEnoughMemoryError, match=r"^Loaded weights leave no GPU memory for the "
                       r"KV cache under --mem-fraction-static=0.15. Raise --mem-fraction-static: "
                       r".*so f must exceed 0.1878 \(1 - available/pre\)$"):
        plan_pool(load_model("llama-3-8b"), gpu=H100, mem_fraction_static=0.15)
    with pytest.raises(NotEnoughMemoryError, match=r"^Not enough memory. Please try to increase "
                       r"--mem-fraction-static: .*so f must exceed 0.1878 \(1 - available/pre\)$"):
        plan_pool(load_model("llama-3-8b"), gpu=H100, mem_fraction_static=0.15,
                  sglang_version="0.5.9")
    # a budget just over the weights but under one page: the "Not enough memory" of both
    f = 0.18781
    with pytest.raises(NotEnoughMemoryError, match=r"^Not enough memory"):
        plan_pool(load_model("llama-3-8b"), gpu=H100, mem_fraction_static=f, page_size=4096)


def test_plan_pool_takes_preset_names():
    by_name = plan_pool("llama-3-8b", gpu="h100-sxm-80gb")
    assert by_name == plan_pool(load_model("llama-3-8b"), gpu=H100)


def test_longest_prompt_is_the_smaller_bound_minus_seven() -> None:
    from pagedkv.sizing import max_req_input_len

    # min(context - 1, pool - 1) - 5; a prompt of that length is refused, one shorter accepted
    assert max_req_input_len(100, 8192) == 94
    assert max_req_input_len(444_500, 131_072) == 131_066
    plan = plan_pool(load_model("llama-3.1-8b"), gpu=get_gpu("l4"))
    assert plan.longest_prompt == min(plan.max_total_num_tokens, plan.context_len) - 7


# SGLang's own ServerArgs printed these for a dense text model, GPU memory mocked
# (0.5.23: resolve_once(); 0.5.9: __post_init__). MI300X is ROCm: no prefill CUDA graph.
SGLANG_DEFAULT_F = {
    "h100-sxm-80gb": (0.830, 0.835), "h200-141gb": (0.903, 0.907),
    "a100-40gb": (0.823, 0.833), "a100-80gb": (0.830, 0.836), "l4": (0.684, 0.837),
    "rtx-4090": (0.704, 0.847), "t4": (0.735, 0.757), "mi300x": (0.867, 0.867),
}


@pytest.mark.parametrize("gpu", sorted(GPU_PRESETS))
def test_default_fraction_of_every_preset(gpu):
    card = get_gpu(gpu)
    new, old = SGLANG_DEFAULT_F[gpu]
    model = "qwen3-4b"  # fits every preset, the T4 included
    assert plan_pool(model, gpu=card).mem_fraction_static == new
    assert plan_pool(model, gpu=card, sglang_version="0.5.9").mem_fraction_static == old


def test_log_lines_in_each_releases_words():
    new = plan_pool("llama-3-8b", gpu="h100-sxm-80gb")
    old = plan_pool("llama-3-8b", gpu="h100-sxm-80gb", sglang_version="0.5.9")
    assert new.log_lines() == [
        "Load weight begin. avail mem=79.65 GB",
        "Load weight end. type=LlamaForCausalLM, avail mem=64.69 GB, mem usage=14.96 GB.",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 419019, K size: 25.57 GB, "
        "V size: 25.57 GB",
        "max_total_num_tokens=419019, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=4096, context_len=8192",
    ]
    assert old.log_lines()[1] == ("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                                  "avail mem=64.69 GB, mem usage=14.96 GB.")
    assert old.log_lines()[2] == "KV Cache is allocated. #tokens: 422282, K size: 25.77 GB, V size: 25.77 GB"


def test_max_running_requests_is_at_most_half_the_pool():
    # 0.5.23 caps an explicit --max-running-requests at tokens // 2; 0.5.9 keeps it
    args = dict(pre_free_bytes=gib(20), post_free_bytes=gib(19.99), mem_fraction_static=0.1,
                max_running_requests=9000)  # pool: 14,490 tokens
    new = plan_pool("qwen3-4b", **args)
    assert new.max_running_requests == new.max_total_num_tokens // 2
    assert new.max_running_requests == 7245
    assert plan_pool("qwen3-4b", sglang_version="0.5.9", **args).max_running_requests == 9000
    with pytest.raises(ConfigError, match="sglang_version"):
        plan_pool("qwen3-4b", sglang_version="0.6", **args)


def test_a_cap_above_the_profiled_pool_is_said_not_silent():
    """SGLang keeps the profiled pool and warns (0.5.23 kv_cache_configurator.py
    _apply_token_constraints; 0.5.9 model_runner_kv_cache_mixin.py): so does pagedkv."""
    free = plan_pool(load_model("qwen3-4b"), gpu=get_gpu("rtx-4090")).max_total_num_tokens
    over = plan_pool(load_model("qwen3-4b"), gpu=get_gpu("rtx-4090"), max_total_tokens=87_552)
    assert over.max_total_num_tokens == free
    assert over.warnings == (f"max_total_tokens=87552 is larger than the profiled value {free}. "
                             "Use the profiled value instead.",)
    assert over.warnings[0] in over.log_lines()
    assert over.as_dict()["warnings"] == [*over.warnings, *over.notes]  # + the whole-card note
    under = plan_pool(load_model("qwen3-4b"), gpu=get_gpu("rtx-4090"), max_total_tokens=40_000)
    assert under.max_total_num_tokens == 40_000 and under.warnings == ()


def test_json_gib_are_the_readings_not_their_float_remainders():
    d = plan_pool(load_model("llama-3.1-8b"), pre_free_bytes=gib(78.81), post_free_bytes=gib(63.72),
                  mem_fraction_static=0.88).as_dict()
    assert (d["pre_free_gib"], d["post_free_gib"]) == (78.81, 63.72)
    assert d["pool_bytes"] == d["max_total_num_tokens"] * d["bytes_per_token"] == 444_520 * 131_072


def test_cap_warning_names_the_paged_pool_in_0523_and_the_raw_one_in_0509():
    """0.5.23 rounds the profiled pool to pages before comparing the cap (and says so in its
    warning); 0.5.9 compares the raw count. The pool itself is the same. Case from the
    reference tests: Llama-3.1-70B at tp 8, page 16."""
    spec = load_model("llama-3.1-70b")
    kw = dict(pre_free_bytes=39_526 * 2**20, post_free_bytes=12_809 * 2**20,
              mem_fraction_static=0.795, tp=8, page_size=16, max_total_tokens=1_993_903)
    new, old = plan_pool(spec, **kw), plan_pool(spec, sglang_version="0.5.9", **kw)
    assert new.max_total_num_tokens == old.max_total_num_tokens == 120_464
    assert "than the profiled value 120464. Use" in new.warnings[0]
    assert "than the profiled value 120477. Use" in old.warnings[0]
    between = plan_pool(spec, **{**kw, "max_total_tokens": 120_470})
    assert between.max_total_num_tokens == 120_464 and between.warnings


def test_measured_readings_need_no_weight_size():
    """With both free-memory readings the weights are pre - post, even for a quantized
    checkpoint whose size pagedkv cannot count."""
    plan = plan_pool(load_model("deepseek-v3"), pre_free_bytes=gib(79), post_free_bytes=gib(60),
                     mem_fraction_static=0.85)
    assert plan.weights_bytes == gib(19)


# --- validation, messages and warnings (a first user's findings) ---


@pytest.mark.parametrize("bad", [0, -2, -5, 1.5, True])
def test_chunked_prefill_size_is_minus_one_or_positive(bad):
    message = (f"chunked_prefill_size={bad!r} is invalid; valid: -1 (chunked prefill off) or an "
               "integer >= 1 (tokens per chunk)")
    with pytest.raises(ConfigError, match=re.escape(message)):
        plan_pool(load_model("llama-3-8b"), gpu=H100, chunked_prefill_size=bad)
    with pytest.raises(ConfigError, match=re.escape(message)):
        default_mem_fraction_static(H100.memory_mib, chunked_prefill_size=bad)


def test_a_users_chunk_sets_the_reserve_as_sglang_does():
    """0.5.23 memory_hook.handle_gpu_memory_settings / 0.5.9 _handle_gpu_memory_settings:
    a positive chunk replaces the card's; -1 reserves for max_prefill_tokens (16,384) and, in
    0.5.23, captures no prefill graphs (an MLA model keeps its flat 1.5 GiB)."""
    l4 = get_gpu("l4").memory_mib  # 23,034 MiB: under the 10 GiB floor's 60 GiB threshold
    off = 512 + 1.5 * 16384 + 128 + 2 * 48
    assert default_mem_fraction_static(l4, chunked_prefill_size=-1) == round((l4 - off) / l4, 3)
    assert default_mem_fraction_static(l4, chunked_prefill_size=-1, mla=True) == round(
        (l4 - off - 1536) / l4, 3)
    assert default_mem_fraction_static(l4, chunked_prefill_size=-1, sglang_version="0.5.9") == round(
        (l4 - (512 + 1.5 * 16384 + 128 + 2 * 24)) / l4, 3)
    with_1024 = 512 + 1.5 * 2048 + 128 + 2 * 48 + 8 * len(prefill_cuda_graph_sizes(1024))
    assert default_mem_fraction_static(l4, chunked_prefill_size=1024) == round(
        (l4 - with_1024) / l4, 3)
    plan = plan_pool(load_model("llama-3-8b"), gpu="l4", chunked_prefill_size=1024)
    assert plan.mem_fraction_static == round((l4 - with_1024) / l4, 3)
    assert plan.chunked_prefill_size == 1024 and "chunked_prefill_size=1024, " in plan.log_lines()[-1]
    measured = plan_pool(load_model("llama-3-8b"), pre_free_bytes=70 * GiB, post_free_bytes=55 * GiB,
                         mem_fraction_static=0.8, chunked_prefill_size=-1)
    assert "chunked_prefill_size=-1, " in measured.log_lines()[-1]


def test_a_context_longer_than_the_models_follows_sglangs_env_var(monkeypatch):
    monkeypatch.delenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", raising=False)
    llama = load_model("llama-3-8b")
    assert plan_pool(llama, gpu=H100, context_len=8192).notes == (WHOLE_CARD,)
    with pytest.raises(ConfigError, match=r"^context_len=8193 is invalid; valid: an integer from 1 "
                       r"to 8192, .*set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1\)$"):
        plan_pool(llama, gpu=H100, context_len=8193)
    for yes in ("1", "true", "YES", "y"):
        monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", yes)
        plan = plan_pool(llama, gpu=H100, context_len=8193)
        assert plan.context_len == 8193 and plan.notes[0].startswith(
            "User-specified context_length (8193) is greater than the derived "
            "context_length (8192).")
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "0")
    with pytest.raises(ConfigError, match="context_len=8193 is invalid"):
        plan_pool(llama, gpu=H100, context_len=8193)


WHOLE_CARD = ("free memory taken as the whole card (H100 SXM 80GB: 79.65 GiB) before loading; a "
              "real server measures it after the CUDA context and communication buffers have "
              "taken theirs, so its pool comes out about 1-2 % smaller than this one; give the "
              "two 'avail mem' readings of its start-up log (--free-before-gib, "
              "--free-after-gib) for the exact pool")


def test_notes_say_what_a_capacity_planner_needs():
    measured = plan_pool(load_model("llama-3-8b"), pre_free_bytes=70 * GiB,
                         post_free_bytes=55 * GiB, mem_fraction_static=0.8)
    assert measured.notes == () and measured.as_dict()["warnings"] == []
    l4 = plan_pool(load_model("llama-3.1-8b"), gpu="l4")
    assert l4.batch_cap == 0 and l4.notes[-1].startswith(
        "B_max=0: the pool of 3,509 tokens cannot hold one request of the full 131,072-token "
        "context; the longest prompt SGLang accepts here is 3,502 tokens")
    assert l4.notes[-1] not in l4.log_lines()  # SGLang prints no such line
    dense = plan_pool(load_model("llama-3-8b"), gpu=H100, swa_full_tokens_ratio=0.5)
    assert dense.notes[0] == ("--swa-full-tokens-ratio does not apply to llama-3-8b: it only "
                              "changes sliding-window hybrids with two pools (gpt-oss, Llama 4); "
                              "ignored, as SGLang ignores it")


def test_no_gpu_and_no_fraction_names_the_missing_fraction():
    with pytest.raises(ConfigError, match=re.escape(
            "mem_fraction_static is required when no GPU preset is given: SGLang's default "
            "comes from the GPU's total memory; valid: a fraction in (0, 1], or a gpu preset")):
        plan_pool(load_model("llama-3-8b"), pre_free_bytes=70 * GiB, post_free_bytes=55 * GiB)


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_a_page_larger_than_the_pool_names_the_page(version):
    """SGLang's "Not enough memory" (0.5.23 MemoryPoolConfig.__post_init__, 0.5.9
    init_memory_pool) asks for a larger fraction; pagedkv keeps the words and names the page."""
    room = plan_pool("llama-3.1-8b", gpu="l4", sglang_version=version).max_total_num_tokens
    assert room == {"0.5.23": 3509, "0.5.9": 31703}[version]
    with pytest.raises(NotEnoughMemoryError, match=re.escape(
            "Not enough memory. Please try to increase --mem-fraction-static. The cause here is "
            f"the page size, not the fraction: page_size={room + 1} is larger than the pool, "
            f"whose room for {room:,} tokens rounds down to zero pages of {room + 1:,} tokens; "
            f"valid: a page size of at most {room:,} tokens, or more memory for the pool")):
        # no chunk: SGLang's divisibility check is off (and f is given: -1's reserve is 24 GiB)
        f = plan_pool("llama-3.1-8b", gpu="l4", sglang_version=version).mem_fraction_static
        plan_pool("llama-3.1-8b", gpu="l4", page_size=room + 1, sglang_version=version,
                  chunked_prefill_size=-1, mem_fraction_static=f)
    # a cap under one page fails the same way, the cap being the room
    with pytest.raises(NotEnoughMemoryError, match="room for 100 tokens rounds down to zero pages"):
        plan_pool(load_model("llama-3-8b"), gpu=H100, page_size=128, max_total_tokens=100,
                  sglang_version=version)
