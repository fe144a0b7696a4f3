"""Decode-attention bandwidth on a GPU: pagedkv's Triton kernel, paged and contiguous, vs SDPA.

Llama-3-8B attention shapes (32 query heads, 8 KV heads, head dim 128, bf16), batch 1-256,
context 512-32K, page sizes 1/16/64. For every point it reports the time of one decode
step of one layer, the bytes that step must read (K and V of every token, plus q and o)
and the achieved GB/s, as a fraction of the GPU's peak HBM bandwidth. Implementations:

- ``pagedkv-per-token``: :func:`pagedkv.layers.attention.paged_decode_attention` on a shuffled pool
  (one slot id per token, as SGLang's Triton backend);
- ``pagedkv-per-page``: :func:`pagedkv.layers.attention.paged_decode_attention_by_page` on the same
  pool (one page id per page, as FlashInfer/FA3 take it);
- ``pagedkv-contiguous``: the per-token kernel on consecutive slots (the cost of paging is
  the gap to the paged rows);
- ``torch-sdpa``: ``scaled_dot_product_attention`` on a contiguous ``[B, H_kv, L, D]`` cache;
- ``flashinfer``: ``BatchDecodeWithPagedKVCacheWrapper`` when ``flashinfer`` imports.

Usage (GPU)::

    python bench/bench_decode.py        # writes bench/results/decode-<gpu>-<date>.json
    python bench/bench_decode.py --batch 1 64 --context 4096

The file is rewritten after every (batch, context) point with ``"complete": false``, and
once more with ``true`` at the end, so a run stopped by a time limit keeps what it measured.
The default sweep is 23 points of 8 timings each (11 with FlashInfer), each a ``do_bench``
of about 0.15 s, so with the kernels' compilation a run should take 1-3 minutes on an H100
or H200. ``bash bench/gpu_check.sh`` runs it after the GPU tests.

Without CUDA it refuses to run. ``--cpu-smoke`` runs tiny shapes through Triton's CPU
interpreter to show the script works; it prints timings of the interpreter (not of any
GPU) and writes nothing unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import pagedkv
from pagedkv.gpus import get_gpu
from pagedkv.layers.attention import (
    paged_decode_attention,
    paged_decode_attention_by_page,
    random_decode_case,
)
from pagedkv.layers.attention.checks import check_decode_inputs
from pagedkv.layers.attention.decode_attention import _launch
from pagedkv.layers.attention.traffic import decode_bytes

RESULTS = Path(__file__).resolve().parent / "results"

# Which pagedkv.gpus preset a CUDA device name is (first match wins). A device that matches
# none (H100 PCIe or NVL, A100 PCIe, ...) gets no peak unless --gpu-preset names one.
DEVICE_PRESETS = [
    (r"H200", "h200-141gb"),
    (r"H100 80GB HBM3|H100 SXM", "h100-sxm-80gb"),
    (r"A100-SXM4-80GB", "a100-80gb"),
    (r"A100-SXM4-40GB", "a100-40gb"),
    (r"\bL4\b", "l4"),
    (r"RTX 4090", "rtx-4090"),
    (r"MI300X", "mi300x"),
]


def peak_bandwidth(gpu_name: str, preset: str | None = None) -> tuple[float | None, str | None]:
    """Peak HBM bytes/s of ``gpu_name`` from ``pagedkv.gpus``, and which preset gave it.

    Raises:
        ConfigError: ``preset`` is not a ``pagedkv.gpus`` preset name.
    """
    if preset is None:
        preset = next((p for pattern, p in DEVICE_PRESETS if re.search(pattern, gpu_name)), None)
    if preset is None:
        return None, None
    return float(get_gpu(preset).hbm_bandwidth), f"pagedkv.gpus[{preset!r}]"


def time_call(fn: Callable[[], object], cuda: bool) -> float:
    """Seconds per call: triton's do_bench median on a GPU, one timed call on the CPU."""
    if cuda:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=100) * 1e-3
    fn()  # warm-up (the interpreter rewrites the kernel source on first use)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def flashinfer_runner(case, num_q_heads: int, num_kv_heads: int, head_dim: int
                      ) -> Callable[[], object]:
    """A FlashInfer paged decode over the same pool and pages (NHD layout)."""
    import flashinfer

    ps = case.page_size
    pages = case.page_table[case.req_pool_indices.long()]
    lens = case.seq_lens.long()
    num_pages = (lens + ps - 1) // ps
    keep = torch.arange(pages.shape[1], device=pages.device)[None, :] < num_pages[:, None]
    indptr = torch.cat([num_pages.new_zeros(1), num_pages.cumsum(0)]).to(torch.int32)
    last_page_len = ((lens - 1) % ps + 1).to(torch.int32)
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device=case.q.device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    wrapper.plan(indptr, pages[keep].to(torch.int32), last_page_len, num_q_heads,
                 num_kv_heads, head_dim, ps, q_data_type=case.q.dtype,
                 kv_data_type=case.k_cache.dtype)
    shape = (-1, ps, num_kv_heads, head_dim)
    kv = (case.k_cache.view(shape), case.v_cache.view(shape))
    return lambda: wrapper.run(case.q, kv)


