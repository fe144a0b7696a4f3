"""A 16-setting sweep of 100,000 requests: one after another, on two worker processes, on Ray.

The sweep (``pagedkv simulate``, Llama-3-8B on one H100 SXM 80GB)::

    --workload sharegpt --num-requests N --rate 40 --json --quiet
    --sweep mem_fraction_static=0.7,0.75,0.8,0.85 --sweep page_size=1,16 --sweep radix_cache=on,off

runs three times, each in a child process: ``--workers 1`` (serial, in that process),
``--workers 2`` and ``--ray`` (a Ray instance started on this machine for the sweep, its
start-up counted). Measured for each: wall seconds, and CPU seconds (user + system) of the
child and of every process under it (worker processes; Ray's own processes and its task
workers), read from ``/proc`` every 0.2 s with psutil (a process that lives less than that
may be missed); and whether its JSON report is the serial one's bytes.

On a machine shared with other work, wall time stretches with the others' load and the
speed-up of two workers is less than two: compare CPU seconds, and read the load average
recorded before and after each mode. Run: ``python bench/bench_sweep.py [--requests N]
[--modes serial,workers,ray] [--out FILE.json]``; ``--out`` writes the figures with the
machine, load and commit they were taken on (``bench/cpu_provenance.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cpu_provenance import environment

SWEEP = ["--sweep", "mem_fraction_static=0.7,0.75,0.8,0.85", "--sweep", "page_size=1,16",
         "--sweep", "radix_cache=on,off"]
MODES = {"serial": ["--workers", "1"], "workers": ["--workers", "2"], "ray": ["--ray"]}


def tree_cpu_s(proc: subprocess.Popen, seen: dict[int, float]) -> None:
    """Record the CPU seconds so far of ``proc`` and every process under it (``seen``: pid ->
    the largest user + system seconds read for it)."""
    import psutil

    try:
        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        seen[p.pid] = max(seen.get(p.pid, 0.0), t.user + t.system)


def run_mode(mode: str, requests: int) -> tuple[dict[str, object], bytes]:
    """One sweep in a child process: its figures (wall and CPU seconds, the report's hash,
    exit status) and its report."""
    cmd = [sys.executable, "-m", "pagedkv", "simulate", "--workload", "sharegpt", "--num-requests",
           str(requests), "--rate", "40", "--json", "--quiet", *SWEEP, *MODES[mode]]
    load = os.getloadavg()[0]
    seen: dict[int, float] = {}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)  # files: a full pipe would block it
        while proc.poll() is None:
            tree_cpu_s(proc, seen)
            time.sleep(0.2)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        report, errors = out.read(), err.read()
    return {"mode": mode, "command": cmd[1:], "returncode": proc.returncode, "wall_s": wall,
            "cpu_s": sum(seen.values()), "processes": len(seen),
            "report_sha256": hashlib.sha256(report).hexdigest(), "report_bytes": len(report),
            "stderr_tail": errors.decode(errors="replace")[-2000:] if proc.returncode else "",
            "load_average_before": load, "load_average_after": os.getloadavg()[0]}, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--modes", default="serial,workers,ray",
                        help="comma-separated, from serial, workers, ray (default all three)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes {args.modes}: a comma-separated list of {', '.join(MODES)}")
    env = environment()
    results, reports = [], {}
    for mode in modes:
        result, reports[mode] = run_mode(mode, args.requests)
        results.append(result)
        same = None if "serial" not in reports else reports[mode] == reports["serial"]
        result["same_as_serial"] = same
        print(f"{mode:8} 16 settings x {args.requests:,} requests: exit {result['returncode']}, "
              f"{result['wall_s']:,.1f} s wall, {result['cpu_s']:,.1f} CPU-s in "
              f"{result['processes']} processes; report {result['report_bytes']:,} bytes"
              f"{'' if same is None else ', the serial bytes' if same else ', NOT the serial bytes'}; "
              f"load average {result['load_average_before']:.2f} before, "
              f"{result['load_average_after']:.2f} after", flush=True)
        if result["returncode"]:
            print(result["stderr_tail"], file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "bench/bench_sweep.py", **env,
                                        "requests": args.requests, "settings": 16, "sweep": SWEEP,
                                        "results": results}, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
