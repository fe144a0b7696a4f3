"""SGLang's default attention backend, how backends index the pool, and forced page sizes,
per release (hand-checked against each release's source)."""

from __future__ import annotations

import pytest

from pagedkv.errors import ConfigError
from pagedkv.lessons.attention_backends import (
    BACKENDS,
    PAGE,
    TOKEN,
    backend_rows,
    default_attention_backend,
    forced_page_size_when,
    forced_page_sizes,
    gpt_oss_attention_backend,
    gpt_oss_rule_words,
    resolve_page_size,
)
from pagedkv.releases import differences


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_default_backend_per_gpu(version: str) -> None:
    assert default_attention_backend(90, version) == "fa3"  # H100
    assert default_attention_backend(100, version) == "trtllm_mha"  # B200
    assert default_attention_backend(120, version) == "flashinfer"  # RTX 5090: no trtllm_mha
    assert default_attention_backend(89, version) == "flashinfer"  # L4, RTX 4090
    assert default_attention_backend(80, version) == "flashinfer"  # A100
    assert default_attention_backend(89, version, flashinfer_installed=False) == "triton"
    assert default_attention_backend(0, version, platform="rocm") == "aiter"


def test_default_backend_differences_between_releases() -> None:
    # 0.5.23 only: attention sinks avoid FlashInfer; asymmetric K/V widths pick fa4 on sm_100.
    assert default_attention_backend(89, "0.5.23", attention_sinks=True) == "triton"
    assert default_attention_backend(89, "0.5.9", attention_sinks=True) == "flashinfer"
    assert default_attention_backend(100, "0.5.23", asymmetric_kv=True) == "fa4"
    assert default_attention_backend(100, "0.5.9", asymmetric_kv=True) == "trtllm_mha"


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_gpt_oss_has_its_own_rule(version: str) -> None:
    # 0.5.23 gpt_oss.py _gpt_oss_overrides; 0.5.9 server_args.py 1336-1341 (hand-checked)
    assert gpt_oss_attention_backend(90, version) == "fa3"  # H100
    assert gpt_oss_attention_backend(100, version) == "trtllm_mha"  # B200
    assert gpt_oss_attention_backend(103, version) == "trtllm_mha"  # B300
    assert gpt_oss_attention_backend(120, version) == "triton"  # RTX 5090: Blackwell, not sm_100
    assert gpt_oss_attention_backend(89, version) == "triton"  # not flashinfer, sinks or not
    # AMD: 0.5.23 names aiter; 0.5.9's is_sm*_supported are false off CUDA, so triton
    assert gpt_oss_attention_backend(0, version, platform="rocm") == (
        "aiter" if version == "0.5.23" else "triton")
    with pytest.raises(ConfigError, match=r"platform='mps' is invalid"):
        gpt_oss_attention_backend(90, version, platform="mps")


def test_gpt_oss_rule_words_name_consumer_blackwell_and_each_releases_amd_choice() -> None:
    words = gpt_oss_rule_words()
    assert words.startswith("FA3 on Hopper GPUs (sm_90")
    assert "TRT-LLM on Blackwell data centre GPUs (sm_100" in words
    assert "Triton on every other NVIDIA GPU, the RTX 5090 (Blackwell consumer, sm_120) included" in words
    assert words.endswith("on AMD GPUs aiter in 0.5.23, Triton in 0.5.9")


def test_the_book_kernel_follows_the_fallback() -> None:
    # Triton is the default on no NVIDIA class of the table: the book's kernel follows a fallback.
    assert all("triton" not in (new, old) for g, new, old in backend_rows() if g.platform == "cuda")
    assert [g.sm for g, _, _ in backend_rows()][:2] == [90, 100]


def test_indexing_per_backend() -> None:
    assert BACKENDS["triton"].indexes == BACKENDS["flashinfer"].indexes == TOKEN
    assert {BACKENDS[b].indexes for b in ("fa3", "fa4", "trtllm_mha", "trtllm_mla",
                                          "flashmla")} == {PAGE}
    assert BACKENDS["flashinfer"].source.endswith("layers/attention/flashinfer_backend.py")