def bench_point(batch: int, context: int, page_sizes: list[int], args: argparse.Namespace,
                cuda: bool, peak: float | None) -> list[dict[str, object]]:
    """All implementations at one (batch, context); rows of the results table."""
    h_q, h_kv, d = args.num_q_heads, args.num_kv_heads, args.head_dim
    dtype = getattr(torch, args.dtype)
    device = "cuda" if cuda else "cpu"
    lens = [context] * batch
    nbytes = decode_bytes(torch.tensor(lens), h_q, h_kv, d, torch.finfo(dtype).bits // 8)
    rows: list[dict[str, object]] = []

    def record(impl: str, page_size: int | None, fn: Callable[[], object]) -> None:
        seconds = time_call(fn, cuda)
        gbps = nbytes / seconds / 1e9
        rows.append({"impl": impl, "batch": batch, "context": context, "page_size": page_size,
                     "time_us": seconds * 1e6, "bytes": nbytes,
                     "gb_per_s": gbps if cuda else None,
                     "fraction_of_peak": nbytes / seconds / peak if cuda and peak else None})
        print(f"{impl:20s} B={batch:4d} L={context:6d} page={page_size!s:>4s} "
              f"{seconds * 1e6:10.1f} us" + (f" {gbps:8.1f} GB/s" if cuda else ""))

    def launcher(case, per_page: bool) -> Callable[[], object]:
        """The kernel without the per-call input checks (they run once, here)."""
        table = case.page_table if per_page else case.req_to_token
        ps = case.page_size if per_page else 1
        shape = check_decode_inputs(case.q, case.k_cache, case.v_cache, table,
                                    case.req_pool_indices, case.seq_lens, page_size=ps)
        return lambda: _launch(case.q, case.k_cache, case.v_cache, table,
                               case.req_pool_indices, case.seq_lens, shape, page_size=ps,
                               per_page=per_page, sm_scale=None, num_kv_splits=None)

    for page_size in page_sizes:
        case = random_decode_case(lens, num_q_heads=h_q, num_kv_heads=h_kv, head_dim=d,
                                  page_size=page_size, dtype=dtype, device=device)
        # One checked call of each entry point; they must agree before anything is timed.
        diff = (paged_decode_attention(*case.slot_args()).float()
                - paged_decode_attention_by_page(*case.page_args()).float()).abs().max()
        if diff.item() > 1e-2:
            raise RuntimeError(f"per-token and per-page kernels disagree by {diff.item()}")
        record("pagedkv-per-token", page_size, launcher(case, per_page=False))
        record("pagedkv-per-page", page_size, launcher(case, per_page=True))
        if args.flashinfer:
            try:
                record("flashinfer", page_size, flashinfer_runner(case, h_q, h_kv, d))
            except Exception as exc:  # an optional third-party baseline: note it, go on
                rows.append({"impl": "flashinfer", "batch": batch, "context": context,
                             "page_size": page_size, "error": repr(exc)})
        del case

    flat = random_decode_case(lens, num_q_heads=h_q, num_kv_heads=h_kv, head_dim=d,
                              page_size=1, dtype=dtype, device=device, shuffle=False)
    record("pagedkv-contiguous", None, launcher(flat, per_page=False))
    k = flat.k_cache[1:1 + batch * context].view(batch, context, h_kv, d).transpose(1, 2)
    v = flat.v_cache[1:1 + batch * context].view(batch, context, h_kv, d).transpose(1, 2)
    k, v, q = k.contiguous(), v.contiguous(), flat.q[:, :, None, :]
    del flat
    record("torch-sdpa", None, lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, enable_gqa=True))
    return rows


