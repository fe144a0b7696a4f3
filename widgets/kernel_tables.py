"""Chapter 6's tables: what the compiler made of the kernel per target, and what it predicts.

Each builder takes rows of ``pagedkv.lessons.kernel.compile_matrix.compile_matrix`` (or
``roofline.Prediction`` objects) and returns ``Markdown``; ``.data`` holds the text.
"""

from __future__ import annotations

from collections.abc import Sequence

from IPython.display import Markdown

from pagedkv.lessons.kernel.compiled import TENSOR_CORE_OPS
from pagedkv.lessons.kernel.roofline import Prediction, TargetGPU, occupancy
from pagedkv.units import KiB
from pagedkv_widgets.tables import markdown_table

KERNEL_ORDER = ("stage1 per-slot", "stage1 per-page", "stage2")


def _gpus_of(arch: int, gpus: Sequence[TargetGPU]) -> str:
    return f"sm_{arch} ({', '.join(g.label for g in gpus if g.arch == arch)})"


def _tensor_ops(row: dict) -> str:
    """Tensor-core instructions per loop pass, e.g. ``"16 HMMA"``, or ``"none"``."""
    used = [f"{row['loop_ops'][op]} {op}" for op in TENSOR_CORE_OPS if row["loop_ops"][op]]
    return ", ".join(used) or "none"


def _fits(row: dict) -> str:
    fit, limiter = occupancy(row["registers"], row["shared_bytes"], row["num_warps"],
                             row["arch"])
    return f"{fit} ({limiter})"


def compiled_table(rows: Sequence[dict], gpus: Sequence[TargetGPU],
                   dtype: str = "bfloat16") -> Markdown:
    """The benchmark's kernels in ``dtype``, one line per target and kernel: registers per
    thread, spilled bytes, shared memory, tensor-core instructions, asynchronous copies and
    instructions per pass of the main loop, and the programs that fit on one SM."""
    picked = [r for r in rows if "error" not in r and r["purpose"] == "benchmark"
              and r["dtype"] == dtype and not r["dot_fp32"]]
    picked.sort(key=lambda r: (r["arch"], KERNEL_ORDER.index(r["kernel"]), r["page_size"] or 0))
    return markdown_table(
        ("target", "kernel", "registers", "spilled bytes", "shared memory",
         "tensor-core instructions / tile", "async copies / tile", "instructions / tile",
         "programs per SM (limit)"),
        ((_gpus_of(r["arch"], gpus),
          r["kernel"] + (f", page {r['page_size']}" if r["page_size"] else ""),
          r["registers"], r["spill_bytes"], f"{r['shared_bytes'] / KiB:.1f} KiB",
          _tensor_ops(r) if r["kernel"] != "stage2" else "-",
          r["loop_ops"]["LDGSTS"] if r["kernel"] != "stage2" else "-",
          r["loop_instructions"] if r["kernel"] != "stage2" else "-", _fits(r))
         for r in picked))


def compiled_summary(rows: Sequence[dict]) -> str:
    """One sentence over the whole compile table, which set each count covers: the kernels
    the benchmark and the chapter launch (how many, failed, spilled, the most registers),
    then the contrast kernels with fp32-widened dots, which are compiled but never launched
    (how many, on which targets, how many spill and how much)."""
    ok = [r for r in rows if "error" not in r]
    failed = [r for r in rows if "error" in r]
    launched = [r for r in ok if not r["dot_fp32"]]
    widened = sorted((r for r in ok if r["dot_fp32"]), key=lambda r: r["arch"])
    top = max(launched, key=lambda r: r["registers"])
    text = (f"{len(ok)} kernels compiled, {len(failed)} failed. The {len(launched)} that the "
            f"benchmark and this chapter launch ({sum(r['purpose'] == 'benchmark' for r in launched)} "
            f"for the benchmark in bf16 and fp16, {sum(r['purpose'] == 'book' for r in launched)} "
            f"for this chapter's own examples): {sum(1 for r in launched if r['spill_bytes'])} "
            f"spill; the most registers: {top['registers']} ({top['kernel']}, {top['dtype']}, "
            f"head dim {top['head_dim']}, sm_{top['arch']}).")
    if widened:
        spilled = [r["spill_bytes"] for r in widened if r["spill_bytes"]]
        targets = ", ".join(f"sm_{r['arch']}" for r in widened)
        text += (f" The {len(widened)} contrast kernels with their dots widened to fp32 "
                 f"({targets}; compiled, never launched, "
                 f"compared below): {len(spilled)} spill"
                 + (f", {_span(spilled)} bytes." if spilled else "."))
    return text


