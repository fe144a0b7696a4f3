"""Decode-attention bandwidth on a GPU: pagedkv's kernel, paged and contiguous, against SDPA,
FlashInfer and a plain copy.

Llama-3-8B attention shapes (32 query heads, 8 KV heads, head dim 128; bf16 from sm_80, fp16
on older cards such as a T4, which has no bf16 arithmetic), batch 1-256,
context 512-32K, page sizes 1/16/64. For every point it reports the time of one decode step
of one layer, the bytes that step must read, counted as FlashInfer counts them (K and V of
every token, plus q and o), and the achieved GB/s (10^9 bytes/s), as a fraction of the GPU's
peak HBM bandwidth and of the measured copy bandwidth. Implementations:

- ``pagedkv-per-token``: the kernel on a shuffled pool, one slot id per token (SGLang's
  Triton backend's table);
- ``pagedkv-per-page``: the same pool, one page id per page (the table SGLang hands FA3);
- ``pagedkv-contiguous``: the per-token kernel on consecutive slots; the gap to the paged
  rows is the cost of paging;
- ``torch-sdpa``: ``scaled_dot_product_attention`` on a contiguous ``[B, H_kv, L, D]`` cache;
- ``flashinfer``: ``BatchDecodeWithPagedKVCacheWrapper``, when ``flashinfer`` imports;
- ``device-copy``: a copy of the K pool (bytes read + written): the practical roofline.

A point whose time is under ``LAUNCH_BOUND`` empty launches (measured at the start) is
marked ``launch_bound``: at least half of it may be launch overhead, so its GB/s says little
and chapter 6 does not plot it. The contiguous row also records ``max |kernel - SDPA|``
against twice ``reference.decode_tolerance`` (each may be that far from exact attention).

Usage (GPU)::

    python bench/bench_decode.py        # writes bench/results/decode-<gpu>-<date>.json
    python bench/bench_decode.py --batch 1 64 --context 4096 --out-dir /tmp/x

The report is rewritten after every point with ``"complete": false``, and once more with
``true`` at the end, so a run stopped by a time limit keeps what it measured; an error at
one point (out of memory, a failed compile) is recorded in its rows and the sweep goes on.
The target point (batch 64, context 4,096) runs first. ``--time-budget`` stops starting new
points after that many seconds. The default sweep has 20 points of up to 12 timings, each a
``do_bench`` of about 0.15 s, so it should take 2-3 minutes on an H100 or H200 with the
compiles (an estimate until a run's log says). ``bash bench/gpu_check.sh`` runs it after the
GPU tests.

Without CUDA it refuses to run. ``--cpu-smoke`` runs tiny shapes through Triton's CPU
interpreter to show the script works; it prints timings of the interpreter (not of any
GPU) and writes nothing unless ``--out`` or ``--out-dir`` is given.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from pagedkv.gpus import get_gpu
from pagedkv.layers.attention.decode_attention import run_plan
from pagedkv.lessons.kernel import random_decode_case
from pagedkv.lessons.kernel.baselines import (
    copy_bytes,
    copy_runner,
    flashinfer_runner,
    sdpa_runner,
)
from pagedkv.lessons.kernel.compiled import loaded_resources
from pagedkv.lessons.kernel.provenance import environment
from pagedkv.lessons.kernel.traffic import decode_bytes
from pagedkv.model_executor.model_loader import resolve_dtype

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = (64, 4096)  # (batch, context) of the targets: measured first
LAUNCH_BOUND = 4  # a point under 4 empty launches (two per decode step) is launch-bound

# Which pagedkv.gpus preset a CUDA device name is (first match wins). A device that matches
# none (H100 PCIe or NVL, A100 PCIe, ...) gets no peak unless --gpu-preset names one.
# A T4's 320 GB/s is NVIDIA's T4 datasheet figure (pagedkv.gpus['t4']), Colab's default GPU.
DEVICE_PRESETS = [
    (r"H200", "h200-141gb"),
    (r"H100 80GB HBM3|H100 SXM", "h100-sxm-80gb"),
    (r"A100-SXM4-80GB", "a100-80gb"),
    (r"A100-SXM4-40GB", "a100-40gb"),
    (r"\bL4\b", "l4"),
    (r"RTX 4090", "rtx-4090"),
    (r"\bT4\b", "t4"),
    (r"MI300X", "mi300x"),
]
# What --dry-run (and bash bench/gpu_check.sh --dry-run) shows without a GPU: a Colab T4 and
# an H100 SXM, as torch.cuda names them, with their compute capability.
PLAN_GPUS = [("Tesla T4", (7, 5)), ("NVIDIA H100 80GB HBM3", (9, 0))]


def device_preset(gpu_name: str) -> str | None:
    """The ``pagedkv.gpus`` preset a CUDA device name is (:data:`DEVICE_PRESETS`), or None."""
    return next((p for pattern, p in DEVICE_PRESETS if re.search(pattern, gpu_name)), None)


def peak_bandwidth(gpu_name: str, preset: str | None = None) -> tuple[float | None, str | None]:
    """Peak HBM bytes/s of ``gpu_name`` from ``pagedkv.gpus``, and which preset gave it.

    Raises:
        ConfigError: ``preset`` is not a ``pagedkv.gpus`` preset name.
    """
    if preset is None:
        preset = device_preset(gpu_name)
    if preset is None:
        return None, None
    return float(get_gpu(preset).hbm_bandwidth), f"pagedkv.gpus[{preset!r}]"


def default_dtype(capability: tuple[int, int]) -> str:
    """The sweep's dtype on a card of ``capability``: bfloat16 from sm_80, float16 before
    (a T4 has no bf16 arithmetic); the engine's rule (``model_loader.resolve_dtype``)."""
    dtype = resolve_dtype(None, torch.device("cuda"), capability)
    return str(dtype).removeprefix("torch.")


