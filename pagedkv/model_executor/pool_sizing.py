"""Loading a checkpoint and sizing the KV pool for it, as SGLang's ``ModelRunner`` does at
start-up (``load_model``, ``profile_max_num_token``, ``init_memory_pool`` in
``python/sglang/srt/model_executor/model_runner.py``, 0.5.9 and 0.5.23).

On a GPU free memory is read before and after the weights arrive, and
:func:`pagedkv.sizing.plan_pool` applies ``profile_max_num_token``'s
``floor((post - pre * (1 - f)) / cell_size)``; a ``max_total_tokens`` caps the result. On
the CPU nothing is measured and the pool is ``max_total_tokens``, rounded down to whole
pages. :meth:`pagedkv.model_executor.model_runner.ModelRunner.load` builds the runner on what
:func:`load_and_size_pool` returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pagedkv.configs.model_config import ModelSpec
from pagedkv.errors import bad_value, check_fraction, check_positive_int
from pagedkv.model_executor.model_loader import (
    MemGetInfo,
    free_memory,
    kv_dtype_name,
    load_causal_lm,
    resolve_device,
    resolve_dtype,
)
from pagedkv.models.llama import check_causal_lm
from pagedkv.sizing import KVPoolPlan, default_mem_fraction_static, plan_pool
from pagedkv.units import MiB


@dataclass(frozen=True)
class LoadedModel:
    """A loaded model and the pool sized for it.

    Attributes:
        model: the causal LM, in eval mode, on its device.
        name: the model's name (hub id, folder or class name).
        plan: the sizing from free memory (None on the CPU, where nothing is measured).
        max_total_num_tokens: KV slots in the pool, a multiple of the page size.
        device_memory_bytes: the device's total memory (0: not measured, the CPU).
        pool_capped: True when the pool is ``max_total_tokens`` (rounded to pages), not what
            free memory left.
        notes: what the user should know about the settings, one line each.
    """

    model: nn.Module
    name: str
    plan: KVPoolPlan | None
    max_total_num_tokens: int
    device_memory_bytes: int
    pool_capped: bool
    notes: list[str]


def load_and_size_pool(source: Any, *, device: str | torch.device | None,
                       dtype: str | torch.dtype | None, page_size: int,
                       mem_fraction_static: float | None, max_total_tokens: int | None,
                       context_len: int | None, seed: int,
                       mem_get_info: MemGetInfo | None) -> LoadedModel:
    """Check the settings, load ``source`` and size its pool (arguments as
    :meth:`~pagedkv.model_executor.model_runner.ModelRunner.load`'s, errors too)."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    check_positive_int("page_size", page_size)
    if mem_fraction_static is not None:
        check_fraction("mem_fraction_static", mem_fraction_static)
    if max_total_tokens is not None:
        check_pool_cap(max_total_tokens, page_size)
    before = free_memory(dev, mem_get_info)
    if before is None and max_total_tokens is None:
        raise bad_value("max_total_tokens", None, "a token count: free memory is not "
                        "measured on the CPU, so the pool size must be given")
    notes = []
    if before is None and mem_fraction_static is not None:
        notes.append(f"mem_fraction_static={mem_fraction_static} is ignored on {dev}: no "
                     f"free memory is measured there, the pool is max_total_tokens="
                     f"{max_total_tokens}")
    model, name = load_causal_lm(source, dev, dt, seed)
    check_causal_lm(model)
    plan = None
    if before is not None:
        after = free_memory(dev, mem_get_info)
        assert after is not None
        spec = ModelSpec.from_config(model.config.to_dict(), name=name)
        fraction = (default_mem_fraction_static(before[1] // MiB)
                    if mem_fraction_static is None else mem_fraction_static)
        plan = plan_pool(spec, pre_free_bytes=before[0], post_free_bytes=after[0],
                         mem_fraction_static=fraction, page_size=page_size,
                         kv_cache_dtype=kv_dtype_name(dt), context_len=context_len,
                         max_total_tokens=max_total_tokens)
        tokens = plan.max_total_num_tokens
    else:
        assert max_total_tokens is not None
        tokens = max_total_tokens // page_size * page_size
    capped = max_total_tokens is not None and tokens == max_total_tokens // page_size * page_size
    return LoadedModel(model, name, plan, tokens, 0 if before is None else before[1], capped,
                       notes)


def check_pool_cap(max_total_tokens: object, page_size: int) -> int:
    """``max_total_tokens`` (SGLang's ``--max-total-tokens``) if it holds a whole page.

    The pool holds whole pages, so the cap is rounded down to a multiple of ``page_size``;
    a cap below one page would round to an empty pool.

    Raises:
        ConfigError: not an integer, or fewer tokens than one page (named with the value
            given and why it rounds to nothing).
    """
    check_positive_int("max_total_tokens", max_total_tokens)
    assert isinstance(max_total_tokens, int)
    if max_total_tokens < page_size:
        raise bad_value("max_total_tokens", max_total_tokens,
                        f"at least page_size={page_size}: the pool holds whole pages, and "
                        f"{max_total_tokens} tokens round down to "
                        f"{max_total_tokens // page_size} pages of {page_size}")
    return max_total_tokens
