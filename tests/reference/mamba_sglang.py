"""SGLang's own state-slot pool behind :func:`drive_mamba.run`'s interface, in either release.

A real ``HybridReqToTokenPool`` (with its ``MambaPool`` and, in 0.5.23, its
``MambaSlotAllocator``) built on this CPU over tiny state shapes (the tensors are a few KiB;
the slot bookkeeping does not depend on their size), and requests carrying only what the pool
reads and writes: 0.5.23's real ``ReqKvInfo`` (``req.kv``), 0.5.9's fields on the request
itself. The pool is driven as SGLang's scheduler drives it: ``alloc`` for a batch of requests,
``free_mamba_cache`` and ``free`` (the row) apart.

For the whole loop (:mod:`loop_sglang`): :func:`hybrid_req_to_token_pool` and
:func:`mamba_tree_cache`, the request table and the disabled cache SGLang 0.5.23 builds for a
linear-attention hybrid with ``--disable-radix-cache``, and :func:`qwen3_next_folder`, the model
folder its mamba cache component reads the config from (``model_path``).

Also here: the state shapes and bytes SGLang computes for a model config
(``Qwen3NextConfig.mamba2_cache_params`` under the case's attention-TP size) and the bytes of
the ``MambaPool`` it builds for them, on the meta device (0.5.23).
"""

from __future__ import annotations

import functools
import tempfile
import types
from pathlib import Path
from typing import Any

import sgl_objects as sg
import torch
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool, MambaPool, get_tensor_size_bytes

if not sg.OLD:
    from sglang.srt.managers.schedule_batch import ReqKvInfo

#: The tiny state every sequence case runs on: 2 layers, conv (24, 3), temporal (2, 4, 4).
SHAPE = dict(intermediate_size=8, n_groups=2, num_heads=2, head_dim=4, state_size=4,
             conv_kernel=4)
LAYERS = [0, 1]
PRESET = Path(__file__).parents[2] / "pagedkv" / "presets" / "models" / "qwen3-next-80b-a3b.json"


@functools.cache
def qwen3_next_folder() -> str:
    """A model folder holding the Qwen3-Next preset's ``config.json`` (made once per
    process): SGLang's mamba cache component reads the model config through
    ``model_path``."""
    folder = Path(tempfile.mkdtemp(prefix="pagedkv-qwen3-next-"))
    (folder / "config.json").write_text(PRESET.read_text())
    return str(folder)


def hybrid_req_to_token_pool(rows: int, slots: int, max_context_len: int,
                             overlap: bool, extra_buffer: bool = False) -> Any:
    """0.5.23's ``HybridReqToTokenPool`` as ``KVCacheConfigurator._build_hybrid_req_pool``
    builds it (``size=max_num_reqs`` rows, ``mamba_size=max_mamba_cache_size`` slots, no
    speculative decoding; ``extra_buffer``: the radix cache's ping-pong track slots), over
    the tiny state of :data:`SHAPE`."""
    params = Mamba2CacheParams(shape=Mamba2StateShape.create(tp_world_size=1, **SHAPE),
                               layers=LAYERS)
    return HybridReqToTokenPool(
        size=rows, mamba_size=slots, mamba_spec_state_size=rows,
        max_context_len=max_context_len, device="cpu", enable_memory_saver=False,
        cache_params=params, mamba_layer_ids=LAYERS, enable_mamba_extra_buffer=extra_buffer,
        enable_overlap_schedule=overlap)


def mamba_tree_cache(pool: Any, alloc: Any, page_size: int, radix: bool = False,
                     extra_buffer: bool = True) -> Any:
    """The cache 0.5.23 builds for a linear-attention hybrid (``registry.create_unified_radix_cache``):
    ``UnifiedRadixCache`` with the components ``(FULL, MAMBA)``, disabled with
    ``--disable-radix-cache`` (its mamba component then only frees a request's slot when it
    is released), else enabled, with the ``extra_buffer`` strategy's track slots or not
    (``no_buffer``)."""
    return sg.UnifiedRadixCache(sg.CacheInitParams(
        disable=not radix, req_to_token_pool=pool, token_to_kv_pool_allocator=alloc,
        page_size=page_size, tree_components=(sg.ComponentType.FULL, sg.ComponentType.MAMBA),
        eviction_policy="lru", enable_mamba_extra_buffer=radix and extra_buffer))