def plan_lines(gpus: list[tuple[str, tuple[int, int]]]) -> list[str]:
    """For each ``(device name, capability)``: the dtype the sweep uses and the peak
    bandwidth row its fraction-of-peak compares against. Needs no GPU."""
    lines = []
    for name, capability in gpus:
        preset = device_preset(name)
        row = "no peak bandwidth row (pass --gpu-preset)"
        if preset is not None:
            gpu = get_gpu(preset)
            row = (f"peak {gpu.hbm_bandwidth / 1e9:,.0f} GB/s from pagedkv.gpus[{preset!r}] "
                   f"({gpu.source})")
        lines.append(f"{name} (sm_{capability[0]}{capability[1]}): --dtype "
                     f"{default_dtype(capability)}, {row}")
    return lines


def time_call(fn: Callable[[], object], cuda: bool) -> float:
    """Seconds per call: triton's do_bench median on a GPU, one timed call on the CPU."""
    if cuda:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=100) * 1e-3
    fn()  # warm-up (the interpreter rewrites the kernel source on first use)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def launch_floor(cuda: bool) -> float:
    """Seconds of a near-empty launch (filling one element), the fixed cost of any kernel."""
    one = torch.empty(1, device="cuda" if cuda else "cpu")
    return time_call(lambda: one.fill_(1.0), cuda)


class Point:
    """The rows of one (batch, context) point; :meth:`record` times one implementation and
    never raises: a failure becomes a row with an ``"error"``."""

    def __init__(self, batch: int, context: int, nbytes: int, cuda: bool,
                 peak: float | None, floor: float) -> None:
        self.batch, self.context, self.nbytes = batch, context, nbytes
        self.cuda, self.peak, self.floor = cuda, peak, floor
        self.rows: list[dict[str, object]] = []

    def record(self, impl: str, page_size: int | None, make: Callable[[], object],
               nbytes: int | None = None, **extra: object) -> None:
        """Build the callable with ``make()`` and time it; ``extra`` fields join the row.
        ``make`` may return ``(fn, fields)`` to add fields it computed (split count, kernel
        resources)."""
        row: dict[str, object] = {"impl": impl, "batch": self.batch, "context": self.context,
                                  "page_size": page_size, "bytes": nbytes or self.nbytes}
        try:
            made = make()
            fn, fields = made if isinstance(made, tuple) else (made, {})
            row.update(fields)
            seconds = time_call(fn, self.cuda)
        except Exception as exc:  # recorded; the sweep goes on
            self.rows.append({**row, **extra, "error": repr(exc)[:500]})
            print(f"{impl:20s} B={self.batch:4d} L={self.context:6d} ERROR {exc!r:.200}")
            if self.cuda:
                torch.cuda.empty_cache()
            return
        gbps = row["bytes"] / seconds / 1e9
        row.update({"time_us": seconds * 1e6, "gb_per_s": gbps if self.cuda else None,
                    "fraction_of_peak": gbps * 1e9 / self.peak if self.cuda and self.peak
                    else None,
                    "launch_bound": self.cuda and seconds < LAUNCH_BOUND * self.floor,
                    **extra})
        self.rows.append(row)
        print(f"{impl:20s} B={self.batch:4d} L={self.context:6d} page={page_size!s:>4s} "
              f"{seconds * 1e6:10.1f} us" + (f" {gbps:8.1f} GB/s" if self.cuda else "")
              + ("  (launch-bound)" if row["launch_bound"] else ""))

    def finish(self) -> list[dict[str, object]]:
        """Add each row's fraction of this point's copy bandwidth; return the rows."""
        copy = next((r["gb_per_s"] for r in self.rows
                     if r["impl"] == "device-copy" and r.get("gb_per_s")), None)
        for r in self.rows:
            r["fraction_of_copy"] = r["gb_per_s"] / copy if copy and r.get("gb_per_s") else None
        return self.rows