@pytest.mark.parametrize(("backend", "asked", "v0523", "v059"), [
    ("trtllm_mha", None, 64, 64),  # unset: 64, so an sm_100 server pages by 64 by default
    ("trtllm_mha", 16, 16, 16),
    ("trtllm_mha", 128, 128, 64),  # 128 accepted only by 0.5.23
    ("trtllm_mha", 1, 64, 64),
    ("flashmla", 1, 64, 64),
    ("trtllm_mla", 32, 32, 32),
    ("trtllm_mla", 16, 64, 64),
    ("fa4", None, 128, 128),
    ("fa3", None, 1, 1),
    ("fa3", 16, 16, 16),
    ("flashinfer", 64, 64, 64),
    ("triton", None, 1, 1),
])
def test_resolve_page_size(backend: str, asked: int | None, v0523: int, v059: int) -> None:
    assert resolve_page_size(backend, asked, "0.5.23") == v0523
    assert resolve_page_size(backend, asked, "0.5.9") == v059


def test_backends_present_in_one_release_only() -> None:
    assert resolve_page_size("cutlass_mla", None, "0.5.9") == 128
    assert forced_page_sizes("cutedsl_mla", "0.5.23") == ((32, 64), 64)
    with pytest.raises(ConfigError, match=r"backend='cutlass_mla' is invalid; valid: a backend "
                                          r"of SGLang 0.5.23: aiter, cutedsl_mla"):
        resolve_page_size("cutlass_mla", None, "0.5.23")
    with pytest.raises(ConfigError, match=r"backend='hpc_ops' is invalid; valid: a backend of "
                                          r"SGLang 0.5.9"):
        forced_page_sizes("hpc_ops", "0.5.9")


def test_fa4_page_size_conditions() -> None:
    # 0.5.23 overrides.py _fa4_page_constraint: non-MLA, sm_100, EAGLE topk <= 1, any flag;
    # 0.5.9 server_args.py: non-MLA, only `prefill_attention_backend == "fa4"`
    assert forced_page_sizes("fa4", "0.5.23") == forced_page_sizes("fa4", "0.5.9") == ((128,), 128)
    assert forced_page_size_when("fa4", "0.5.23") == (
        "for a non-MLA model on sm_100 with `--speculative-eagle-topk` "
        "(how many candidate tokens each draft step keeps in EAGLE, a speculative-decoding "
        "method whose draft proposes a tree of tokens) unset or at most 1, whichever of the "
        "three backend flags names fa4")
    assert forced_page_size_when("fa4", "0.5.9") == (
        "for a non-MLA model, only through `--prefill-attention-backend fa4`")
    assert forced_page_size_when("flashmla", "0.5.23") == forced_page_size_when("fa3", "0.5.9") == ""
    with pytest.raises(ConfigError, match=r"backend='hpc_ops' is invalid"):
        forced_page_size_when("hpc_ops", "0.5.9")
    row = next(d for d in differences() if d[0] == "page sizes a backend forces")
    assert row[1].endswith("fa4: 128 -> 128 (for a non-MLA model, only through "
                           "`--prefill-attention-backend fa4`)")
    assert "fa4: 128 -> 128 (for a non-MLA model on sm_100 with `--speculative-eagle-topk`" in row[2]


def test_errors() -> None:
    with pytest.raises(ConfigError, match=r"page_size=0 is invalid"):
        resolve_page_size("fa3", 0)
    with pytest.raises(ConfigError, match=r"sm=60 is invalid; valid: an integer >= 70"):
        default_attention_backend(60)
    with pytest.raises(ConfigError, match=r"platform='mps' is invalid"):
        default_attention_backend(90, platform="mps")
    with pytest.raises(ConfigError, match=r"sglang_version='0.4' is invalid"):
        default_attention_backend(90, "0.4")
