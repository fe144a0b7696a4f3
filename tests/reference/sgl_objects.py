"""SGLang's own objects, built the way its scheduler builds them, in either release.

Every class here is imported from the installed SGLang (0.5.9 or 0.5.23, whichever this
interpreter has); this module only hides where each lives in that release and how it is
constructed, so the drivers read the same for both:

- :func:`configure`: the server arguments the memory paths read (page size, radix cache on
  or off). 0.5.9: a stand-in object published as the global server args; 0.5.23: a real
  ``ServerArgs`` published through its runtime context (``override_server_args``).
- :func:`allocator`: ``TokenToKVPoolAllocator`` (page size 1) or ``PagedTokenToKVPoolAllocator``
  with ``need_sort=False`` and no K/V buffers (only the index bookkeeping runs), as the
  default single-GPU server builds them. ``kernels`` picks how paged allocation runs:
  ``"triton"`` (the CUDA path, here in Triton's interpreter) or ``"torch"`` (SGLang's plain
  torch code for the same arithmetic: 0.5.23's ``alloc_extend_naive``/``alloc_decode_naive``,
  which 0.5.23 itself picks on a CPU; in 0.5.9 ``alloc_extend_naive``, which 0.5.9 uses for
  very long extends; 0.5.9 has no torch decode path, so its decodes always run the kernel).
- :func:`tree_cache`: 0.5.9 ``RadixCache`` (radix cache on) or ``ChunkCache`` (off); 0.5.23
  ``UnifiedRadixCache`` with its default Rust core, enabled or ``disable=True``.
- :func:`request`: a real ``Req`` with given token ids.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import sgl_boot

sgl_boot.load()

import torch  # noqa: E402
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch  # noqa: E402, F401
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder  # noqa: E402, F401
from sglang.srt.mem_cache import allocator as sg_allocator  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402, F401
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402, F401

VERSION = sgl_boot.VERSION
OLD = VERSION == "0.5.9"

if OLD:
    from sglang.srt.mem_cache import common as alloc_helpers
    from sglang.srt.mem_cache.chunk_cache import ChunkCache
    from sglang.srt.mem_cache.common import release_kv_cache
    from sglang.srt.mem_cache.radix_cache import RadixCache
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    checkpoint_kv_cache = None
else:
    from sglang.srt.mem_cache import allocation as alloc_helpers  # noqa: F401
    from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache  # noqa: F401
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.runtime_context import get_context


# ----- server arguments ------------------------------------------------------------------
class ServerArgsStandIn:
    """What 0.5.9's memory paths read from the global ``ServerArgs``; other fields read as
    None (the defaults of a single-GPU server without speculative decoding)."""

    def __init__(self, page_size: int, disable_radix_cache: bool) -> None:
        self.page_size = page_size
        self.disable_radix_cache = disable_radix_cache
        self.speculative_algorithm = None
        self.disaggregation_mode = "null"
        self.attention_backend = "triton"
        self.pp_max_micro_batch_size = 1 << 30

    def enable_mamba_extra_buffer(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


_active: Any = None
_configured: tuple[int, bool] | None = None


def configure(page_size: int, radix: bool = True) -> Any:
    """Publish the server arguments for ``page_size`` and the radix cache on/off; return
    the published object (0.5.9 ``retract_decode`` takes it as an argument)."""
    global _active, _configured
    if _configured == (page_size, radix):
        return _active
    if OLD:
        _active = ServerArgsStandIn(page_size, not radix)
        set_global_server_args_for_scheduler(_active)
    else:
        if _active is not None:
            _active.restore()
        _active = get_context().override_server_args(page_size=page_size,
                                                     disable_radix_cache=not radix)
        _active.install()
    _configured = (page_size, radix)
    return _active


# ----- pools and caches ----------------------------------------------------------------------
_EXTEND_NAIVE = getattr(sg_allocator, "alloc_extend_naive", None)


class _TorchExtendLaunch:
    """0.5.9: runs ``alloc_extend_naive`` (SGLang's torch version of ``alloc_extend_kernel``)
    where the kernel would be launched; the arguments are the kernel's, in its order."""

    def __getitem__(self, grid: Any) -> Any:
        def run(pre, seq, last, free_pages, out, bs_upper, page_size, max_tokens) -> None:
            # free_pages arrives padded (sgl_boot), so a short pool reads zeros, as the
            # kernel does; the allocator then discards the result.
            _EXTEND_NAIVE(pre, seq, last, free_pages, out, page_size, out.device)

        return run


def _use_0509_extend(kernels: str) -> None:
    """Point 0.5.9's padded extend launch (``sgl_boot``) at the kernel or the torch code."""
    padded = sg_allocator.alloc_extend_kernel
    if not hasattr(padded, "triton"):
        padded.triton = padded.kernel
    padded.kernel = padded.triton if kernels == "triton" else _TorchExtendLaunch()


def allocator(page_size: int, size: int, kernels: str = "torch") -> Any:
    """SGLang's allocator for a pool of ``size`` token slots (slot/page 0 reserved)."""
    if page_size == 1:
        return sg_allocator.TokenToKVPoolAllocator(size, torch.float16, "cpu", None, False)
    alloc = sg_allocator.PagedTokenToKVPoolAllocator(size, page_size, torch.float16, "cpu",
                                                     None, False)
    if OLD:
        _use_0509_extend(kernels)
    else:
        alloc.use_triton_kernels = kernels == "triton"
    return alloc


def swa_allocator(page_size: int, size: int, size_swa: int, kernels: str = "torch") -> Any:
    """0.5.23's ``SWATokenToKVPoolAllocator`` over a real ``SWAKVPool`` of one full and one
    sliding-window layer (one head of dimension 1: the buffers are tiny, only the index
    bookkeeping matters), ``need_sort=False`` as the single-GPU server builds it.
    ``kernels`` as in :func:`allocator`, for both pools."""
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    kv = SWAKVPool(size=size, size_swa=size_swa, page_size=page_size, dtype=torch.bfloat16,
                   head_num=1, head_dim=1, v_head_dim=1, swa_attention_layer_ids=[1],
                   full_attention_layer_ids=[0], device="cpu")
    alloc = SWATokenToKVPoolAllocator(size, size_swa, page_size, torch.bfloat16, "cpu", kv, False)
    if page_size > 1:
        for pool in (alloc.full_attn_allocator, alloc.swa_attn_allocator):
            pool.use_triton_kernels = kernels == "triton"
    return alloc


def req_to_token_pool(rows: int, context_len: int) -> Any:
    """SGLang's ``ReqToTokenPool`` (0.5.23 keeps row 0 back, so one more row is made)."""
    return ReqToTokenPool(rows + 1, context_len, "cpu", enable_memory_saver=False)


def tree_cache(pool: Any, alloc: Any, page_size: int, radix: bool = True) -> Any:
    """The prefix cache the scheduler builds: the radix tree, or the disabled cache."""
    if OLD:
        params = CacheInitParams(disable=not radix, req_to_token_pool=pool,
                                 token_to_kv_pool_allocator=alloc, page_size=page_size)
        return RadixCache(params) if radix else ChunkCache(params)
    return UnifiedRadixCache(CacheInitParams(
        disable=not radix, req_to_token_pool=pool, token_to_kv_pool_allocator=alloc,
        page_size=page_size, tree_components=(ComponentType.FULL,), eviction_policy="lru"))


def swa_tree_cache(pool: Any, alloc: Any, page_size: int, window: int,
                   core: str | None = None, disable: bool = False) -> Any:
    """0.5.23's radix cache for a sliding-window hybrid: ``UnifiedRadixCache`` with the
    components ``(FULL, SWA)`` and ``sliding_window_size=window``, as the scheduler builds it
    (``registry.create_unified_radix_cache``); ``core``: None for the default tree core
    (Rust), ``"python"`` for the Python one; ``disable``: the cache
    ``--disable-radix-cache`` builds (``registry.default_radix_cache_factory``)."""
    return UnifiedRadixCache(CacheInitParams(
        disable=disable, req_to_token_pool=pool, token_to_kv_pool_allocator=alloc,
        page_size=page_size, tree_components=(ComponentType.FULL, ComponentType.SWA),
        eviction_policy="lru", sliding_window_size=window, tree_core_backend=core))


# ----- requests and keys ---------------------------------------------------------------------
def ids(tokens: Sequence[int]) -> Any:
    """Token ids in the container the release uses (0.5.9: list, 0.5.23: array('q'))."""
    return list(tokens) if OLD else array("q", tokens)


def key(tokens: Sequence[int]) -> Any:
    """A ``RadixKey`` over ``tokens``."""
    return RadixKey(ids(tokens), None)


def request(rid: str, prompt: Sequence[int], max_new_tokens: int,
            output: Sequence[int] = (), ignore_eos: bool = False) -> Any:
    """A real ``Req`` with prompt ``prompt`` and ``output`` already generated."""
    params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=ignore_eos)
    params.normalize(None)
    req = Req(rid, "", ids(prompt), params, vocab_size=1 << 30)
    req.output_ids = ids(output)
    req.logprob_start_len = -1
    return req


def kv(req: Any) -> Any:
    """Where the request's KV fields live (0.5.9: the Req; 0.5.23: ``req.kv``)."""
    return req if OLD else req.kv