def kernel_run(case, per_page: bool) -> tuple[Callable[[], object], dict[str, object]]:
    """The kernel planned once over ``case`` (inputs checked once), its split count and the
    registers and spills of its compiled stages."""
    plan = case.plan(per_page)
    return (lambda: run_plan(plan)), {"num_splits": plan.num_splits,
                                       "kernel": loaded_resources(plan)}


def bench_point(batch: int, context: int, args: argparse.Namespace, cuda: bool,
                peak: float | None, floor: float) -> list[dict[str, object]]:
    """All implementations at one (batch, context); rows of the results table."""
    shape = {"num_q_heads": args.num_q_heads, "num_kv_heads": args.num_kv_heads,
             "head_dim": args.head_dim, "dtype": getattr(torch, args.dtype),
             "device": "cuda" if cuda else "cpu"}
    lens = [context] * batch
    nbytes = decode_bytes(torch.tensor(lens), args.num_q_heads, args.num_kv_heads,
                          args.head_dim, shape["dtype"].itemsize)
    point = Point(batch, context, nbytes, cuda, peak, floor)
    for page_size in args.page_size:
        try:
            case = random_decode_case(lens, page_size=page_size, **shape)
        except Exception as exc:  # e.g. out of memory: this page size is recorded as failed
            point.rows.append({"impl": "pool", "batch": batch, "context": context,
                               "page_size": page_size, "error": repr(exc)[:500]})
            continue
        point.record("pagedkv-per-token", page_size, lambda c=case: kernel_run(c, False))
        point.record("pagedkv-per-page", page_size, lambda c=case: kernel_run(c, True),
                     **walks_agree(case))
        if args.flashinfer:
            point.record("flashinfer", page_size, lambda c=case: flashinfer_runner(c))
        del case
    try:
        flat = random_decode_case(lens, page_size=1, shuffle=False, **shape)
    except Exception as exc:
        point.rows.append({"impl": "pool", "batch": batch, "context": context,
                           "page_size": None, "error": repr(exc)[:500]})
        return point.finish()
    point.record("pagedkv-contiguous", None, lambda: kernel_run(flat, False),
                 **sdpa_agreement(flat))
    point.record("torch-sdpa", None, lambda: sdpa_runner(flat))
    point.record("device-copy", None, lambda: copy_runner(flat), nbytes=copy_bytes(flat))
    return point.finish()


def walks_agree(case) -> dict[str, object]:
    """Whether the per-page walk returns exactly the per-token walk's output (same tiles in
    the same order, so it must, bit for bit)."""
    try:
        same = torch.equal(run_plan(case.plan(per_page=True)),
                           run_plan(case.plan(per_page=False)))
        return {"equals_per_token": same}
    except Exception as exc:
        return {"agreement_error": repr(exc)[:500]}


def sdpa_agreement(flat) -> dict[str, object]:
    """``max |kernel - SDPA|`` on the contiguous case, and the bound it must stay under
    (twice ``decode_tolerance``: both approximate the exact attention)."""
    try:
        ours = run_plan(flat.plan(per_page=False)).float()
        theirs = sdpa_runner(flat)()[:, :, 0, :].float()
        diff, bound = float((ours - theirs).abs().max()), 2 * flat.tolerance(theirs)
        return {"max_diff_vs_sdpa": diff, "diff_bound": bound, "agrees": diff <= bound}
    except Exception as exc:
        return {"agreement_error": repr(exc)[:500]}