def contrast_table(rows: Sequence[dict], gpus: Sequence[TargetGPU]) -> Markdown:
    """The bf16 per-page kernel against the same kernel with its dots widened to fp32, per
    target from sm_80: registers, spills, shared memory per program, tensor-core and fp32 FMA
    instructions per tile."""
    def pick(arch: int, fp32: bool) -> dict:
        return next(r for r in rows if "error" not in r and r["arch"] == arch
                    and r["kernel"] == "stage1 per-page" and r["dtype"] == "bfloat16"
                    and r["page_size"] == 16 and r["dot_fp32"] == fp32)

    archs = sorted({r["arch"] for r in rows if r.get("dot_fp32")})
    lines = []
    for arch in archs:
        for fp32 in (False, True):
            r = pick(arch, fp32)
            lines.append((_gpus_of(arch, gpus), "fp32 (widened)" if fp32 else "bf16",
                          r["registers"], r["spill_bytes"], f"{r['shared_bytes'] / KiB:.1f} KiB",
                          _tensor_ops(r), r["loop_ops"]["FFMA"], r["loop_instructions"],
                          _fits(r)))
    return markdown_table(("target", "dots in", "registers", "spilled bytes", "shared memory",
                           "tensor-core instructions / tile", "fp32 FMAs / tile",
                           "instructions / tile", "programs per SM (limit)"), lines)


def prediction_table(pairs: Sequence[tuple[Prediction, Prediction]],
                     gpus: Sequence[TargetGPU]) -> Markdown:
    """Per GPU: the three roofs of the bf16 kernel, its predicted ceiling, and the ceiling
    of the fp32-dot contrast (``None`` where it was not compiled, sm_75). GB/s = 10^9 B/s."""
    peak = {g.label: g.hbm_bandwidth for g in gpus}

    def gbs(x: float) -> str:
        return f"{x / 1e9:,.0f}"

    return markdown_table(
        ("GPU", "splits", "programs resident per SM", "memory roof", "issue roof", "latency roof",
         "predicted ceiling (GB/s)", "of peak", "bound by", "with fp32 dots (GB/s)"),
        ((p.gpu, p.num_splits, f"{p.resident_per_sm:.1f}", gbs(p.memory), gbs(p.issue),
          gbs(p.latency), gbs(p.ceiling), f"{p.ceiling / peak[p.gpu]:.0%}", p.bound,
          f"{gbs(c.ceiling)} ({c.bound})" if c else "-")
         for p, c in pairs))


def _span(values: Sequence[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def compiled_highlights(rows: Sequence[dict], dtype: str = "bfloat16") -> str:
    """Two lines over the benchmark's stage-1 kernels in ``dtype``, those ``compiled_table``
    shows: on sm_80 and later, and on sm_75 (per warp and per tile: tensor-core and FMA
    instructions, all instructions; registers; spilled bytes)."""
    lines = []
    for label, keep in (("sm_80 and later", lambda a: a >= 80), ("sm_75", lambda a: a < 80)):
        picked = [r for r in rows if "error" not in r and r["purpose"] == "benchmark"
                  and r["dtype"] == dtype and r["kernel"] != "stage2" and not r["dot_fp32"]
                  and keep(r["arch"])]
        ops = [r["loop_ops"] for r in picked]
        lines.append(
            f"{label}: {_span([o['HMMA'] + o['HGMMA'] for o in ops])} tensor-core and "
            f"{_span([o['FFMA'] for o in ops])} fp32 FMA instructions among "
            f"{_span([r['loop_instructions'] for r in picked])} per warp per tile; "
            f"{_span([r['registers'] for r in picked])} registers, "
            f"{sum(r['spill_bytes'] for r in picked)} bytes spilled")
    return "\n".join(lines)
