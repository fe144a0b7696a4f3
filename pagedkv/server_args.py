"""SGLang's start-up defaults that depend on the card: chunk size, CUDA-graph sizes, the reserve.

SGLang picks ``chunked_prefill_size``, the decode CUDA graphs' largest batch and the default
``mem_fraction_static`` from the GPU's total memory when the server starts. pagedkv follows
0.5.23 (``srt/arg_groups/memory_hook.py``, ``srt/arg_groups/cuda_graph_hook.py``) by default
and 0.5.9 (``srt/server_args.py``) on request. Memory here is MiB, as SGLang computes it.
"""

from __future__ import annotations

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.releases import DEFAULT_SGLANG_VERSION, Release, as_release

# The reserve's fixed terms, MiB, as SGLang writes them. An MLA model's prefill CUDA graphs
# (0.5.23 only: memory_hook.py, "MLA backend overhead is much higher than expected with fa3")
# take a flat amount instead of 8 MiB per captured size; both releases keep at least
# RESERVE_FLOOR_MIB on a card of more than RESERVE_FLOOR_ABOVE_MIB.
MLA_PREFILL_GRAPH_RESERVE_MIB = 1.5 * 1024
PREFILL_GRAPH_RESERVE_MIB_PER_SIZE = 8
RESERVE_FLOOR_MIB = 10 * 1024
RESERVE_FLOOR_ABOVE_MIB = 60 * 1024

# --triton-attention-num-kv-splits: the most splits SGLang's Triton decode backend cuts one
# request's KV into (metadata.py get_num_kv_splits_triton; 0.5.9 triton_backend.py), 8 by
# default and 16 on AMD (ROCm) GPUs, in both releases. Sources: 0.5.23
# srt/arg_groups/fields/exec_.py (ExecKernel.triton_attention_num_kv_splits) and
# srt/arg_groups/platform_hook.py (handle_amd_specifics); 0.5.9 srt/server_args.py
# (ServerArgs.triton_attention_num_kv_splits, ServerArgs._handle_amd_specifics).
TRITON_ATTENTION_NUM_KV_SPLITS = 8
TRITON_ATTENTION_NUM_KV_SPLITS_AMD = 16

# --max-prefill-tokens' default (both releases): the prompt tokens of one prefill pass, and
# the activation reserve's token count when chunked prefill is off (--chunked-prefill-size
# -1). 0.5.23 srt/arg_groups/fields/schedule.py, 0.5.9 srt/server_args.py
# (ServerArgs.max_prefill_tokens).
MAX_PREFILL_TOKENS = 16384


def gpu_memory_defaults(gpu_memory_mib: int, tp: int = 1,
                        sglang_version: str | Release = DEFAULT_SGLANG_VERSION) -> tuple[int, int]:
    """SGLang's ``(chunked_prefill_size, decode CUDA-graph max batch size)`` for one card.

    The classes are SGLang's: under 20 GiB (T4), under 35 GiB (RTX 4090, L4), under 60 GiB
    (A100-40GB, L40), under 160 GiB (H100, A100-80GB, H200), larger (MI300X). The one
    difference between the releases: 20-35 GiB cards chunk at 4096 tokens and capture decode
    graphs up to 48 requests (160 at tp >= 4) in 0.5.23, 2048 and 24 (80) in 0.5.9.
    Source: 0.5.23 ``srt/arg_groups/memory_hook.py`` ``handle_gpu_memory_settings`` (the
    decode size is ``cuda_graph_config.decode.max_bs``); 0.5.9 ``srt/server_args.py``
    ``ServerArgs._handle_gpu_memory_settings`` (the field is ``cuda_graph_max_bs``).

    Raises:
        ConfigError: a non-positive size, or an unknown ``sglang_version``.
    """
    check_positive_int("gpu_memory_mib", gpu_memory_mib)
    check_positive_int("tp", tp)
    release = as_release(sglang_version)
    gib = 1024
    if gpu_memory_mib < 20 * gib:
        return 2048, 8
    if gpu_memory_mib < 35 * gib:  # the one class the releases size differently
        return (release.chunked_prefill_size_20_35_gib,
                release.cuda_graph_max_bs_20_35_gib[0 if tp < 4 else 1])
    if gpu_memory_mib < 60 * gib:
        return 4096, 32 if tp < 4 else 160
    if gpu_memory_mib < 160 * gib:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def check_chunked_prefill_size(value: object, name: str = "chunked_prefill_size") -> int:
    """Return ``value`` if it is a valid ``--chunked-prefill-size``: -1 (chunked prefill off,
    SGLang's documented switch) or an integer >= 1.

    SGLang itself treats any value <= 0 as "off" (0.5.23 ``srt/arg_groups/memory_hook.py``
    ``handle_gpu_memory_settings`` tests ``chunked_prefill_size > 0``; 0.5.9
    ``srt/server_args.py`` ``_handle_gpu_memory_settings`` the same) but documents only -1;
    pagedkv refuses 0 and the other negatives rather than guess what a typo meant.

    Raises:
        ConfigError: anything else, naming ``name`` (the flag or parameter), the value and
            the valid range.
    """
    if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and value != -1):
        raise bad_value(name, value,
                        "-1 (chunked prefill off) or an integer >= 1 (tokens per chunk)")
    return value


