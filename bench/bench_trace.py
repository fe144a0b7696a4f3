"""A million-request trace through ``pagedkv simulate``: wall time and peak memory.

Writes a ShareGPT-like JSON Lines trace (``pagedkv.workloads.synthetic.sharegpt_like``, seed
0: log-normal prompt and output lengths with the vLLM paper's ShareGPT means, max_new_tokens
2048; all requests at t=0 unless ``--rate``), then runs, in a child process pinned to one
CPU core::

    python -m pagedkv simulate --trace FILE --disable-radix-cache --quiet --csv PER_REQUEST.csv

on Llama-3-8B's pool on one H100 SXM 80GB, and reports the child's wall time (start-up,
reading the trace, simulating, writing the per-request table), the part spent simulating
(as the CLI reports it), and its peak resident memory (``ru_maxrss``). Targets (issue 15):
under 60 s and under 2 GB for 1,000,000 requests. The load average is printed too: on a
shared machine, compare runs taken under similar load.

Run: ``python bench/bench_trace.py [--requests N] [--rate R] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pagedkv.workloads.synthetic import sharegpt_like

TARGET_S = 60.0
TARGET_BYTES = 2 * 2**30


def write_trace(path: Path, n: int, rate: float | None) -> None:
    """The ShareGPT-like trace, one JSON object per line."""
    specs = sharegpt_like(n, rate=rate, seed=0)
    with path.open("w") as f:
        for s in specs:
            when = f', "arrival_s": {s.arrival_s:.6f}' if rate else ""
            f.write(f'{{"prompt_len": {s.prompt_len}, "output_len": {s.output_len}, '
                    f'"max_new_tokens": {s.max_new_tokens}{when}}}\n')


def one_core() -> None:
    """Pin the child to one CPU (the target is for one core)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, help="Poisson arrivals in requests/s (default: all at t=0)")
    parser.add_argument("--keep", type=Path, help="write the trace and the table here (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        trace, table = folder / f"sharegpt_{args.requests}.jsonl", folder / "per_request.csv"
        start = time.perf_counter()
        write_trace(trace, args.requests, args.rate)
        print(f"trace: {args.requests:,} requests, {trace.stat().st_size / 2**20:,.0f} MiB, "
              f"written in {time.perf_counter() - start:.1f} s")
        load = os.getloadavg()[0]
        cmd = [sys.executable, "-m", "pagedkv", "simulate", "--trace", str(trace),
               "--disable-radix-cache", "--quiet", "--csv", str(table)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=one_core, check=False)
        wall = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
        print(proc.stdout, end="")
        if proc.returncode:
            print(proc.stderr, file=sys.stderr)
            sys.exit(proc.returncode)
        sim = re.search(r"([\d,.]+) s of wall time to simulate", proc.stdout)
        sim_s = float(sim.group(1).replace(",", "")) if sim else float("nan")
        print(f"one core: {wall:,.1f} s wall in all ({sim_s:,.1f} s simulating, {wall - sim_s:,.1f} s "
              f"start-up, reading the trace and writing the table); peak memory "
              f"{peak / 2**30:.2f} GiB; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
        print(f"targets: {TARGET_S:.0f} s ({'met' if wall < TARGET_S else 'NOT met'}), "
              f"{TARGET_BYTES / 2**30:.0f} GiB ({'met' if peak < TARGET_BYTES else 'NOT met'})")


if __name__ == "__main__":
    main()
