"""What a compiled kernel implies on a GPU: programs per SM, and a predicted bandwidth ceiling.

Nothing here is measured. From the registers, shared memory and instructions that
``compiled.py`` reads out of the compiled stage-1 kernel, and from a GPU's published
numbers, we bound the bandwidth a decode step can reach with three roofs:

1. **Memory**: the datasheet's peak HBM bandwidth ``BW``.
2. **Instruction issue**: an SM issues at most 4 warp-instructions per clock (one per
   scheduler), 2 or 4 fp32 FMAs per clock (64 or 128 lanes) and 0.5 special-function
   instructions (``exp``, ``log``: 16 lanes). One K/V tile costs ``loop_instructions *
   num_warps`` warp-instructions, of which some are FMA and ``MUFU``; the slowest pipe
   sets the clocks per tile, so
   ``BW_issue = active SMs * clock * tile_bytes / clocks_per_tile``.
3. **Latency** (Little's law): a program keeps ``buffers`` K/V tiles in flight (two when
   the compiler double-buffers them in shared memory), so with ``R`` programs resident the
   memory system holds ``R * buffers * tile_bytes`` bytes in flight and
   ``BW_latency = bytes_in_flight / latency``. The loaded DRAM latency is an assumption,
   :data:`ASSUMED_LATENCY_S`.

The prediction is the smallest roof. It is a ceiling: a real kernel loses a little more
to DRAM refresh, page misses and the merge stage, which the benchmark's copy baseline
measures. Hardware limits: NVIDIA CUDA C++ Programming Guide, "Compute Capabilities"
(technical specifications per compute capability); SM counts and boost clocks: NVIDIA's
datasheets and architecture whitepapers for each GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.gpus import get_gpu
from pagedkv.layers.attention.decode_attention import BLOCK_H, BLOCK_N, default_num_kv_splits
from pagedkv.units import KiB

ISSUE_PER_CLOCK = 4  # warp-instructions per SM per clock (4 schedulers), sm_70 and later
MUFU_PER_CLOCK = 0.5  # warp-instructions: 16 special-function lanes per SM
ASSUMED_LATENCY_S = 1.0e-6  # DRAM latency under load (idle: about 0.5 us); an assumption
REGISTER_ALLOCATION = 256  # registers are allocated per warp in blocks of 256
MAX_REGISTERS_PER_THREAD = 255  # the hardware's cap per thread (all four targets)


@dataclass(frozen=True)
class SMLimits:
    """Per-SM resources of one compute capability (CUDA C++ Programming Guide)."""

    arch: int
    max_warps: int
    max_programs: int  # resident thread blocks
    shared_bytes: int  # shared memory per SM available to blocks
    reserved_shared: int  # per block, kept by the CUDA runtime (1 KiB from sm_80)
    fp32_lanes: int  # fp32 FMA lanes per SM
    registers: int = 65536  # 32-bit registers per SM (all four targets)


SM_LIMITS = {
    75: SMLimits(75, max_warps=32, max_programs=16, shared_bytes=64 * KiB, reserved_shared=0,
                 fp32_lanes=64),
    80: SMLimits(80, max_warps=64, max_programs=32, shared_bytes=164 * KiB,
                 reserved_shared=KiB, fp32_lanes=64),
    89: SMLimits(89, max_warps=48, max_programs=24, shared_bytes=100 * KiB,
                 reserved_shared=KiB, fp32_lanes=128),
    90: SMLimits(90, max_warps=64, max_programs=32, shared_bytes=228 * KiB,
                 reserved_shared=KiB, fp32_lanes=128),
}


@dataclass(frozen=True)
class TargetGPU:
    """A GPU of one compile target: SMs, boost clock (Hz) and peak bandwidth (bytes/s)."""

    label: str
    arch: int
    sms: int
    clock_hz: float
    hbm_bandwidth: float


def target_gpus() -> list[TargetGPU]:
    """The GPUs chapter 6 predicts for: T4 (free Colab), A100, L4, RTX 4090, H100, H200.

    Bandwidths come from :mod:`pagedkv.gpus` (the T4, which pagedkv sizes nothing for,
    from its datasheet: 320 GB/s); SM counts and boost clocks from NVIDIA's datasheets.
    """
    def preset(name: str) -> float:
        return get_gpu(name).hbm_bandwidth

    return [
        TargetGPU("T4", 75, 40, 1.59e9, 320e9),
        TargetGPU("A100 80GB", 80, 108, 1.41e9, preset("a100-80gb")),
        TargetGPU("L4", 89, 58, 2.04e9, preset("l4")),
        TargetGPU("RTX 4090", 89, 128, 2.52e9, preset("rtx-4090")),
        TargetGPU("H100 SXM", 90, 132, 1.98e9, preset("h100-sxm-80gb")),
        TargetGPU("H200", 90, 132, 1.98e9, preset("h200-141gb")),
    ]


def sm_limits(arch: int) -> SMLimits:
    """The limits of ``sm_<arch>``. Raises ConfigError for an arch not in :data:`SM_LIMITS`."""
    if arch not in SM_LIMITS:
        raise bad_value("arch", arch, f"one of {sorted(SM_LIMITS)}")
    return SM_LIMITS[arch]


def occupancy(registers: int, shared_bytes: int, num_warps: int, arch: int) -> tuple[int, str]:
    """Programs of this size that fit on one SM at once, and the resource that limits them.

    Args:
        registers: per thread, as compiled.
        shared_bytes: per program, as compiled.
        num_warps: warps per program.
        arch: compute capability, a key of :data:`SM_LIMITS`.

    Returns:
        ``(programs, limiter)``, limiter one of ``"registers"``, ``"shared memory"``,
        ``"warps"``, ``"blocks"``.

    Raises:
        ConfigError: a size < 1 (``shared_bytes`` < 0) or an unknown arch.
    """
    check_positive_int("registers", registers)
    check_positive_int("num_warps", num_warps)
    check_positive_int("shared_bytes", shared_bytes, minimum=0)
    lim = sm_limits(arch)
    per_warp = math.ceil(registers * 32 / REGISTER_ALLOCATION) * REGISTER_ALLOCATION
    per_block_shared = shared_bytes + lim.reserved_shared
    fits = {"registers": lim.registers // (per_warp * num_warps),
            "warps": lim.max_warps // num_warps, "blocks": lim.max_programs}
    if per_block_shared:  # else (sm_75, no shared memory) it limits nothing
        fits["shared memory"] = lim.shared_bytes // per_block_shared
    limiter = min(fits, key=fits.get)
    return fits[limiter], limiter


def register_budget(arch: int, programs_per_sm: int, num_warps: int) -> int:
    """Most registers per thread that still let ``programs_per_sm`` programs of
    ``num_warps`` warps share an SM's register file (at most
    :data:`MAX_REGISTERS_PER_THREAD`, the hardware's cap)."""
    lim = sm_limits(arch)
    per_warp = lim.registers // (programs_per_sm * num_warps)
    return min(MAX_REGISTERS_PER_THREAD, per_warp // REGISTER_ALLOCATION * REGISTER_ALLOCATION // 32)


@dataclass(frozen=True)
class Prediction:
    """Bandwidth roofs (bytes/s) of one decode step on one GPU, and the smallest of them."""

    gpu: str
    programs: int  # stage-1 programs launched
    resident_per_sm: float  # programs per SM at once, on average
    memory: float
    issue: float
    latency: float
    num_splits: int = 1  # the split count behind ``programs``

    @property
    def ceiling(self) -> float:
        """The predicted bandwidth ceiling: the smallest roof."""
        return min(self.memory, self.issue, self.latency)

    @property
    def bound(self) -> str:
        """Which roof sets the ceiling."""
        roofs = {"memory": self.memory, "issue": self.issue, "latency": self.latency}
        return min(roofs, key=roofs.get)


def predict(gpu: TargetGPU, stage1: dict, programs: int, tile_bytes: int,
            latency_s: float = ASSUMED_LATENCY_S) -> Prediction:
    """The three roofs for ``programs`` stage-1 programs of the compiled kernel ``stage1``.

    Args:
        gpu: where it runs; ``stage1`` must be compiled for ``gpu.arch``.
        stage1: a row of ``compile_matrix.compile_matrix``: ``registers``, ``shared_bytes``,
            ``num_warps``, ``loop_instructions``, ``loop_ops`` (SASS counts per tile).
        programs: stage-1 programs (``batch * H_kv * ceil(G / 16) * splits``).
        tile_bytes: K and V bytes one loop pass reads (``2 * BLOCK_N * D * elem_bytes``).
        latency_s: loaded memory latency in seconds.

    Raises:
        ConfigError: a row for another arch, or a size < 1.
    """
    if stage1["arch"] != gpu.arch:
        raise bad_value("stage1['arch']", stage1["arch"], f"{gpu.arch} (the GPU's)")
    check_positive_int("programs", programs)
    check_positive_int("tile_bytes", tile_bytes)
    lim = sm_limits(gpu.arch)
    fit, _ = occupancy(stage1["registers"], stage1["shared_bytes"], stage1["num_warps"],
                       gpu.arch)
    active_sms = min(gpu.sms, programs)
    resident = min(fit * gpu.sms, programs)  # the first wave; later waves are alike
    warps, ops = stage1["num_warps"], stage1["loop_ops"]
    clocks = max(stage1["loop_instructions"] * warps / ISSUE_PER_CLOCK,
                 ops.get("FFMA", 0) * warps / (lim.fp32_lanes / 32),
                 ops.get("MUFU", 0) * warps / MUFU_PER_CLOCK)
    # K/V tiles in flight per program: two when both fit twice in shared memory (the
    # compiler double-buffered them), else the one being loaded.
    buffers = 2 if stage1["shared_bytes"] >= 2 * tile_bytes else 1
    return Prediction(
        gpu=gpu.label, programs=programs, resident_per_sm=resident / gpu.sms,
        memory=gpu.hbm_bandwidth,
        issue=active_sms * gpu.clock_hz * tile_bytes / clocks,
        latency=resident * buffers * tile_bytes / latency_s,
    )


def stage1_row(rows: list[dict], arch: int, dtype: str, page_size: int = 16,
               dot_fp32: bool = False) -> dict:
    """The benchmark's per-page stage-1 kernel for ``sm_<arch>`` in a compile table
    (``compile_matrix``); ``dot_fp32`` picks the fp32-dot contrast instead.

    Raises:
        ConfigError: the table has no such row (not compiled, or it failed).
    """
    for r in rows:
        if ("error" not in r and r["arch"] == arch and r["kernel"] == "stage1 per-page"
                and r["dtype"] == dtype and r["page_size"] == page_size
                and r["dot_fp32"] == dot_fp32 and r["purpose"] != "book"):
            return r
    raise bad_value("rows", f"{len(rows)} rows", f"a compiled stage-1 row for sm_{arch} "
                    f"{dtype} page {page_size} (dot_fp32={dot_fp32})")


def predict_decode(rows: list[dict], gpu: TargetGPU, batch: int, context: int, *,
                   num_kv_heads: int = 8, group: int = 4, head_dim: int = 128,
                   dtype: str = "bfloat16", dot_fp32: bool = False) -> Prediction:
    """The roofs of one decode step (Llama-3-8B heads by default) on ``gpu``: the compiled
    per-page kernel, launched with the split count ``default_num_kv_splits`` picks there.

    Raises:
        ConfigError: a size < 1, or no compiled row for the GPU (see :func:`stage1_row`).
    """
    splits = default_num_kv_splits(batch, num_kv_heads, group, context, sm_count=gpu.sms,
                                   arch=gpu.arch)
    programs = batch * num_kv_heads * math.ceil(group / BLOCK_H) * splits
    elem = 4 if dtype == "float32" else 2
    roofs = predict(gpu, stage1_row(rows, gpu.arch, dtype, dot_fp32=dot_fp32), programs,
                    tile_bytes=2 * BLOCK_N * head_dim * elem)
    return replace(roofs, num_splits=splits)
