"""A model's decode step reads nothing back from the device: the batch's indices are checked
once on the host (``init_forward_metadata``), and each layer's K/V write and kernel launch
only queue work. Held on the CPU by counting every value read (``item``, ``bool``, ``int``,
``tolist``, ``.cpu()``, ``.numpy()`` and ``aten::_local_scalar_dense``, which every scalar read
ends in) while the layers run. On the CPU the Triton launch itself is replaced by a stand-in
that records it, since the interpreter copies its arguments to the host where a GPU launch
would not; on a GPU (``bench/gpu_check.sh``) the kernels really run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import pagedkv.layers.attention  # noqa: F401  (first: sets TRITON_INTERPRET on a CPU)

pytest.importorskip("transformers")
from pagedkv.errors import ConfigError
from pagedkv.layers.attention import decode_attention
from pagedkv.layers.attention.backend import init_forward_metadata, paged_attention
from pagedkv.model_executor.model_loader import random_model_config
from pagedkv.model_executor.model_runner import ModelRunner
from pagedkv.models.llama import forward_hidden

_READS = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__")
_SCALAR = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default}


class _ScalarReads(TorchDispatchMode):
    """Records every operator that turns a tensor value into a Python number."""

    def __init__(self, reads: list[str]) -> None:
        super().__init__()
        self.reads = reads

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _SCALAR:
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


@contextmanager
def device_reads() -> Iterator[list[str]]:
    """Every device-to-host read made inside the block, by name."""
    reads: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        for name in _READS:
            original = getattr(torch.Tensor, name)

            def counted(self: torch.Tensor, *args: object, _f=original, _n=name,
                        **kwargs: object) -> object:
                reads.append(f"Tensor.{_n}")
                return _f(self, *args, **kwargs)

            patch.setattr(torch.Tensor, name, counted)
        with _ScalarReads(reads):
            yield reads


DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    return ModelRunner.load(random_model_config(), device=DEVICE, max_total_tokens=64,
                            page_size=4, eos_token_ids=(), attention_backend="triton")


def _decode_meta(runner: ModelRunner, table_rows: list[list[int]], lens: list[int]):
    """One decode pass over requests whose rows of ``req_to_token`` are ``table_rows``."""
    req_to_token = torch.zeros((4, 32), dtype=torch.int32)
    for r, slots in enumerate(table_rows):
        req_to_token[r, :len(slots)] = torch.tensor(slots, dtype=torch.int32)
    n = len(lens)
    out_loc = np.array([table_rows[i][lens[i] - 1] for i in range(n)], dtype=np.int64)
    return init_forward_metadata(True, req_to_token, np.arange(n), np.array(lens) - 1,
                                 np.ones(n, dtype=np.int64), out_loc, runner.device,
                                 num_slots=runner.token_to_kv_pool.size + runner.page_size)


@pytest.fixture()
def launches(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Records each two-stage launch; on the CPU instead of running it (a GPU launch only
    queues work, the interpreter's reads its arguments)."""
    plans: list[object] = []
    run = decode_attention.run_plan

    def record(plan: decode_attention.LaunchPlan) -> torch.Tensor:
        plans.append(plan)
        return run(plan) if DEVICE.type == "cuda" else plan.out

    monkeypatch.setattr(decode_attention, "run_plan", record)
    return plans


def test_a_decode_step_reads_nothing_from_the_device(runner: ModelRunner,
                                                     launches: list[object]) -> None:
    meta = _decode_meta(runner, [[4, 5, 6, 7, 8], [12, 13, 14]], [5, 3])
    assert meta.max_seq_len == 5
    ids, positions = torch.tensor([3, 9], device=DEVICE), torch.tensor([4, 2], device=DEVICE)
    with torch.inference_mode(), device_reads() as reads:
        forward_hidden(runner.model, ids, positions, meta, runner.token_to_kv_pool, "triton")
    assert reads == []
    assert len(launches) == runner.config.num_hidden_layers  # the kernel ran in every layer


def test_the_counter_sees_the_checks_a_hand_called_kernel_runs(
        runner: ModelRunner, launches: list[object]) -> None:
    """Without the batch's max_seq_len the launch checks every value itself: those reads are
    what the engine's path moved to the host, and the counter must see them."""
    meta = _decode_meta(runner, [[4, 5, 6, 7, 8]], [5])
    pool = runner.token_to_kv_pool
    q = torch.randn(1, 4, 16, device=DEVICE)
    k_cache, v_cache = pool.get_key_buffer(0), pool.get_value_buffer(0)
    with device_reads() as reads:
        decode_attention.paged_decode_attention(q, k_cache, v_cache, meta.table, meta.rows,
                                                meta.seq_lens)
    assert "aten._local_scalar_dense.default" in reads and len(launches) == 1
    with device_reads() as reads:
        paged_attention(pool, 0, q, torch.randn(1, 2, 16, device=DEVICE),
                        torch.randn(1, 2, 16, device=DEVICE), meta, 0.25)
    assert reads == [] and len(launches) == 2


def test_the_batch_check_gives_the_kernels_errors(runner: ModelRunner) -> None:
    with pytest.raises(ConfigError, match=r"req_to_token\[0, 2\]=80 is invalid; valid: a slot in "
                                          r"\[0, 68\) for a pool of 68 slots"):
        _decode_meta(runner, [[4, 5, 80, 7]], [4])
    with pytest.raises(ConfigError, match=r"out_cache_loc=\[90\] is invalid; valid: slots in "
                                          r"\[0, 68\)"):
        _decode_meta(runner, [[4, 5, 6, 90]], [4])
