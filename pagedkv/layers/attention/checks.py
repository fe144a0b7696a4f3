"""Validate decode-attention inputs in Python before any kernel launch.

A Triton kernel trusts its pointers: a slot id past the end of the pool reads (or, under
the CPU interpreter, segfaults on) memory that is not the pool. SGLang's Triton backend
does not check, because its own scheduler builds every index. pagedkv is a teaching
package whose callers build tables by hand, so every launch is preceded by these checks;
each failure raises :class:`pagedkv.errors.ConfigError` naming the parameter, the value
and the valid range.

Two kinds of check, split so that a model's decode step pays for the expensive one once:

- :func:`check_decode_layout`: shapes, dtypes, devices, strides. Tensor metadata only, no
  read of any value, so no device-to-host synchronisation.
- :func:`check_decode_values`: every row, length and slot the kernel will read. These read
  values; on a GPU tensor each read waits for the device (a sync).

:func:`check_decode_inputs` runs both (the kernel's public entry points, hand-built tables).
A real model's pass runs the value checks once, on the host copies of the batch's table
before it is uploaded (:func:`pagedkv.layers.attention.backend.init_forward_metadata`), and
each layer's launch then runs the layout checks only: SGLang trusts its scheduler in every
layer, pagedkv checks the batch once at the engine's boundary with the same errors.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from pagedkv.errors import PagedKVError, bad_value

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)
MAX_KV_SPLITS = 64
MAX_HEAD_DIM = 256  # one [32, D] fp32 K and V tile per program must fit on chip


def interpreted() -> bool:
    """True when Triton runs through its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@dataclass(frozen=True)
class DecodeShape:
    """Sizes read from validated inputs (all counts; ``max_seq_len`` in tokens)."""

    batch: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    num_slots: int
    max_seq_len: int

    @property
    def group(self) -> int:
        """Query heads per KV head: 1 for MHA, H_q for MQA."""
        return self.num_q_heads // self.num_kv_heads


def _tensor(name: str, value: object, ndim: int, dtypes: tuple[torch.dtype, ...]) -> None:
    if not isinstance(value, torch.Tensor):
        raise bad_value(name, type(value).__name__, f"a {ndim}-D torch.Tensor")
    if value.dim() != ndim:
        raise bad_value(f"{name}.shape", tuple(value.shape), f"a {ndim}-D shape")
    if value.dtype not in dtypes:
        raise bad_value(f"{name}.dtype", value.dtype, " or ".join(map(str, dtypes)))


def _device(name: str, value: torch.Tensor, expected: torch.device) -> None:
    if value.device != expected:
        raise bad_value(f"{name}.device", str(value.device), f"{expected} (the device of q)")


def check_launch_device(q: torch.Tensor) -> None:
    """Triton compiles for CUDA, or interprets on the CPU: q must live where it runs.

    Raises:
        ConfigError: q on the wrong device.
        PagedKVError: triton was imported before ``TRITON_INTERPRET=1`` was set, so its own
            helpers (``tl.zeros``, ``tl.max``) were built for a GPU and cannot be interpreted.
    """
    if interpreted() and not isinstance(tl.zeros, InterpretedFunction):
        raise PagedKVError(
            "triton was imported before TRITON_INTERPRET=1 was set: import pagedkv.layers.attention "
            "before anything that imports triton (transformers does), or export "
            "TRITON_INTERPRET=1 before starting Python")
    if not isinstance(q, torch.Tensor):
        raise bad_value("q", type(q).__name__, "a 3-D torch.Tensor")
    want = "cpu" if interpreted() else "cuda"
    if q.device.type != want:
        why = "TRITON_INTERPRET=1 runs kernels on the CPU" if want == "cpu" else "a CUDA device"
        raise bad_value("q.device", str(q.device), f"a {want} tensor ({why})")


def check_scale_and_splits(sm_scale: float | None, num_kv_splits: int | None) -> None:
    """``sm_scale`` a finite float > 0 (or None); ``num_kv_splits`` an int in [1, 64] (or None)."""
    if sm_scale is not None and (
        isinstance(sm_scale, bool)
        or not isinstance(sm_scale, (int, float))
        or not math.isfinite(sm_scale)
        or sm_scale <= 0
    ):
        raise bad_value("sm_scale", sm_scale, "a finite float > 0, or None for 1/sqrt(D)")
    if num_kv_splits is not None and (
        isinstance(num_kv_splits, bool)
        or not isinstance(num_kv_splits, int)
        or not 1 <= num_kv_splits <= MAX_KV_SPLITS
    ):
        raise bad_value("num_kv_splits", num_kv_splits, f"an integer in [1, {MAX_KV_SPLITS}]")


