"""Every kernel the benchmark and chapter 6 launch compiles for T4, A100, L4/4090 and H100/H200
on a machine without a GPU, within its register budget, without spills, on the tensor cores
and with its K/V loads double-buffered.

Triton ships ptxas and cuobjdump, so the whole pipeline down to the machine code runs on
the CPU (``compile_matrix`` starts one child process per target; about two CPU-minutes).
The table that ships with pagedkv (what a fresh clone's book build reads) must equal it.
Nothing runs: timings need a GPU (``bench/``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import pagedkv.layers.attention  # noqa: F401  (sets TRITON_INTERPRET before triton loads)
from pagedkv.layers.attention import decode_attention as da
from pagedkv.lessons.kernel.compile_matrix import SHIPPED, compile_matrix, table_name
from pagedkv.lessons.kernel.compiled import (
    TARGETS,
    contrast_builds,
    hot_loop,
    launched_builds,
    sass_instructions,
)
from pagedkv.lessons.kernel.roofline import occupancy, register_budget

pytestmark = pytest.mark.slow  # compiles every kernel for four targets in child processes


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    if torch.cuda.is_available():
        pytest.skip("a GPU machine runs the kernels instead")
    from triton import knobs

    tools = (knobs.nvidia.ptxas.path, knobs.nvidia.ptxas_blackwell.path,
             knobs.nvidia.cuobjdump.path)
    if not all(tool and Path(tool).is_file() for tool in tools):
        pytest.skip(f"this triton build ships no CUDA tools: {tools}")
    return compile_matrix(use_cache=False)  # afresh: the shipped table is held against it


def _launched(rows: list[dict]) -> list[dict]:
    return [r for r in rows if "error" not in r and not r["dot_fp32"]]


def _stage1_16bit(rows: list[dict], arch: int) -> list[dict]:
    return [r for r in _launched(rows) if r["arch"] == arch and r["kernel"] != "stage2"
            and r["dtype"] in ("bfloat16", "float16")]


def test_every_launched_kernel_compiles_for_every_target(rows: list[dict]) -> None:
    assert [r for r in rows if "error" in r] == []
    for arch in TARGETS:
        got = {(r["kernel"], r["dtype"], r["page_size"], r["head_dim"]) for r in _launched(rows)
               if r["arch"] == arch}
        for b in launched_builds():
            walk = f"stage1 {b.walk}"
            page = b.page_size if b.walk == "per-page" else None
            assert (walk, b.dtype, page, b.head_dim) in got, (arch, b)
            assert ("stage2", b.dtype, None, b.head_dim) in got, (arch, b)


def test_nothing_spills(rows: list[dict]) -> None:
    for r in _launched(rows):
        assert r["spill_bytes"] == 0, r
        assert r["ops"]["STL"] == r["ops"]["LDL"] == 0, r  # no local-memory traffic at all


@pytest.mark.parametrize("arch", TARGETS)
def test_registers_leave_room_for_the_planned_programs_per_sm(rows: list[dict],
                                                              arch: int) -> None:
    """The split count plans for PROGRAMS_PER_SM[arch] resident stage-1 programs; the
    compiled 16-bit kernels must fit that many per SM by registers, shared memory and warps.
    Every kernel stays under 255 registers (the hardware's cap) without spilling."""
    budget = register_budget(arch, da.PROGRAMS_PER_SM[arch], da.NUM_WARPS)
    for r in _stage1_16bit(rows, arch):
        assert r["registers"] <= budget, r
        fit, limiter = occupancy(r["registers"], r["shared_bytes"], r["num_warps"], arch)
        assert fit >= da.PROGRAMS_PER_SM[arch], (r, limiter)
    assert all(r["registers"] <= 255 for r in _launched(rows) if r["arch"] == arch)


@pytest.mark.parametrize("arch", [a for a in TARGETS if a >= 80])
def test_16bit_dots_run_on_tensor_cores_with_pipelined_loads(rows: list[dict],
                                                             arch: int) -> None:
    for r in _stage1_16bit(rows, arch):
        assert r["loop_ops"]["HMMA"] + r["loop_ops"]["HGMMA"] >= 2, r  # both dots, per tile
        assert r["loop_ops"]["FFMA"] < 64, r  # no scalar fp32 dot left in the loop
        assert r["loop_ops"]["LDGSTS"] > 0, r  # asynchronous global -> shared copies
        tile = 2 * da.BLOCK_N * r["head_dim"] * 2  # one K and one V tile, 16-bit
        assert r["shared_bytes"] >= 2 * tile, r  # two buffers of each


def test_fp32_dots_would_spill_and_lose_the_tensor_cores(rows: list[dict]) -> None:
    """The contrast the kernel avoids: the same kernel with its dots widened to fp32 (what
    the interpreter runs) is thousands of scalar FMAs per tile and spills on sm_80+."""
    contrast = [r for r in rows if r.get("dot_fp32")]
    assert {r["arch"] for r in contrast} == {a for a in TARGETS if a >= 80}
    assert len(contrast) == len(contrast_builds()) * 3
    for r in contrast:
        assert r["loop_ops"]["HMMA"] == r["loop_ops"]["HGMMA"] == 0
        assert r["loop_ops"]["FFMA"] >= 1000
        assert r["registers"] == 255 and r["spill_bytes"] > 0


SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                     /* 0x00000a0000017a02 */
        /*0010*/              @!P0 BRA 0x60 ;                                 /* 0x000000000000094d */
        /*0020*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;      /* 0x0000000c0804723c */
        /*0030*/                   LDGSTS.E.BYPASS.128 [R2], desc[UR4][R6.64] ; /* 0x0 */
        /*0040*/               @P1 BRA 0x20 ;                                 /* 0x0 */
        /*0050*/                   EXIT ;                                     /* 0x0 */
        /*0060*/                   BRA 0x60;                                  /* 0x0 */
"""


def test_sass_parser_and_hot_loop_on_a_hand_written_listing() -> None:
    instrs = sass_instructions(SASS)
    assert [op for _, op, _ in instrs] == ["MOV", "BRA", "HMMA", "LDGSTS", "BRA", "EXIT", "BRA"]
    assert [a for a, _, _ in hot_loop(instrs)] == [0x20, 0x30, 0x40]  # the self-branch is no loop
    assert hot_loop(instrs[:2]) == []


def test_the_shipped_table_is_what_the_compiler_gives(rows: list[dict]) -> None:
    """A fresh clone's chapter 6 reads the shipped table: it must be this compile's, row for
    row (``python -m pagedkv.lessons.kernel.compile_matrix --ship`` rewrites it)."""
    import json

    shipped = SHIPPED / table_name()
    assert shipped.is_file(), f"no {shipped.name}: run python -m pagedkv.lessons.kernel.compile_matrix --ship"
    assert json.loads(shipped.read_text()) == rows