def prefill_cuda_graph_sizes(max_bs: int) -> list[int]:
    """The token counts SGLang 0.5.23 captures a prefill CUDA graph for, up to ``max_bs``.

    4..32 step 4, 48..256 step 16, 288..512 step 32, 576..1024 step 64, 1280..4096 step 256,
    then every 512 up to ``max_bs`` (= ``chunked_prefill_size``): 42 sizes for 2,048, 50 for
    4,096, 58 for 8,192. Source: 0.5.23 ``srt/arg_groups/cuda_graph_hook.py``
    ``generate_prefill_cuda_graph_batch_sizes``.
    """
    check_positive_int("max_bs", max_bs)
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32),
             *range(576, 1025, 64), *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]
    return [s for s in sizes if s <= max_bs]


def prefill_cuda_graph_size_runs(max_bs: int) -> list[tuple[int, int, int]]:
    """:func:`prefill_cuda_graph_sizes` as runs ``(first, last, step)`` of one step each, for
    the book to list them: ``[(4, 32, 4), (48, 256, 16), ...]``. A run of one size has step 0.

    Raises:
        ConfigError: ``max_bs`` below 1.
    """
    runs: list[tuple[int, int, int]] = []
    sizes = prefill_cuda_graph_sizes(max_bs)
    for k, size in enumerate(sizes):
        step = size - sizes[k - 1] if k else 0
        if runs and runs[-1][2] in (0, step):
            runs[-1] = (runs[-1][0], size, step)
        else:
            runs.append((size, size, 0))
    return runs