def check_decode_layout(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    table: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    table_name: str = "req_to_token",
) -> tuple[int, int, int, int, int]:
    """Check shapes, dtypes, devices and strides; read no tensor value (no device sync).

    Args: as :func:`check_decode_inputs`.

    Returns:
        ``(batch, num_q_heads, num_kv_heads, head_dim, num_slots)``.

    Raises:
        ConfigError: naming the first offending parameter, its value and the valid range.
    """
    _tensor("q", q, 3, FLOAT_DTYPES)
    _tensor("k_cache", k_cache, 3, FLOAT_DTYPES)
    _tensor("v_cache", v_cache, 3, FLOAT_DTYPES)
    _tensor(table_name, table, 2, (torch.int32,))
    _tensor("req_pool_indices", req_pool_indices, 1, INDEX_DTYPES)
    _tensor("seq_lens", seq_lens, 1, INDEX_DTYPES)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), (table_name, table),
                    ("req_pool_indices", req_pool_indices), ("seq_lens", seq_lens)):
        _device(name, t, q.device)
    batch, num_q_heads, head_dim = q.shape
    num_slots, num_kv_heads, _ = k_cache.shape
    if batch < 1:
        raise bad_value("q.shape[0]", batch, "a batch of >= 1 requests")
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise bad_value("q.shape[2]", head_dim, f"a head dim in [1, {MAX_HEAD_DIM}]")
    if num_kv_heads < 1 or num_q_heads % num_kv_heads:
        raise bad_value("k_cache.shape[1]", num_kv_heads,
                        f"a divisor of the {num_q_heads} query heads (MHA, GQA or MQA)")
    if tuple(k_cache.shape[1:]) != (num_kv_heads, head_dim):
        raise bad_value("k_cache.shape", tuple(k_cache.shape), f"[num_slots, H_kv, {head_dim}]")
    if v_cache.shape != k_cache.shape:
        raise bad_value("v_cache.shape", tuple(v_cache.shape), f"{tuple(k_cache.shape)} (k_cache)")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise bad_value(f"{name}.dtype", t.dtype, f"{q.dtype} (the dtype of q)")
        if t.stride(2) != 1:
            raise bad_value(f"{name}.stride(2)", t.stride(2), "1 (contiguous head dim)")
    if num_slots < 1:
        raise bad_value("k_cache.shape[0]", num_slots, "a pool of >= 1 slots")
    for name, t in (("req_pool_indices", req_pool_indices), ("seq_lens", seq_lens)):
        if t.shape[0] != batch:
            raise bad_value(f"{name}.shape", tuple(t.shape), f"({batch},) (one per request in q)")
    if table.stride(1) != 1:
        raise bad_value(f"{table_name}.stride(1)", table.stride(1), "1 (contiguous rows)")
    return batch, num_q_heads, num_kv_heads, head_dim, num_slots


def check_decode_values(
    table: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    num_slots: int,
    *,
    table_name: str = "req_to_token",
    page_size: int = 1,
) -> int:
    """Check every row, length and slot (or page) a decode will read; return the longest
    sequence (tokens). Reads values: give host tensors to avoid a device sync.

    Args:
        table: int32 ``[R, W]`` slot ids (``page_size`` 1) or page ids.
        req_pool_indices: ``[B]`` rows of ``table`` in ``[0, R)``.
        seq_lens: ``[B]`` tokens to attend over, in ``[1, W * page_size]``.
        num_slots: slots in the pool (``k_cache.shape[0]``).
        table_name, page_size: as :func:`check_decode_inputs`.

    Raises:
        ConfigError: naming the first offending row, length or entry, its value and the
            valid range.
    """
    num_rows, width = table.shape
    bad = (req_pool_indices < 0) | (req_pool_indices >= num_rows)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise bad_value(f"req_pool_indices[{i}]", int(req_pool_indices[i]),
                        f"a row of {table_name} in [0, {num_rows})")
    row_width = width * page_size
    bad = (seq_lens < 1) | (seq_lens > row_width)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise bad_value(f"seq_lens[{i}]", int(seq_lens[i]), f"a length in [1, {row_width}]")
    _check_entries(table, table_name, req_pool_indices, seq_lens, page_size, num_slots)
    return int(seq_lens.max())


def check_decode_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    table: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    table_name: str = "req_to_token",
    page_size: int = 1,
) -> DecodeShape:
    """Check shapes, dtypes, devices, lengths and every slot (or page) a decode will read:
    :func:`check_decode_layout`, then :func:`check_decode_values` (which syncs on a GPU).

    Args:
        q: ``[B, H_q, D]`` float32/float16/bfloat16, ``1 <= D <= 256``.
        k_cache, v_cache: ``[num_slots, H_kv, D]``, q's dtype and device, last dim contiguous.
        table: int32 ``[R, W]``, rows contiguous: slot ids (``req_to_token``, ``page_size`` 1) or page ids
            (``page_table``, a page holds ``page_size`` consecutive slots).
        req_pool_indices: int32/int64 ``[B]``, rows of ``table`` in ``[0, R)``.
        seq_lens: int32/int64 ``[B]``, tokens to attend over, in ``[1, W * page_size]``.
        table_name: the name used in error messages.
        page_size: slots per page; 1 means the table holds slot ids.

    Returns:
        The sizes, as a :class:`DecodeShape`.

    Raises:
        ConfigError: naming the first offending parameter, its value and the valid range.
    """
    layout = check_decode_layout(q, k_cache, v_cache, table, req_pool_indices, seq_lens,
                                 table_name=table_name)
    longest = check_decode_values(table, req_pool_indices, seq_lens, layout[4],
                                  table_name=table_name, page_size=page_size)
    return DecodeShape(*layout, longest)


def _check_entries(
    table: torch.Tensor,
    table_name: str,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    page_size: int,
    num_slots: int,
) -> None:
    """Every entry the kernel will read must address a whole page inside the pool."""
    rows = table[req_pool_indices.long()]
    used = torch.arange(table.shape[1], device=table.device)[None, :] < (
        (seq_lens.long() + page_size - 1) // page_size
    )[:, None]
    limit = num_slots // page_size
    bad = used & ((rows < 0) | (rows >= limit))
    if bool(bad.any()):
        b, col = (int(x) for x in bad.nonzero()[0])
        row = int(req_pool_indices[b])
        what = "a slot" if page_size == 1 else f"a page id (page_size={page_size})"
        raise bad_value(f"{table_name}[{row}, {col}]", int(table[row, col]),
                        f"{what} in [0, {limit}) for a pool of {num_slots} slots")
