"""A million requests through ``pagedkv simulate``: CPU time, wall time and peak memory.

Writes a ShareGPT-like JSON Lines requests file (``pagedkv.workloads.synthetic.sharegpt_like``, seed
0: log-normal prompt and output lengths with the vLLM paper's ShareGPT means, max_new_tokens
2048; all requests at t=0 unless ``--rate``), then runs, in a child process pinned to one
CPU core, once per radix-cache mode (``--radix off``, ``on`` or ``both``)::

    python -m pagedkv simulate --requests-file FILE [--disable-radix-cache] --quiet \
        --csv PER_REQUEST.csv --core CORE

on Llama-3-8B's pool on one H100 SXM 80GB, and reports the child's CPU seconds (user +
system, its own ``rusage``), its wall time (start-up, reading the requests file, simulating, writing
the per-request table), the part spent simulating (as the CLI reports it, wall time) and its
peak resident memory (``ru_maxrss``). Targets (issue 24): under 60 CPU-seconds and under
2 GiB for 1,000,000 requests with the radix cache off. Its requests share no
prefix, so the radix cache on measures the tree's upkeep, not reuse. On a shared machine
wall time counts the time the child waited for its core: compare CPU seconds.

``--core`` picks the scheduler loop (``auto``, the CLI's default; ``compiled``; ``reference``,
the Python scheduler).

Run: ``python bench/bench_long_run.py [--requests N] [--rate R] [--radix off|on|both]
[--core auto|compiled|reference] [--keep DIR] [--out FILE.json]``; ``--out`` writes the
figures with the machine, load and commit they were taken on (``bench/cpu_provenance.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cpu_provenance import environment

from pagedkv.workloads.synthetic import sharegpt_like

TARGET_CPU_S = 60.0
TARGET_BYTES = 2 * 2**30


def write_requests(path: Path, n: int, rate: float | None) -> None:
    """The ShareGPT-like requests, one JSON object per line."""
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


def run_child(cmd: list[str], folder: Path) -> dict[str, object]:
    """Run ``cmd`` on one core; its stdout, exit status, CPU and wall seconds and peak memory
    (bytes), from this child's own ``rusage`` (``os.wait4``)."""
    out_path = folder / "stdout.txt"
    with out_path.open("w") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True, preexec_fn=one_core)
        stderr = proc.stderr.read() if proc.stderr else ""
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout = out_path.read_text()
    sim = re.search(r"([\d,.]+) s of wall time to simulate", stdout)
    steps = re.search(r"\(([\d,]+) steps:", stdout)
    return {"returncode": proc.returncode, "stdout": stdout, "stderr": stderr,
            "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall,
            "simulate_wall_s": float(sim.group(1).replace(",", "")) if sim else None,
            "steps": int(steps.group(1).replace(",", "")) if steps else None,
            "peak_bytes": usage.ru_maxrss * 1024}  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, help="Poisson arrivals in requests/s (default: all at t=0)")
    parser.add_argument("--radix", choices=("off", "on", "both"), default="off",
                        help="the radix cache off (the target's case), on, or both runs")
    parser.add_argument("--core", choices=("auto", "compiled", "reference"), default="auto",
                        help="the scheduler loop the CLI runs (default: auto, the CLI's default)")
    parser.add_argument("--keep", type=Path,
                        help="write the requests file and the table here (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    env = environment()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        requests, table = folder / f"sharegpt_{args.requests}.jsonl", folder / "per_request.csv"
        start = time.perf_counter()
        write_requests(requests, args.requests, args.rate)
        print(f"requests file: {args.requests:,} requests, {requests.stat().st_size / 2**20:,.0f} MiB, "
              f"written in {time.perf_counter() - start:.1f} s")
        for mode in (("off", "on") if args.radix == "both" else (args.radix,)):
            load = os.getloadavg()[0]
            cmd = [sys.executable, "-m", "pagedkv", "simulate", "--requests-file", str(requests), "--quiet",
                   "--csv", str(table), "--core", args.core]
            cmd += ["--disable-radix-cache"] if mode == "off" else []
            r = run_child(cmd, folder)
            print(r["stdout"], end="")
            if r["returncode"]:
                print(r["stderr"], file=sys.stderr)
                sys.exit(r["returncode"])
            per_step = 1e6 * r["cpu_s"] / max(r["steps"] or 0, 1)
            print(f"radix cache {mode}, --core {args.core}, one core: {r['cpu_s']:,.1f} CPU-s "
                  f"({per_step:,.0f} µs per step in all), {r['wall_s']:,.1f} s wall "
                  f"({r['simulate_wall_s']:,.1f} s "
                  f"simulating); peak memory {r['peak_bytes'] / 2**30:.2f} GiB; load average "
                  f"{load:.2f} before, {os.getloadavg()[0]:.2f} after")
            if mode == "off":
                cpu_ok, mem_ok = r["cpu_s"] < TARGET_CPU_S, r["peak_bytes"] < TARGET_BYTES
                print(f"targets: {TARGET_CPU_S:.0f} CPU-s ({'met' if cpu_ok else 'NOT met'}), "
                      f"{TARGET_BYTES / 2**30:.0f} GiB ({'met' if mem_ok else 'NOT met'})")
            results.append({"radix_cache": mode, "core": args.core, "command": cmd[1:],
                            "requests": args.requests,
                            "rate": args.rate, "load_average_before": load,
                            "load_average_after": os.getloadavg()[0],
                            **{k: r[k] for k in ("cpu_s", "wall_s", "simulate_wall_s", "steps",
                                                 "peak_bytes")}})
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "bench/bench_long_run.py", **env,
                                        "targets": {"cpu_s": TARGET_CPU_S, "peak_bytes": TARGET_BYTES},
                                        "results": results}, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