def static_reserve_mib(
    gpu_memory_mib: int,
    tp: int = 1,
    pp: int = 1,
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
    *,
    sglang_version: str | Release = DEFAULT_SGLANG_VERSION,
    mla: bool = False,
    prefill_cuda_graph: bool = True,
) -> float:
    """MiB SGLang keeps outside ``mem_fraction_static`` for activations and CUDA graphs.

    ::

        reserve = 512 + 1.5 * max(chunked_prefill_size, 2048) + tp * pp / 8 * 1024
                  + 2 * cuda_graph_max_bs                                 # decode graphs
                  + 8 * len(prefill_cuda_graph_sizes(chunk))              # 0.5.23 only
        reserve = max(reserve, 10 GiB)  on cards over 60 GiB

    0.5.23 captures CUDA graphs for prefill too (on CUDA, by default), 8 MiB per captured
    size, or 1.5 GiB for an MLA model (``mla``); 0.5.9 has no such term. Pass
    ``prefill_cuda_graph=False`` for a platform without it (ROCm) or for
    ``--cuda-graph-backend-prefill disabled``. ``chunked_prefill_size`` and
    ``cuda_graph_max_bs`` (the decode graphs' largest batch) default to SGLang's for the card
    (:func:`gpu_memory_defaults`). A user's ``chunked_prefill_size`` replaces the card's in
    both terms, as in SGLang; -1 (chunking off) sizes the activations for
    ``max_prefill_tokens`` (16,384) tokens instead, and 0.5.23 then captures no prefill graph
    sizes (their largest is the chunk), though an MLA model keeps its flat 1.5 GiB.

    Left out (both releases): speculative decoding (0.5.9 adds 2 or 6 GiB), data-parallel
    attention, DeepEP buffers, multimodal models (scaled down again), and the AMD ``aiter``
    backend's extra ``* 0.85`` on ``f`` for models with a context over 8,192 tokens.
    Source: 0.5.23 ``srt/arg_groups/memory_hook.py`` ``handle_gpu_memory_settings`` and
    ``reserve_for_graph_mb``; 0.5.9 ``srt/server_args.py``
    ``ServerArgs._handle_gpu_memory_settings``.

    Raises:
        ConfigError: non-positive sizes (``chunked_prefill_size``: neither -1 nor >= 1), or an
            unknown ``sglang_version``.
    """
    chunk, graph_bs = gpu_memory_defaults(gpu_memory_mib, tp, sglang_version)
    check_positive_int("pp", pp)
    if chunked_prefill_size is not None:
        chunk = check_chunked_prefill_size(chunked_prefill_size)
    if cuda_graph_max_bs is not None:
        check_positive_int("cuda_graph_max_bs", cuda_graph_max_bs)
        graph_bs = cuda_graph_max_bs
    # Chunking off: SGLang sizes the activations for one whole --max-prefill-tokens batch.
    activation_tokens = max(chunk if chunk > 0 else MAX_PREFILL_TOKENS, 2048)
    reserve = 512 + 1.5 * activation_tokens + tp * pp / 8 * 1024 + 2 * graph_bs
    if as_release(sglang_version).prefill_cuda_graph_reserve and prefill_cuda_graph:
        # The prefill graphs' largest size is the chunk, so -1 captures none (an empty list);
        # an MLA model's flat term does not look at the list.
        reserve += (MLA_PREFILL_GRAPH_RESERVE_MIB if mla else
                    PREFILL_GRAPH_RESERVE_MIB_PER_SIZE
                    * (len(prefill_cuda_graph_sizes(chunk)) if chunk > 0 else 0))
    if gpu_memory_mib > RESERVE_FLOOR_ABOVE_MIB:
        reserve = max(reserve, RESERVE_FLOOR_MIB)
    return reserve


def default_mem_fraction_static(
    gpu_memory_mib: int,
    tp: int = 1,
    pp: int = 1,
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
    *,
    sglang_version: str | Release = DEFAULT_SGLANG_VERSION,
    mla: bool = False,
    prefill_cuda_graph: bool = True,
    vision: tuple[int, int] | None = None,
) -> float:
    """SGLang's default ``mem_fraction_static`` for one GPU of ``gpu_memory_mib`` MiB.

    ``f = round((gpu_mem - reserve) / gpu_mem, 3)`` with the reserve of
    :func:`static_reserve_mib` (same arguments). H100 80GB at tp 1: 0.830 in 0.5.23, 0.835
    in 0.5.9; RTX 4090: 0.704 and 0.847 (0.5.23 also raised the 20-35 GiB card's chunk and
    graph size, see :func:`gpu_memory_defaults`). Held against SGLang's own ``ServerArgs``
    (both releases, GPU memory mocked) by ``tests/reference``. Older releases used fixed
    values by TP size instead (0.88 at tp 1, ..., 0.79 at tp 16).

    ``vision``: a multimodal model's vision encoder, ``(num_hidden_layers, hidden_size)``:
    SGLang 0.5.23 then scales the rounded ``f`` by ``0.95 * clamp(1 - 0.1 * (c - 1), 0.8,
    1.05)``, ``c`` the encoder's ``layers * hidden^2`` over ViT-L/14's ``24 * 1024^2``
    (``memory_hook.py`` ``adjust_mem_fraction_for_vlm``).

    Raises:
        ConfigError: non-positive sizes, or an unknown ``sglang_version``.
    """
    reserve = static_reserve_mib(
        gpu_memory_mib, tp, pp, chunked_prefill_size, cuda_graph_max_bs,
        sglang_version=sglang_version, mla=mla, prefill_cuda_graph=prefill_cuda_graph)
    f = round((gpu_memory_mib - reserve) / gpu_memory_mib, 3)
    if vision is not None:
        layers, hidden = vision
        ratio = layers * hidden**2 / (24 * 1024**2)
        f = f * (0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0))))
    return f
