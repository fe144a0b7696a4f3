"""What SGLang checks and warns about at start-up beside the pool arithmetic of
:mod:`pagedkv.sizing`: a context longer than the model's, flags the model ignores, the
GPUs without bfloat16, and what a capacity planner must not miss in a plan (a pool that
holds no full-context request; a ``--gpu`` estimate that takes the whole card as free).
"""

from __future__ import annotations

import os

from pagedkv.configs.model_config import ModelSpec
from pagedkv.errors import ConfigError, bad_value, check_positive_int
from pagedkv.gpus import GPUSpec
from pagedkv.pool_plan import KVPoolPlan
from pagedkv.releases import Release
from pagedkv.server_args import (
    MAX_PREFILL_TOKENS,
    check_chunked_prefill_size,
    default_mem_fraction_static,
)

#: The environment variable with which SGLang accepts a ``context_length`` longer than the
#: model's own (and warns); without it, start-up fails. Both releases:
#: ``srt/configs/model_config.py`` ``ModelConfig._derive_context_length``, ``srt/environ.py``.
ALLOW_LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"

#: GPU presets below compute capability 8.0 (the T4 is sm75): no bfloat16, so SGLang loads a
#: bf16 model as float16 there (both releases: 0.5.23
#: ``model_executor/model_runner_components/load_model_utils.py``
#: ``maybe_downgrade_dtype_for_legacy_gpu``, 0.5.9 ``model_runner.py`` ``ModelRunner.load_model``).
GPUS_BELOW_SM80 = frozenset({"t4"})

#: What a ``--gpu`` plan cannot know; a capacity planner should read it next to the numbers.
WHOLE_CARD_PREFIX = "free memory taken as the whole card"
WHOLE_CARD_NOTE = (
    WHOLE_CARD_PREFIX + " ({label}: {total}) before loading; a real server "
    "measures it after the CUDA context and communication buffers have taken theirs, so its "
    "pool comes out about 1-2 % smaller than this one; give the two 'avail mem' readings of "
    "its start-up log (--free-before-gib, --free-after-gib) for the exact pool")


def _env_flag(name: str) -> bool:
    """Read a boolean environment variable as SGLang's ``EnvBool`` does (``srt/environ.py``:
    true/1/yes/y or false/0/no/n, any case; unset or empty is false).

    Raises:
        ConfigError: any other value (SGLang raises ValueError at start-up the same way).
    """
    value = os.environ.get(name, "").strip().lower()
    if value in ("true", "1", "yes", "y"):
        return True
    if value in ("", "false", "0", "no", "n"):
        return False
    raise bad_value(name, os.environ[name], "true, 1, yes, y or false, 0, no, n")


def check_context_len(context_len: int, derived: int) -> tuple[str, ...]:
    """SGLang's rule for a ``context_length`` longer than the model's derived one: refused,
    unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` is set, then kept with a warning.

    Returns the warning (empty when ``context_len <= derived``). Source: both releases,
    ``srt/configs/model_config.py`` ``ModelConfig._derive_context_length`` (pagedkv leaves
    out its CI special case, ``SGLANG_IS_IN_CI``).

    Raises:
        ConfigError: ``context_len`` above ``derived`` without the environment variable,
            with SGLang's message; or the variable set to something that is not a boolean.
    """
    check_positive_int("context_len", context_len)
    if context_len <= derived:
        return ()
    msg = (f"User-specified context_length ({context_len}) is greater than the derived "
           f"context_length ({derived}). This may lead to incorrect model outputs or CUDA "
           "errors. Note that the derived context_length may differ from "
           "max_position_embeddings in the model's config.")
    if _env_flag(ALLOW_LONGER_CONTEXT_ENV):
        return (msg,)  # printed after "warning: ", as SGLang logs it at WARNING level
    raise bad_value("context_len", context_len,
                    f"an integer from 1 to {derived}, the model's derived context length "
                    f"(SGLang: {msg} To allow overriding this maximum, set the env var "
                    f"{ALLOW_LONGER_CONTEXT_ENV}=1)")


#: The models SGLang's sliding-window pool flags change (``SWA_SIZED``): Gemma 2 and 3 keep
#: one pool for every layer in SGLang, so these flags change nothing there either.
SWA_HYBRIDS = "sliding-window hybrids with two pools (gpt-oss, Llama 4)"


def flag_does_not_apply(flag: str, model: ModelSpec, applies_to: str) -> str:
    """The warning for an SGLang flag that the model ignores (SGLang accepts it silently)."""
    return (f"{flag} does not apply to {model.name}: it only changes {applies_to}; ignored, "
            "as SGLang ignores it")


