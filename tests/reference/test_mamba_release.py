"""A request's state slot at admission, finish and retraction: SGLang 0.5.23's own
``alloc_req_slots`` and ``release_kv_cache`` (``mem_cache/allocation.py``,
``mem_cache/common.py``) over a real ``HybridReqToTokenPool`` and the cache the scheduler
builds for a linear-attention hybrid with ``--disable-radix-cache`` (``UnifiedRadixCache``,
disabled, components ``(FULL, MAMBA)``: its mamba component frees the slot through
``on_release`` / ``checkpoint_into_tree`` -> ``cleanup_after_caching_req`` ->
``free_mamba_cache``), against pagedkv's ``alloc_req_slots`` and ``release_kv_cache`` over its
``HybridReqToTokenPool`` and ``ChunkCache``, as its scheduler calls them.

Random lives: passes of 1-3 requests admitted in one call (the rows of a pass are taken
together), each given 1-8 KV tokens, then finished (``checkpoint=True`` on a finished request)
or retracted (``checkpoint=False``). Compared after every step: every request's row and slot,
the rows' and the slots' free lists in order, the free KV slots.

SGLang's mamba component reads the model's config through the server arguments, so the case
publishes ``model_path`` = a folder holding the Qwen3-Next preset's ``config.json``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402
import torch  # noqa: E402

from pagedkv.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape  # noqa: E402
from pagedkv.managers.req import Req  # noqa: E402
from pagedkv.mem_cache.allocator import make_allocator  # noqa: E402
from pagedkv.mem_cache.chunk_cache import ChunkCache  # noqa: E402
from pagedkv.mem_cache.common import alloc_req_slots, release_kv_cache  # noqa: E402
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool  # noqa: E402

if sg.OLD:
    pytest.skip("the release path follows SGLang 0.5.23's cache components",
                allow_module_level=True)

from sglang.srt.configs.mamba_utils import Mamba2CacheParams as SgParams  # noqa: E402
from sglang.srt.configs.mamba_utils import Mamba2StateShape as SgShape  # noqa: E402
from sglang.srt.managers.schedule_batch import FINISH_LENGTH  # noqa: E402
from sglang.srt.mem_cache import allocation as sg_allocation  # noqa: E402
from sglang.srt.mem_cache import common as sg_common  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool as SgPool  # noqa: E402
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: E402
from sglang.srt.runtime_context import get_context  # noqa: E402

CASES = 200
TOKENS = 128
SHAPE = dict(tp_world_size=1, intermediate_size=8, n_groups=2, num_heads=2, head_dim=4,
             state_size=4, conv_kernel=4)
PRESET = Path(__file__).parents[2] / "pagedkv" / "presets" / "models" / "qwen3-next-80b-a3b.json"


@pytest.fixture(scope="module", autouse=True)
def qwen3_next_server_args():
    folder = Path(tempfile.mkdtemp(prefix="pagedkv-mamba-"))
    (folder / "config.json").write_text(PRESET.read_text())
    if sg._active is not None:  # take down what another module published (sgl_objects)
        sg._active.restore()
        sg._active, sg._configured = None, None
    override = get_context().override_server_args(page_size=1, disable_radix_cache=True,
                                                  model_path=str(folder), device="cpu")
    override.install()
    yield
    override.restore()


def random_case(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng([37, seed])
    slots = int(rng.integers(1, 7))
    rows = int(rng.integers(1, slots + 1))  # SGLang's rows never outnumber its slots
    steps = [(str(rng.choice(["admit", "admit", "finish", "retract"])), int(rng.integers(0, 8)),
              int(rng.integers(1, 9))) for _ in range(int(rng.integers(6, 30)))]
    return {"rows": rows, "slots": slots, "steps": steps}


class Sglang:
    def __init__(self, rows: int, slots: int) -> None:
        params = SgParams(shape=SgShape.create(**SHAPE), layers=[0, 1])
        self.pool = SgPool(size=rows, mamba_size=slots, mamba_spec_state_size=slots,
                           max_context_len=16, device="cpu", enable_memory_saver=False,
                           cache_params=params, mamba_layer_ids=[0, 1],
                           enable_mamba_extra_buffer=False)
        self.alloc = sg.allocator(1, TOKENS)
        self.tree = UnifiedRadixCache(CacheInitParams(
            disable=True, req_to_token_pool=self.pool, token_to_kv_pool_allocator=self.alloc,
            page_size=1, tree_components=(sg.ComponentType.FULL, sg.ComponentType.MAMBA),
            eviction_policy="lru"))
        self.live: list[Any] = []

    def admit(self, k: int, n: int) -> None:
        reqs = [sg.request(f"r{len(self.live) + i}", [1] * n, 4) for i in range(k)]
        sg_allocation.alloc_req_slots(self.pool, reqs, self.tree)
        for req in reqs:
            out = self.alloc.alloc(n)
            self.pool.write((req.kv.req_pool_idx, slice(0, n)), out.to(torch.int32))
            req.kv.kv_committed_len = req.kv.kv_allocated_len = n
        self.live += reqs

    def release(self, i: int, finish: bool) -> None:
        req = self.live.pop(i)
        if finish:
            req.finished_reason = FINISH_LENGTH(length=1)
        sg_common.release_kv_cache(req, self.tree, checkpoint=finish)

    def state(self) -> Any:
        return ([(int(r.kv.req_pool_idx), int(r.kv.mamba_pool_idx)) for r in self.live],
                list(self.pool.free_slots), self.pool.mamba_allocator.free_slots.tolist(),
                int(self.alloc.available_size()))


class Pagedkv:
    def __init__(self, rows: int, slots: int) -> None:
        params = Mamba2CacheParams(Mamba2StateShape.create(**SHAPE), (0, 1))
        self.pool = HybridReqToTokenPool(rows, slots, 16, params)
        self.alloc = make_allocator(TOKENS, 1)
        self.tree = ChunkCache.for_release(self.pool, self.alloc, "0.5.23")
        self.live: list[Req] = []

    def admit(self, k: int, n: int) -> None:
        reqs = [Req(len(self.live) + i, n, 4, 4) for i in range(k)]
        alloc_req_slots(reqs, self.pool)
        for req in reqs:
            self.pool.write(req.req_pool_idx, list(range(n)), self.alloc.alloc(n))
            req.kv_committed_len = n
        self.live += reqs

    def release(self, i: int, finish: bool) -> None:
        release_kv_cache(self.live.pop(i), self.tree, self.pool, is_insert=finish)

    def state(self) -> Any:
        self.pool.check_invariants()
        return ([(r.req_pool_idx, r.mamba_pool_idx) for r in self.live], list(self.pool.free_slots),
                list(self.pool.mamba_allocator.free_slots), self.alloc.available_size())


def run(case: dict[str, Any], side: type) -> list[Any]:
    s = side(case["rows"], case["slots"])
    records = [s.state()]
    for kind, pick, n in case["steps"]:
        if kind == "admit":  # a pass of up to three, as many as rows (and slots) are free
            k = min(1 + pick % 3, case["rows"] - len(s.live))
            if not k:
                continue
            s.admit(k, n)
        elif s.live:
            s.release(pick % len(s.live), kind == "finish")
        else:
            continue
        records.append((kind, s.state()))
    return records


def test_random_lives() -> None:
    compare.compare_seeds("mamba slot release", range(CASES), random_case,
                          lambda c: run(c, Sglang), lambda c: run(c, Pagedkv))


def test_the_cases_finish_and_retract_with_slots_reused() -> None:
    kinds = {"finish": 0, "retract": 0, "full": 0}
    for seed in range(CASES):
        case = random_case(seed)
        for kind, state in run(case, Pagedkv)[1:]:
            kinds[kind] = kinds.get(kind, 0) + 1
            kinds["full"] += not state[2]  # every slot held
    assert min(kinds.values()) >= 50, kinds