def sweep_order(batches: list[int], contexts: list[int]) -> list[tuple[int, int]]:
    """Every (batch, context), the target point first, then by batch and context."""
    points = [(b, c) for b in batches for c in contexts]
    return sorted(points, key=lambda p: (p != TARGET, p))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; ``--cpu-smoke`` swaps in tiny shapes."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 16, 32, 64, 128, 256])
    p.add_argument("--context", type=int, nargs="+", default=[512, 4096, 32768])
    p.add_argument("--page-size", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--num-q-heads", type=int, default=32)
    p.add_argument("--num-kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"],
                   help="default: bfloat16 from sm_80, float16 before (a T4 has no bf16)")
    p.add_argument("--max-tokens", type=int, default=1 << 22,
                   help="skip points with batch * context above this (pool memory)")
    p.add_argument("--no-flashinfer", dest="flashinfer", action="store_false")
    p.add_argument("--gpu-preset", help="pagedkv.gpus preset for the peak bandwidth, if the "
                   "device name does not identify one (e.g. h100-sxm-80gb)")
    p.add_argument("--time-budget", type=float, help="seconds after which no new point starts")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", type=Path, help="results file (default: bench/results/...)")
    out.add_argument("--out-dir", type=Path, help="folder for the default file name")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny shapes on the CPU interpreter, to check the script itself")
    p.add_argument("--dry-run", action="store_true",
                   help="print the dtype and peak-bandwidth row for a T4 and an H100 (and "
                   "this GPU, if any), run nothing")
    args = p.parse_args(argv)
    if args.flashinfer:
        try:
            import flashinfer  # noqa: F401
        except ImportError:
            args.flashinfer = False  # optional: only its rows are skipped
    if args.cpu_smoke:
        args.batch, args.context, args.page_size = [2], [40], [1, 16]
        args.num_q_heads, args.num_kv_heads, args.head_dim = 4, 2, 64
        args.dtype, args.flashinfer = "float32", False
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and write the JSON; exit status 2 without CUDA (unless --cpu-smoke)."""
    started = time.monotonic()
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    if args.dry_run:
        here = ([(torch.cuda.get_device_name(), torch.cuda.get_device_capability())]
                if cuda else [])
        print("\n".join(plan_lines([*PLAN_GPUS, *here])))
        return 0
    if args.dtype is None:
        args.dtype = default_dtype(torch.cuda.get_device_capability()) if cuda else "float32"
    if not cuda and not args.cpu_smoke:
        print("bench_decode.py measures GPU memory bandwidth and needs CUDA, but "
              "torch.cuda.is_available() is False. Run it on a GPU machine (Colab works), or "
              "pass --cpu-smoke to check the script on tiny shapes.", file=sys.stderr)
        return 2
    env = environment(cuda)
    peak, peak_source = peak_bandwidth(env["gpu"], args.gpu_preset) if cuda else (None, None)
    out = args.out
    if out is None and (cuda or args.out_dir):
        slug = re.sub(r"[^a-z0-9]+", "-", str(env["gpu"] or "cpu").lower()).strip("-")
        out = (args.out_dir or RESULTS) / f"decode-{slug}-{env['date'][:10]}.json"
    floor = launch_floor(cuda)
    results: list[dict[str, object]] = []
    skipped = []

    def write(complete: bool) -> None:
        """Write the report so far: a run stopped by a time limit keeps the points it measured."""
        if out is None:
            return
        report = {
            "schema": 2, **env, "peak_hbm_bytes_per_s": peak, "peak_source": peak_source,
            "launch_floor_us": floor * 1e6,
            "shape": {"num_q_heads": args.num_q_heads, "num_kv_heads": args.num_kv_heads,
                      "head_dim": args.head_dim, "dtype": args.dtype},
            "complete": complete, "results": results, "skipped": skipped,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")  # a kill mid-write leaves the last whole file
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        tmp.replace(out)

    for batch, context in sweep_order(args.batch, args.context):
        if batch * context > args.max_tokens:
            skipped.append({"batch": batch, "context": context, "why": "--max-tokens"})
        elif args.time_budget is not None and time.monotonic() - started > args.time_budget:
            skipped.append({"batch": batch, "context": context, "why": "--time-budget"})
        else:
            results += bench_point(batch, context, args, cuda, peak, floor)
            if cuda:
                torch.cuda.empty_cache()
        write(complete=False)
    write(complete=True)
    if out is not None:
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