def inapplicable_flag_warnings(
    model: ModelSpec, *, swa_full_tokens_ratio: float | None = None,
    mamba_full_memory_ratio: float | None = None, max_mamba_cache_size: int | None = None,
    enable_multimodal: bool = False,
) -> tuple[str, ...]:
    """Warnings for hybrid-only or multimodal-only flags given for a model they do not touch.

    SGLang reads ``swa_full_tokens_ratio`` only for a sliding-window hybrid, the mamba ratio
    and ``max_mamba_cache_size`` only for a linear-attention one, and ``enable_multimodal``
    only for an architecture with a vision path (0.5.23 ``srt/configs/model_config.py``:
    ``is_multimodal = enable_multimodal and ...``); for any other model each is accepted and
    ignored, so pagedkv warns instead of refusing.
    """
    warnings = []
    if swa_full_tokens_ratio is not None and model.family != "swa":
        warnings.append(flag_does_not_apply("--swa-full-tokens-ratio", model, SWA_HYBRIDS))
    for flag, value in (("--mamba-full-memory-ratio", mamba_full_memory_ratio),
                        ("--max-mamba-cache-size", max_mamba_cache_size)):
        if value is not None and model.family != "linear":
            warnings.append(flag_does_not_apply(flag, model, "linear-attention hybrids"))
    if enable_multimodal and not model.is_multimodal:
        warnings.append(flag_does_not_apply("--enable-multimodal", model,
                                            "models with a vision encoder"))
    return tuple(warnings)


def capacity_warnings(plan: KVPoolPlan) -> tuple[str, ...]:
    """What a capacity planner must not miss in ``plan``: a pool that cannot hold one request
    of the full context (``B_max`` 0), with the longest prompt SGLang accepts on it."""
    if plan.batch_cap > 0:
        return ()
    return (f"B_max=0: the pool of {plan.max_total_num_tokens:,} tokens cannot hold one "
            f"request of the full {plan.context_len:,}-token context; the longest prompt "
            f"SGLang accepts here is {plan.longest_prompt:,} tokens (and prompt plus output "
            "must fit in the pool); give the pool more memory or a shorter context (--context-len)",)


def resolve_mem_fraction_static(
    model: ModelSpec, gpu: GPUSpec | None, mem_fraction_static: float | None, *, tp: int,
    chunked_prefill_size: int | None, sglang_version: str | Release, enable_multimodal: bool,
) -> tuple[float, float | None]:
    """The fraction to size with (``mem_fraction_static``, else SGLang's default for
    ``gpu``), and SGLang's default for the card with the user's chunk (None without a GPU
    preset): the yardstick an error compares a needed fraction with.

    Raises:
        ConfigError: a ``chunked_prefill_size`` neither -1 nor >= 1; no fraction and no
            GPU preset; a default that comes out <= 0 (the reserve takes the whole card).
    """
    if chunked_prefill_size is not None:
        check_chunked_prefill_size(chunked_prefill_size)
    # SGLang's default for the card (with the user's chunk): the fraction when none is given,
    # and the yardstick for an f the weights would need (not_enough_memory)
    card_f = None if gpu is None else default_mem_fraction_static(
        gpu.memory_mib, tp, chunked_prefill_size=chunked_prefill_size,
        sglang_version=sglang_version, mla=model.is_mla,
        prefill_cuda_graph=gpu.platform == "cuda",
        vision=model.vision if enable_multimodal else None)
    if mem_fraction_static is None:
        if card_f is None:
            raise ConfigError(
                "mem_fraction_static is required when no GPU preset is given: SGLang's "
                "default comes from the GPU's total memory; valid: a fraction in (0, 1], "
                "or a gpu preset")
        if card_f <= 0:  # SGLang would go on with it; say which input did it
            prefill = (f"prefill of max_prefill_tokens={MAX_PREFILL_TOKENS} with chunking off"
                       if chunked_prefill_size == -1 else
                       f"prefill chunk of {chunked_prefill_size:,} tokens")
            raise ConfigError(
                f"SGLang's default mem_fraction_static for {gpu.label} with "
                f"chunked_prefill_size={chunked_prefill_size} is {card_f}: its "
                f"reserve for the activations of a {prefill} and for CUDA graphs takes the "
                "whole card; valid: a mem_fraction_static in (0, 1], or a smaller "
                "chunked_prefill_size (the card's default leaves room)")
        mem_fraction_static = card_f
    return mem_fraction_static, card_f