def _request() -> Any:
    if sg.OLD:  # 0.5.9 reads the request's own fields; a chunked request may keep its row
        return types.SimpleNamespace(req_pool_idx=None, mamba_pool_idx=None, is_chunked=1,
                                     kv_committed_len=1, is_dllm=lambda: False,
                                     mamba_ping_pong_track_buffer=None)
    return types.SimpleNamespace(kv=ReqKvInfo())


class SglangSlots:
    """SGLang's ``HybridReqToTokenPool`` of ``rows`` request rows and ``slots`` state slots."""

    def __init__(self, rows: int, slots: int) -> None:
        params = Mamba2CacheParams(shape=Mamba2StateShape.create(tp_world_size=1, **SHAPE),
                                   layers=LAYERS)
        common = dict(size=rows, mamba_size=slots, mamba_spec_state_size=slots,
                      max_context_len=8, device="cpu", enable_memory_saver=False,
                      cache_params=params, enable_mamba_extra_buffer=False)
        if not sg.OLD:
            common["mamba_layer_ids"] = LAYERS
        self.pool = HybridReqToTokenPool(**common)
        self.slot_free = (self.pool.mamba_pool if sg.OLD else self.pool.mamba_allocator)
        self.reqs: dict[str, Any] = {}

    def _kv(self, name: str) -> Any:
        req = self.reqs[name]
        return req if sg.OLD else req.kv

    def held(self, name: str) -> tuple[int, int]:
        kv = self._kv(name)
        row = -1 if kv.req_pool_idx is None else int(kv.req_pool_idx)
        return row, (-1 if kv.mamba_pool_idx is None else int(kv.mamba_pool_idx))

    def alloc(self, names: list[str]) -> list[int] | str | None:
        for name in names:
            self.reqs.setdefault(name, _request())
        try:
            rows = self.pool.alloc([self.reqs[n] for n in names])
        except AssertionError as exc:
            assert "Not enough space for mamba cache" in str(exc)
            return "no state slot"
        if rows is not None and not sg.OLD:
            for name in names:  # the request now holds KV (a reused row must)
                self.reqs[name].kv.kv_allocated_len = 1
        return None if rows is None else [int(r) for r in rows]

    def free_slot(self, name: str) -> None:
        self.pool.free_mamba_cache(self.reqs[name])

    def free_row(self, name: str) -> None:
        self.pool.free(self.reqs[name])
        if not sg.OLD:
            self.reqs[name].kv.kv_allocated_len = 0

    def state(self) -> dict[str, Any]:
        return {"rows_free": [int(r) for r in self.pool.free_slots],
                "slots_free": [int(s) for s in self.slot_free.free_slots],
                "available": (self.pool.available_size(), self.slot_free.available_size())}

    def mapping(self, rows: list[int]) -> list[int]:
        return [int(s) for s in self.pool.get_mamba_indices(torch.tensor(rows))]


def state_bytes(config: dict[str, Any], tp: int, slots: int) -> dict[str, Any]:
    """SGLang 0.5.23's state for ``config`` on one rank of attention-TP size ``tp``: its
    shapes, dtypes, layers, ``mamba_cache_per_req``, and the conv and temporal bytes and
    ``mem_usage`` of the ``MambaPool`` of ``slots`` slots it builds (on the meta device)."""
    import pools_sglang
    from sglang.srt.runtime_context import get_context

    override = get_context().override_server_args(tp_size=tp, device="cpu")
    override.install()
    try:
        params = pools_sglang.model_config(config).hf_config.mamba2_cache_params
    finally:
        override.restore()
    had_meta = hasattr(torch, "meta")
    if not had_meta:  # the pool asks the device module for streams; meta has none
        torch.meta = torch.cpu
    try:
        pool = MambaPool(size=slots, spec_state_size=slots, cache_params=params,
                         mamba_layer_ids=params.layers, device="meta")
    finally:
        if not had_meta:
            del torch.meta
    return {"conv": [tuple(s) for s in params.shape.conv], "temporal": tuple(params.shape.temporal),
            "dtypes": (str(params.dtype.conv).removeprefix("torch."),
                       str(params.dtype.temporal).removeprefix("torch.")),
            "layers": tuple(params.layers), "per_req": params.mamba_cache_per_req,
            "conv_bytes": get_tensor_size_bytes(pool.mamba_cache.conv),
            "ssm_bytes": get_tensor_size_bytes(pool.mamba_cache.temporal),
            "mem_usage": pool.mem_usage}