def environment(cuda: bool) -> dict[str, object]:
    """GPU, driver and library versions for the results file."""
    env: dict[str, object] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "torch": torch.__version__,
        "pagedkv": pagedkv.__version__, "cuda": torch.version.cuda,
    }
    import triton

    env["triton"] = triton.__version__
    try:
        import flashinfer

        env["flashinfer"] = getattr(flashinfer, "__version__", "unknown")
    except ImportError:
        env["flashinfer"] = None
    if cuda:
        env["gpu"] = torch.cuda.get_device_name()
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=30, check=True)
            env["driver"] = out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            env["driver"] = None
    else:
        env["gpu"] = None
        env["device"] = "cpu (TRITON_INTERPRET=1): interpreter timings, not a GPU measurement"
    return env


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; ``--cpu-smoke`` swaps in tiny shapes."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32, 64, 128, 256])
    p.add_argument("--context", type=int, nargs="+", default=[512, 2048, 8192, 32768])
    p.add_argument("--page-size", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--num-q-heads", type=int, default=32)
    p.add_argument("--num-kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    p.add_argument("--max-tokens", type=int, default=1 << 22,
                   help="skip points with batch * context above this (pool memory)")
    p.add_argument("--no-flashinfer", dest="flashinfer", action="store_false")
    p.add_argument("--gpu-preset", help="pagedkv.gpus preset for the peak bandwidth, if the "
                   "device name does not identify one (e.g. h100-sxm-80gb)")
    p.add_argument("--out", type=Path, help="results file (default: bench/results/...)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny shapes on the CPU interpreter, to check the script itself")
    args = p.parse_args(argv)
    if args.cpu_smoke:
        args.batch, args.context, args.page_size = [2], [40], [1, 16]
        args.num_q_heads, args.num_kv_heads, args.head_dim = 4, 2, 64
        args.dtype, args.flashinfer = "float32", False
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and write the JSON; exit status 2 without CUDA (unless --cpu-smoke)."""
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_smoke:
        print("bench_decode.py measures GPU memory bandwidth and needs CUDA, but "
              "torch.cuda.is_available() is False. Run it on a GPU machine (Colab works), or "
              "pass --cpu-smoke to check the script on tiny shapes.", file=sys.stderr)
        return 2
    env = environment(cuda)
    peak, peak_source = peak_bandwidth(env["gpu"], args.gpu_preset) if cuda else (None, None)
    out = args.out
    if out is None and cuda:
        slug = re.sub(r"[^a-z0-9]+", "-", str(env["gpu"]).lower()).strip("-")
        out = RESULTS / f"decode-{slug}-{env['date'][:10]}.json"
    results: list[dict[str, object]] = []
    skipped = []

    def write(complete: bool) -> None:
        """Write the report so far: a run stopped by a time limit keeps the points it measured."""
        if out is None:
            return
        report = {
            "schema": 1, **env, "peak_hbm_bytes_per_s": peak, "peak_source": peak_source,
            "shape": {"num_q_heads": args.num_q_heads, "num_kv_heads": args.num_kv_heads,
                      "head_dim": args.head_dim, "dtype": args.dtype},
            "complete": complete, "results": results, "skipped": skipped,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")  # a kill mid-write leaves the last whole file
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        tmp.replace(out)

    for batch in args.batch:
        for context in args.context:
            if batch * context > args.max_tokens:
                skipped.append({"batch": batch, "context": context, "why": "--max-tokens"})
                continue
            results += bench_point(batch, context, args.page_size, args, cuda, peak)
            write(complete=False)
            if cuda:
                torch.cuda.empty_cache()
    write(complete=True)
    if out is not None:
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
