"""Reading a million-request JSON Lines file: the whole-text reader against line by line.

Writes the ShareGPT-like requests file ``bench/bench_long_run.py`` writes (seed 0), then reads it with
``pagedkv.workloads.request_files.load_requests`` in a fresh child process per reader and per
repeat: the default reader (plain rows parsed a block of lines per ``json.loads`` call) and
the line by line reader alone (the whole-text reader switched off). Reports each child's CPU
seconds for the read (``time.process_time``, start-up excluded) and its peak resident memory
(``ru_maxrss``, start-up included), and checks that both readers give the same columns.

Run: ``python bench/bench_request_read.py [--requests N] [--rate R] [--repeat K] [--out FILE.json]``;
``--out`` writes the figures with the machine, load and commit they were taken on
(``bench/cpu_provenance.py``). On a shared machine CPU seconds are the fairer figure, and
even they grow with the load (caches and cores are shared): compare runs taken together.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import resource
import tempfile
import time
from pathlib import Path

from bench_long_run import write_requests
from cpu_provenance import environment

COLUMNS = ("line", "prompt_len", "output_len", "max_new_tokens", "arrival_s", "ignore_eos",
           "follows", "conversation", "turn")


def read_once(path: str, whole_text: bool, out: mp.Queue) -> None:
    """In a child: read ``path`` and put (CPU s, peak bytes, digest of the columns)."""
    import pagedkv.workloads.request_files as request_files

    if not whole_text:
        request_files._jsonl_plain_columns = lambda _text: None
    start = time.process_time()
    requests = request_files.load_requests(path)
    cpu = time.process_time() - start
    digest = hashlib.sha256()
    for name in COLUMNS:
        col = getattr(requests, name)
        digest.update(b"none" if col is None else col.tobytes())
    out.put((cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, digest.hexdigest()))


def measure(path: str, whole_text: bool) -> tuple[float, int, str]:
    """One fresh child process per read (forked: no import cost in the figure)."""
    queue: mp.Queue = mp.get_context("fork").Queue()
    child = mp.get_context("fork").Process(target=read_once, args=(path, whole_text, queue))
    child.start()
    result = queue.get()
    child.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, help="Poisson arrivals in requests/s (default: all at t=0)")
    parser.add_argument("--repeat", type=int, default=3, help="reads per reader (the least CPU counts)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    env = environment()
    import pagedkv.workloads.request_files  # noqa: F401  (imported once, before the forks)

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"sharegpt_{args.requests}.jsonl"
        writer = mp.get_context("fork").Process(target=write_requests, args=(path, args.requests, args.rate))
        writer.start()  # in a child, so that the readers do not inherit its memory
        writer.join()
        size = path.stat().st_size
        for name, whole in (("whole_text", True), ("line_by_line", False)):
            runs = [measure(str(path), whole) for _ in range(args.repeat)]
            results[name] = {"cpu_s": [r[0] for r in runs], "peak_bytes": [r[1] for r in runs],
                             "digest": runs[0][2]}
            print(f"{name}: {min(r[0] for r in runs):.2f} CPU-s (least of {args.repeat}), peak "
                  f"{max(r[1] for r in runs) / 2**20:,.0f} MiB")
    same = results["whole_text"]["digest"] == results["line_by_line"]["digest"]
    print(f"{args.requests:,} requests, {size / 2**20:,.0f} MiB; the same columns: {same}; "
          f"load average {os.getloadavg()[0]:.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "bench/bench_request_read.py", **env,
                                        "requests": args.requests, "rate": args.rate,
                                        "file_bytes": size, "same_columns": same,
                                        "results": results}, indent=1) + "\n")
        print(f"wrote {args.out}")
    if not same:
        raise SystemExit("the two readers disagree")


if __name__ == "__main__":
    main()
