"""The memory SGLang profiles for the KV pool, and the request rows it derives from it.

``profile_tokens`` turns the two free-memory readings into the tokens a pool can hold before
caps and pages (with a multimodal model's feature-cache reservation and a linear-attention
hybrid's state-slot share taken out first); ``resolve_max_num_reqs`` then picks
``max_running_requests`` and the request rows. The caps, pages and the sliding-window split
between the two are :func:`pagedkv.sizing.plan_pool`'s.

Follows SGLang 0.5.23 ``python/sglang/srt/mem_cache/kv_cache_configurator.py``
(``KVCacheConfigurator._profile_available_bytes``, ``resolve_max_num_reqs``); in 0.5.9
``srt/model_executor/model_runner_kv_cache_mixin.py`` (``profile_max_num_token``,
``handle_max_mamba_cache``, ``init_memory_pool``) and ``model_runner.py``. The differences
are :class:`~pagedkv.releases.Release` fields. All memory is bytes, except where SGLang
computes in GiB (2^30 bytes), which is followed exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagedkv.configs.model_config import ModelSpec
from pagedkv.errors import NotEnoughMemoryError, check_positive_int
from pagedkv.hybrid_pools import cap_by_mamba, mamba_share, mamba_slots_per_request
from pagedkv.releases import Release
from pagedkv.units import GiB, fmt_gib

#: ``SGLANG_VLM_CACHE_SIZE_MB``'s default: MiB a multimodal model's feature cache takes out of
#: the KV budget (with the default CPU feature transport; GPU transports add 1 GiB).
VLM_CACHE_SIZE_MB = 100


def profile_max_num_token(
    pre_free_bytes: int, post_free_bytes: int, cell_size: int, mem_fraction_static: float
) -> int:
    """Tokens the pool can hold before caps and page rounding (SGLang ``profile_max_num_token``).

    ``floor((post - pre * (1 - f)) / cell_size)``, all in bytes. May be <= 0: the caller
    decides whether that is an error.
    """
    rest = post_free_bytes - pre_free_bytes * (1.0 - mem_fraction_static)
    return int(rest // cell_size)


def req_to_token_pool_size(max_total_num_tokens: int, context_len: int) -> int:
    """SGLang's default request rows: ``min(max(int(tokens / context_len * 512), 2048), 4096)``.

    That is 0.5.9's ``size`` of ``ReqToTokenPool`` (the request rows it hands out; 0.5.9's
    ``max_running_requests`` is then ``min(size, tokens // 2)``); 0.5.23 hands out
    ``min(this, tokens // 2)`` rows, its ``max_running_requests``, and allocates one more
    row, row 0, as padding (``pagedkv.lessons.glossary.REQUEST_ROWS_RULE``).
    Source: 0.5.23 ``mem_cache/kv_cache_configurator.py``
    ``KVCacheConfigurator.resolve_max_num_reqs`` and ``mem_cache/memory_pool.py``
    ``ReqToTokenPool``; 0.5.9 ``model_executor/model_runner_kv_cache_mixin.py``
    ``init_memory_pool`` and ``model_runner.py``. (Releases of early 2025 added one row to
    ``size``: their logs say ``max_running_requests=2049``.)
    """
    check_positive_int("max_total_num_tokens", max_total_num_tokens)
    check_positive_int("context_len", context_len)
    return min(max(int(max_total_num_tokens / context_len * 512), 2048), 4096)


def not_enough_memory(pre: int, post: int, f: float, weights_leave_no_memory: bool, *,
                      room_tokens: int = 0, page_size: int = 1, default_f: float | None = None,
                      chunked_prefill_size: int | None = None) -> NotEnoughMemoryError:
    """SGLang's start-up error when ``f * pre`` leaves no page for the pool after the weights.

    ``weights_leave_no_memory``: the weights take the whole static budget and the release
    says so (``Release.weights_leave_no_memory_error``, 0.5.23): the error of
    ``KVCacheConfigurator._profile_available_bytes`` ("Loaded weights leave no GPU memory").
    Otherwise (0.5.9, and 0.5.23 when some bytes are left but less than a page of tokens) the
    "Not enough memory" of ``init_memory_pool`` (0.5.23 ``MemoryPoolConfig.__post_init__``).
    SGLang's opening words are kept; pagedkv then says the cause in bytes and one number:

    * ``0 < room_tokens < page_size``: the pool has room for ``room_tokens`` tokens, less
      than one page, and rounds down to zero pages. Raising ``f`` is not what is missing
      (SGLang's advice still says so), a smaller page is: the message says both. Where
      ``chunked_prefill_size`` > 0 is no multiple of the page, SGLang stops earlier, at its
      argument check (0.5.23 ``srt/arg_groups/validation_hook.py``, 0.5.9
      ``ServerArgs.check_server_args``: "chunked_prefill_size must be divisible by
      page_size"), and the message says that too.
    * otherwise the weights outgrow the budget: the smallest ``f`` that holds them,
      ``1 - post/pre``, once (0.5.23 prints it twice, rounded up to 3 decimals and to 4,
      which reads as two different minimums), and, when it is at or above ``default_f``
      (SGLang's default for the card, which leaves the rest for activations and CUDA
      graphs), that such an ``f`` leaves the server no room to run.
    """
    need = (pre - post) / pre  # the smallest f whose budget holds the weights
    if 0 < room_tokens < page_size:
        earlier = ("" if not chunked_prefill_size or chunked_prefill_size < 0
                   or chunked_prefill_size % page_size == 0 else
                   f" (SGLang itself stops before sizing: chunked_prefill_size="
                   f"{chunked_prefill_size} is no multiple of it, and its argument check says "
                   "'chunked_prefill_size must be divisible by page_size')")
        return NotEnoughMemoryError(
            "Not enough memory. Please try to increase --mem-fraction-static. The cause "
            f"here is the page size, not the fraction: page_size={page_size} is larger than "
            f"the pool, whose room for {room_tokens:,} tokens rounds down to zero pages of "
            f"{page_size:,} tokens{earlier}; valid: a page size of at most {room_tokens:,} "
            "tokens, or more memory for the pool")
    why = (f"mem_fraction_static={f} keeps {fmt_gib(f * pre)} for weights + KV, but the "
           f"weights alone take {fmt_gib(pre - post)}, so f must exceed {need:.4f} "
           "(1 - available/pre)")
    if default_f is not None and need >= default_f:
        why += (f", at or above SGLang's default for this card ({default_f}), which keeps "
                "the rest for activations and CUDA graphs: no practical f fits; use a larger "
                "GPU, more tensor parallelism or a quantized checkpoint")
    if weights_leave_no_memory:
        return NotEnoughMemoryError(
            f"Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={f}. Raise --mem-fraction-static: {why}")
    return NotEnoughMemoryError(
        f"Not enough memory. Please try to increase --mem-fraction-static: {why}")


@dataclass(frozen=True)
class TokenProfile:
    """What :func:`profile_tokens` finds.

    Attributes:
        tokens: tokens of the cell size the profiled memory holds, before caps and pages.
        available: the bytes left for KV (None for a one-pool model, which needs none).
        weights_fill_budget: the weights take the whole static budget (nothing is left).
        lines: the log lines printed on the way (the multimodal reservation).
        mamba_slots: a linear-attention hybrid's state slots (0 otherwise).
        conv_state_bytes, ssm_state_bytes: one request's state slot over all its linear
            layers (0 otherwise).
    """

    tokens: int
    available: int | None
    weights_fill_budget: bool
    lines: tuple[str, ...] = ()
    mamba_slots: int = 0
    conv_state_bytes: int = 0
    ssm_state_bytes: int = 0


def profile_tokens(model: ModelSpec, pre_free_bytes: int, post_free_bytes: int,
                   mem_fraction_static: float, cell: int, release: Release, *, vision: bool,
                   tp: int, mamba_ratio: float, max_mamba_cache_size: int | None,
                   max_running_requests: int | None, disable_radix_cache: bool,
                   ) -> TokenProfile:
    """Tokens of ``cell`` bytes the profiled memory holds, before caps and pages.

    A one-pool model: :func:`profile_max_num_token`. A hybrid or a multimodal model with its
    vision path (``vision``) follows SGLang's GiB arithmetic exactly: the feature cache's
    reservation (``Release.multimodal_kv_reservation``) and a linear-attention hybrid's state
    share (:func:`pagedkv.hybrid_pools.mamba_share`) come off first.

    Returns:
        a :class:`TokenProfile`.

    Raises:
        ConfigError: a ``tp`` the linear-attention heads do not divide.
    """
    if not (model.is_hybrid or vision):
        tokens = profile_max_num_token(pre_free_bytes, post_free_bytes, cell, mem_fraction_static)
        fill = post_free_bytes - pre_free_bytes * (1.0 - mem_fraction_static) <= 0
        return TokenProfile(tokens, None, fill)
    lines: list[str] = []
    state: dict[str, int] = {}
    rest_gib = post_free_bytes / GiB - pre_free_bytes / GiB * (1.0 - mem_fraction_static)
    if vision and release.multimodal_kv_reservation:  # mm_runtime_reservation_gb
        rest_gib -= VLM_CACHE_SIZE_MB / 1024
        lines.append(f"Reserving {VLM_CACHE_SIZE_MB / 1024:.2f} GB of the KV budget for "
                     "post-sizing multimodal allocations (feature-transport pools + "
                     "embedding cache).")
    if model.family == "linear":
        conv, ssm = model.state_bytes(tp)
        share = mamba_share(rest_gib, state_bytes=conv + ssm, full_memory_ratio=mamba_ratio,
                            max_mamba_cache_size=max_mamba_cache_size,
                            max_running_requests=max_running_requests,
                            disable_radix_cache=disable_radix_cache,
                            keep_padding_slot=release.mamba_share_keeps_padding_slot)
        rest_gib = share.rest_gib
        state.update(mamba_slots=share.slots, conv_state_bytes=conv, ssm_state_bytes=ssm)
    available = int(rest_gib * (1 << 30))
    return TokenProfile(available // cell if cell else 0, available, rest_gib <= 0, tuple(lines),
                        **state)


def resolve_max_num_reqs(model: ModelSpec, tokens: int, profiled: int, context_len: int,
                         max_running_requests: int | None, release: Release, *,
                         state_slots: int, disable_radix_cache: bool,
                         tracking_slots: int = 0) -> tuple[int, int, list[str]]:
    """``max_running_requests`` and the request rows for a pool of ``tokens`` tokens.

    Without ``--max-running-requests``: :func:`req_to_token_pool_size` of the final pool
    (0.5.23) or of the ``profiled`` one (0.5.9, ``Release.req_rows_from_final_pool``), at
    most half the pool; with it, 0.5.23 still caps it at half the pool and says so. A
    linear-attention hybrid's ``state_slots`` cap it further, each running request counted
    as 3 + ``tracking_slots`` of them with the radix cache, 1 without
    (:func:`pagedkv.hybrid_pools.cap_by_mamba`).

    Returns:
        ``(max_running_requests, request rows, log lines)``.

    Raises:
        ConfigError: ``max_running_requests`` not a positive integer.
        NotEnoughMemoryError: no state slot fits (0.5.9's "max_running_request is zero").
    """
    lines: list[str] = []
    if max_running_requests is None:
        slots = req_to_token_pool_size(
            tokens if release.req_rows_from_final_pool else profiled,
            context_len)
        max_running_requests = min(tokens // 2, slots)
        if release.req_to_token_rows_are_cap:  # 0.5.23 sizes the rows to the cap
            slots = max_running_requests
        asked = None
    else:  # --max-running-requests: 0.5.23 still caps it at half the pool
        check_positive_int("max_running_requests", max_running_requests)
        asked = max_running_requests
        if release.cap_running_at_half_pool:
            max_running_requests = min(max_running_requests, tokens // 2)
        slots = max_running_requests
    capped: tuple[str, ...] = ()
    if model.family == "linear":
        max_running_requests, capped = cap_by_mamba(max_running_requests, state_slots,
                                                    disable_radix_cache,
                                                    warns=release.mamba_cap_warns,
                                                    tracking_slots=tracking_slots)
        slots = (max_running_requests if release.req_to_token_rows_are_cap else
                 min(slots, state_slots // mamba_slots_per_request(disable_radix_cache,
                                                                   tracking_slots)))
    if (release.cap_running_at_half_pool and asked is not None
            and max_running_requests < asked and not capped):
        lines.append(f"max_running_requests was reduced from the requested {asked} to "
                     f"{max_running_requests} (per dp worker) due to the available KV cache "
                     "capacity.")
    lines += capped
    return max_running_requests, slots, lines
