"""Every input check of the decode kernels: a clear ConfigError, never a launch or a crash."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from pagedkv.errors import ConfigError
from pagedkv.layers.attention import (
    paged_decode_attention,
    paged_decode_attention_by_page,
    paged_decode_attention_ref,
    pages_to_slots,
)
from pagedkv.lessons.kernel import DecodeCase, random_decode_case

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: Triton's interpreter


def _case() -> DecodeCase:
    return random_decode_case([3, 9], num_q_heads=4, num_kv_heads=2, head_dim=16, page_size=4,
                              device=DEVICE)


def _with(**changes: object) -> Callable[[DecodeCase], dict[str, object]]:
    """Keyword arguments of paged_decode_attention with some replaced (callables get the case)."""

    def build(case: DecodeCase) -> dict[str, object]:
        kwargs: dict[str, object] = {
            "q": case.q, "k_cache": case.k_cache, "v_cache": case.v_cache,
            "req_to_token": case.req_to_token, "req_pool_indices": case.req_pool_indices,
            "seq_lens": case.seq_lens,
        }
        for name, value in changes.items():
            kwargs[name] = value(case) if callable(value) else value
        return kwargs

    return build


def _bad_slot(case: DecodeCase) -> torch.Tensor:
    table = case.req_to_token.clone()
    table[int(case.req_pool_indices[1]), 8] = case.k_cache.shape[0]  # one past the pool
    return table


def _negative_slot(case: DecodeCase) -> torch.Tensor:
    table = case.req_to_token.clone()
    table[int(case.req_pool_indices[0]), 0] = -1
    return table


BAD_INPUTS = [
    (_with(q=lambda c: c.q[0]), r"q\.shape=\(4, 16\) is invalid; valid: a 3-D shape"),
    (_with(q=lambda c: c.q.double()), r"q\.dtype=torch\.float64 is invalid"),
    (_with(q=[1.0]), r"q='list' is invalid; valid: a 3-D torch\.Tensor"),
    (_with(q=lambda c: c.q[:0]), r"q\.shape\[0\]=0 is invalid; valid: a batch of >= 1"),
    (_with(k_cache=lambda c: torch.cat([c.k_cache, c.k_cache[:, :1]], dim=1)),
     r"k_cache\.shape\[1\]=3 is invalid; valid: a divisor of the 4 query heads"),
    (_with(k_cache=lambda c: c.k_cache[:, :, :8].contiguous()),
     r"k_cache\.shape=\(\d+, 2, 8\) is invalid; valid: \[num_slots, H_kv, 16\]"),
    (_with(v_cache=lambda c: c.v_cache[1:]), r"v_cache\.shape=.* is invalid; valid: .*k_cache"),
    (_with(v_cache=lambda c: c.v_cache.half()),
     r"v_cache\.dtype=torch\.float16 is invalid; valid: torch\.float32 \(the dtype of q\)"),
    (_with(k_cache=lambda c: c.k_cache.transpose(0, 2).contiguous().transpose(0, 2)),
     r"k_cache\.stride\(2\)=\d+ is invalid; valid: 1"),
    (_with(k_cache=lambda c: c.k_cache.to("meta")),
     r"k_cache\.device='meta' is invalid; valid: \w+(:\d)? \(the device of q\)"),
    (_with(q=lambda c: c.q.new_zeros(2, 4, 512), k_cache=lambda c: c.q.new_zeros(9, 2, 512),
           v_cache=lambda c: c.q.new_zeros(9, 2, 512)),
     r"q\.shape\[2\]=512 is invalid; valid: a head dim in \[1, 256\]"),
    (_with(req_to_token=lambda c: c.req_to_token.t().contiguous().t()),
     r"req_to_token\.stride\(1\)=4 is invalid; valid: 1 \(contiguous rows\)"),
    (_with(req_to_token=lambda c: c.req_to_token.long()),
     r"req_to_token\.dtype=torch\.int64 is invalid; valid: torch\.int32"),
    (_with(req_pool_indices=lambda c: c.req_pool_indices[:1]),
     r"req_pool_indices\.shape=\(1,\) is invalid; valid: \(2,\)"),
    (_with(req_pool_indices=lambda c: c.req_pool_indices * 0 + 4),
     r"req_pool_indices\[0\]=4 is invalid; valid: a row of req_to_token in \[0, 4\)"),
    (_with(req_pool_indices=lambda c: c.req_pool_indices.float()),
     r"req_pool_indices\.dtype=torch\.float32 is invalid"),
    (_with(seq_lens=lambda c: torch.tensor([3, 0], device=DEVICE)),
     r"seq_lens\[1\]=0 is invalid; valid: a length in \[1, 12\]"),
    (_with(seq_lens=lambda c: torch.tensor([13, 3], device=DEVICE)),
     r"seq_lens\[0\]=13 is invalid; valid: a length in \[1, 12\]"),
    (_with(req_to_token=_bad_slot),
     r"req_to_token\[\d+, 8\]=\d+ is invalid; valid: a slot in \[0, \d+\) for a pool of \d+ slots"),
    (_with(req_to_token=_negative_slot), r"req_to_token\[\d+, 0\]=-1 is invalid; valid: a slot in"),
    (_with(sm_scale=0.0), r"sm_scale=0\.0 is invalid; valid: a finite float > 0"),
    (_with(sm_scale=float("nan")), r"sm_scale=nan is invalid"),
    (_with(num_kv_splits=0), r"num_kv_splits=0 is invalid; valid: an integer in \[1, 64\]"),
    (_with(num_kv_splits=2.0), r"num_kv_splits=2\.0 is invalid"),
]


@pytest.mark.parametrize(("build", "message"), BAD_INPUTS)
def test_bad_input_names_parameter_value_and_range(
    build: Callable[[DecodeCase], dict[str, object]], message: str
) -> None:
    kwargs = build(_case())
    with pytest.raises(ConfigError, match=message):
        paged_decode_attention(**kwargs)
    if "num_kv_splits" in kwargs:
        return  # the reference has no splits
    with pytest.raises(ConfigError, match=message):
        paged_decode_attention_ref(**kwargs)


def test_strided_index_vectors_are_read_correctly() -> None:
    case = _case()
    rows = torch.stack([case.req_pool_indices, case.req_pool_indices], dim=1)[:, 0]
    lens = torch.stack([case.seq_lens, case.seq_lens], dim=1)[:, 0]
    assert rows.stride(0) == 2 and lens.stride(0) == 2
    args = (case.q.transpose(0, 1).contiguous().transpose(0, 1), case.k_cache, case.v_cache,
            case.req_to_token, rows, lens)
    assert torch.allclose(paged_decode_attention(*args), paged_decode_attention_ref(*args),
                          atol=1e-5)


def test_inputs_on_a_device_triton_cannot_run_on() -> None:
    case = _case()
    args = [t.to("meta") for t in case.slot_args()]
    where = "cpu" if DEVICE == "cpu" else "cuda"
    with pytest.raises(ConfigError, match=rf"q\.device='meta' is invalid; valid: a {where} tensor"):
        paged_decode_attention(*args)


def test_slot_beyond_the_length_is_not_read() -> None:
    """Entries past seq_len are never read, so garbage there is allowed (as in SGLang)."""
    case = _case()
    table = case.req_to_token.clone()
    table[int(case.req_pool_indices[0]), 3:] = 10**9
    args = (case.q, case.k_cache, case.v_cache, table, case.req_pool_indices, case.seq_lens)
    assert torch.allclose(paged_decode_attention(*args), paged_decode_attention_ref(*args),
                          atol=1e-5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"page_size": 0}, r"page_size=0 is invalid; valid: an integer >= 1"),
        ({"page_size": 2}, r"seq_lens\[1\]=9 is invalid; valid: a length in \[1, 6\]"),
        ({"page_table": "past_pool"},
         r"page_table\[\d+, 0\]=\d+ is invalid; valid: a page id \(page_size=4\) in \[0, \d+\)"),
    ],
)
def test_page_table_checks(change: dict[str, object], message: str) -> None:
    case = _case()
    kwargs: dict[str, object] = dict(zip(
        ("q", "k_cache", "v_cache", "page_table", "req_pool_indices", "seq_lens", "page_size"),
        case.page_args(), strict=True))
    if change.get("page_table") == "past_pool":
        table = case.page_table.clone()
        table[int(case.req_pool_indices[0]), 0] = case.k_cache.shape[0] // 4
        kwargs["page_table"] = table
    else:
        kwargs.update(change)
    with pytest.raises(ConfigError, match=message):
        paged_decode_attention_by_page(**kwargs)


def test_page_size_of_the_table_helpers() -> None:
    with pytest.raises(ConfigError, match=r"page_size=0 is invalid"):
        pages_to_slots(torch.zeros(2, 2, dtype=torch.int32), 0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is used only without CUDA")
def test_triton_imported_too_early_is_a_clear_error() -> None:
    code = (
        "import triton.language\n"
        "from pagedkv.errors import PagedKVError\n"
        "from pagedkv.layers.attention import paged_decode_attention\n"
        "from pagedkv.lessons.kernel import random_decode_case\n"
        "case = random_decode_case([3], num_q_heads=2, num_kv_heads=1, head_dim=8, page_size=1)\n"
        "try:\n"
        "    paged_decode_attention(*case.slot_args())\n"
        "except PagedKVError as e:\n"
        "    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert "triton was imported before TRITON_INTERPRET=1 was set" in run.stdout
