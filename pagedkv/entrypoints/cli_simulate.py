"""``pagedkv simulate``: run the scheduler simulator from the command line.

``pagedkv.entrypoints.cli`` registers it with :func:`add_simulate_parser`; :func:`run_simulate` does the
work: a built-in workload or a requests file (:mod:`pagedkv.entrypoints.cli_simulate_workload`), one run
or a sweep of settings (:mod:`pagedkv.entrypoints.sweep`), reported as text, one JSON object
or a per-request CSV file (:mod:`pagedkv.entrypoints.cli_simulate_output`). Bad input raises
:class:`~pagedkv.errors.ConfigError` naming the parameter, its value and the valid range
(the top-level CLI prints it and exits with status 2). The heavy modules (the scheduler
imports torch) are imported inside :func:`run_simulate`, so that ``pagedkv size`` starts
fast.
"""

from __future__ import annotations

import argparse
import os

from pagedkv.configs.model_presets import MODEL_PRESETS
from pagedkv.entrypoints.sweep_plot import check_plot_path
from pagedkv.errors import bad_value, check_fraction, check_positive_int, check_real
from pagedkv.gpus import GPU_PRESETS
from pagedkv.managers.compiled_core import AUTO_MIN_REQUESTS, CORES
from pagedkv.managers.config import Policy
from pagedkv.releases import DEFAULT_SGLANG_VERSION, RELEASES
from pagedkv.server_args import check_chunked_prefill_size
from pagedkv.units import KV_DTYPE_BYTES

# the keys of cli_workload.WORKLOADS, named here so that --help needs no workload module
WORKLOAD_NAMES = ("sharegpt", "uniform", "fixed", "long", "system-prompt", "few-shot", "chat")
# a run holds about 1 GiB per million requests (README): beyond this, memory runs out first
MAX_NUM_REQUESTS = 100_000_000
# the flag each --sweep axis sets (radix_cache: --disable-radix-cache): a flag given beside
# its own axis would be silently overridden, so it is refused
SWEPT_FLAGS = {"mem_fraction_static": "mem_fraction_static", "page_size": "page_size",
               "radix_cache": "disable_radix_cache", "policy": "policy",
               "sglang_version": "sglang_version", "max_total_tokens": "max_total_tokens",
               "schedule_conservativeness": "schedule_conservativeness",
               "chunked_prefill_size": "chunked_prefill_size",
               "disable_overlap_schedule": "disable_overlap_schedule"}


def add_simulate_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``pagedkv simulate`` on the top-level CLI's subparsers."""
    p = subparsers.add_parser(
        "simulate",
        help="simulate SGLang's scheduler on a workload or your own requests file",
        description="Size the pool SGLang would build for MODEL on GPU, then simulate its "
        "scheduler over a built-in workload or a requests file and print per-request latency "
        "percentiles, throughput, retractions and prefix reuse. Times are a roofline model "
        "of the GPU (weights and KV read at peak bandwidth, prefill at peak FLOP/s), not "
        "measurements.",
    )
    p.add_argument("--model", default="llama-3-8b",
                   help=f"a preset ({', '.join(MODEL_PRESETS)}) or a config.json path "
                   "(default llama-3-8b)")
    p.add_argument("--gpu", default="h100-sxm-80gb",
                   help=f"GPU preset ({', '.join(GPU_PRESETS)}; default h100-sxm-80gb)")
    p.add_argument("--mem-fraction-static", type=float, metavar="F",
                   help="fraction in (0, 1] kept for weights + KV pool; default: SGLang's")
    p.add_argument("--page-size", type=int, default=1, help="tokens per KV page (default 1)")
    p.add_argument("--max-total-tokens", type=int, metavar="TOKENS",
                   help="cap on the pool in tokens (SGLang's --max-total-tokens)")
    p.add_argument("--max-running-requests", type=int, metavar="N",
                   help="cap on the running batch, SGLang's --max-running-requests (>= 1; "
                   "default: the pool's; SGLang 0.5.23 caps it at half the pool)")
    p.add_argument("--tp", type=int, default=1,
                   help="attention tensor-parallel size (default 1): the pool and the step times "
                   "are one GPU's share, with no communication between GPUs modelled")
    p.add_argument("--kv-cache-dtype", default="bf16", choices=sorted(KV_DTYPE_BYTES),
                   help="KV element type (default bf16; fp8 types take 1 byte): the pool holds "
                   "more tokens and a decode step reads fewer bytes")
    p.add_argument("--context-len", type=int, metavar="TOKENS",
                   help="SGLang's --context-length: the model's context, at most its own "
                   "(default: the model's)")
    p.add_argument("--chunked-prefill-size", type=int, metavar="TOKENS",
                   help="SGLang's --chunked-prefill-size: most prompt tokens one prefill takes; "
                   "-1 turns chunking off (default: SGLang's for the GPU's memory)")
    p.add_argument("--weights-gib", type=float, metavar="GIB",
                   help="weights per GPU in GiB, overriding the estimate (quantized models)")
    p.add_argument("--policy", default=Policy.SGLANG.value,
                   help=f"admission policy: {', '.join(x.value for x in Policy)} (default sglang)")
    p.add_argument("--disable-radix-cache", action="store_true",
                   help="turn SGLang's prefix cache off (it is on by default)")
    p.add_argument("--disable-overlap-schedule", action="store_true",
                   help="SGLang's flag: disable the overlap scheduler, which overlaps the CPU scheduler "
                   "with the GPU model worker; the normal loop runs instead, each pass's result "
                   "processed before the next is scheduled (default: the overlap loop)")
    p.add_argument("--disable-hybrid-swa-memory", action="store_true",
                   help="SGLang's flag: a sliding-window hybrid (gpt-oss, Llama 4) gets one full-length "
                   "pool for every layer instead of a full and a sliding-window pool (default: "
                   "both pools, as SGLang 0.5.23 runs them)")
    p.add_argument("--sglang-version", default=DEFAULT_SGLANG_VERSION, choices=tuple(RELEASES),
                   help="the SGLang release whose scheduler is followed "
                   f"(default {DEFAULT_SGLANG_VERSION})")
    p.add_argument("--schedule-conservativeness", type=float, default=1.0, metavar="C",
                   help="scales the initial new_token_ratio, 0.7 x C capped at 1 (default 1.0)")
    g = p.add_argument_group("requests")
    g.add_argument("--requests-file", metavar="FILE",
                   help="your requests: JSON Lines, CSV or ShareGPT JSON (see README)")
    # the flag's name until "trace" came to mean only the run's record: a clear pointer, not an alias
    g.add_argument("--trace", metavar="FILE", help=argparse.SUPPRESS)
    g.add_argument("--requests-format", choices=("jsonl", "csv", "sharegpt"),
                   help="the requests file's format (default: from the file name and first character)")
    g.add_argument("--tokenizer", metavar="DIR",
                   help="ShareGPT: a local Hugging Face tokenizer folder to count tokens "
                   "(default: the --model folder if it has one, else an estimate)")
    g.add_argument("--chars-per-token", type=float, default=4.0, metavar="C",
                   help="ShareGPT without a tokenizer: characters per token (default 4)")
    g.add_argument("--sharegpt-turns", choices=("all", "first"), default="all",
                   help="ShareGPT: every turn of a conversation, or only the first as SGLang's "
                   "bench_serving (default all)")
    g.add_argument("--workload",
                   help=f"without --requests-file: {', '.join(WORKLOAD_NAMES)} (default sharegpt)")
    g.add_argument("--num-requests", type=int, metavar="N",
                   help="requests of a built-in workload (default 1000); with --requests-file, the "
                   "first N (default all)")
    g.add_argument("--rate", type=float, metavar="REQ_PER_S",
                   help="Poisson arrivals in requests/s (default: a requests file's own arrival_s, "
                   "else all at t=0)")
    g.add_argument("--all-at-once", action="store_true",
                   help="with --requests-file: every request arrives at t=0, whatever the file says")
    g.add_argument("--seed", type=int, default=0, help="seed of workloads and arrivals (>= 0, default 0)")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true",
                   help="print one JSON object (with the per-request rows unless --sweep)")
    o.add_argument("--csv", metavar="FILE",
                   help="write the per-request table to FILE (a new file or one to overwrite, "
                   "never the requests file)")
    o.add_argument("--sweep", action="append", metavar="NAME=V1,V2", default=[],
                   help="run every value of a setting on the same requests and print one table; "
                   "NAME: mem_fraction_static, page_size, radix_cache (on/off), policy, "
                   "sglang_version, max_total_tokens, schedule_conservativeness, "
                   "chunked_prefill_size, disable_overlap_schedule (on/off); repeat for every "
                   "combination")
    o.add_argument("--workers", type=int, metavar="N",
                   help="with --sweep: run N settings at once, each in its own process (default: "
                   "one per CPU core; 1: one after another in this process); the same report")
    o.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help="with --sweep: run each setting as a task on a Ray cluster at ADDRESS "
                   "(auto, HOST:PORT or ray://HOST:10001); without ADDRESS, RAY_ADDRESS's "
                   "cluster or a Ray instance started on this machine for the sweep; needs "
                   "pip install 'pagedkv[ray]'; the same report")
    o.add_argument("--plot", metavar="FILE.html",
                   help="with --sweep: the table as bar charts in a self-contained HTML file")
    o.add_argument("--log", action="store_true",
                   help="print SGLang-format log lines (prefill, decode, retraction) as they happen")
    o.add_argument("--quiet", action="store_true", help="no progress bar")
    o.add_argument("--core", choices=CORES, default="auto",
                   help="the scheduler loop: 'compiled' (numba, exact to the Python scheduler; "
                   "a dense model's pool and SGLang's policy, else a note and the Python "
                   "loop), 'reference' (the Python scheduler the book shows) or 'auto' (default: "
                   f"compiled where it applies for runs of {AUTO_MIN_REQUESTS:,} requests or more); "
                   "with --sweep, it runs every setting")
    p.set_defaults(func=run_simulate,
                   flag_defaults={dest: p.get_default(dest) for dest in SWEPT_FLAGS.values()})


def check_args(args: argparse.Namespace) -> None:
    """Every number in range (NaN and infinities refused) and the flags consistent.

    Raises:
        ConfigError: naming the flag, its value and the valid range.
    """
    if args.trace is not None:
        raise bad_value("--trace", args.trace, "renamed: pass the file as --requests-file FILE")
    if args.num_requests is not None:
        check_positive_int("--num-requests", args.num_requests)
        if args.num_requests > MAX_NUM_REQUESTS:
            raise bad_value("--num-requests", args.num_requests,
                            f"at most {MAX_NUM_REQUESTS:,} (a run holds about 1 GiB per million "
                            "requests; split a longer trace)")
    if args.context_len is not None:
        check_positive_int("--context-len", args.context_len)
    if args.chunked_prefill_size is not None:
        check_chunked_prefill_size(args.chunked_prefill_size, "--chunked-prefill-size")
    if args.requests_file is not None and args.workload is not None:
        raise bad_value("--workload", args.workload,
                        "omitted with --requests-file (the file is the workload)")
    check_positive_int("--seed", args.seed, minimum=0)
    if args.rate is not None:
        check_real("--rate", args.rate, 0.0, open_low=True, unit=" requests/s (omit for all at t=0)")
    check_real("--schedule-conservativeness", args.schedule_conservativeness, 0.0, open_low=True)
    check_real("--chars-per-token", args.chars_per_token, 0.0, open_low=True)
    if args.max_running_requests is not None:
        check_positive_int("--max-running-requests", args.max_running_requests)
    if args.weights_gib is not None:
        check_real("--weights-gib", args.weights_gib, 0.0, unit=" GiB")
    if args.mem_fraction_static is not None:
        check_fraction("mem_fraction_static", args.mem_fraction_static)
    if args.all_at_once and args.rate is not None:
        raise bad_value("--rate", args.rate, "omitted with --all-at-once (every request at t=0)")
    if args.sweep and args.csv:
        raise bad_value("--csv", args.csv, "only without --sweep (the per-request table is one run's)")
    if args.csv is not None:
        _check_output("--csv", args.csv, args.requests_file)
    if args.plot and not args.sweep:
        raise bad_value("--plot", args.plot, "only with --sweep")
    if args.plot:
        check_plot_path(args.plot)
        _check_output("--plot", args.plot, args.requests_file)
    for spec in args.sweep:  # a flag beside its own axis: which one would hold?
        dest = SWEPT_FLAGS.get(spec.partition("=")[0].strip().replace("-", "_"))
        if dest is not None and getattr(args, dest) != args.flag_defaults[dest]:
            raise bad_value(f"--{dest.replace('_', '-')}", getattr(args, dest),
                            f"omitted with --sweep {spec} (the sweep sets it)")
    if args.workers is not None:
        check_positive_int("--workers", args.workers)
        if not args.sweep:
            raise bad_value("--workers", args.workers, "only with --sweep (a run is one process)")
        if args.ray is not None:
            raise bad_value("--workers", args.workers, "only without --ray (Ray places the settings)")
    if args.ray is not None and not args.sweep:
        raise bad_value("--ray", args.ray, "only with --sweep (Ray runs a sweep's settings)")


def _check_output(flag: str, path: str, requests_file: str | None) -> None:
    """Refuse an output path that cannot be written, before the run rather than after it,
    and one that would overwrite the requests file.

    Raises:
        ConfigError: ``-`` (standard output), the requests file itself, a folder, or a
            file or folder that cannot be written.
    """
    if path == "-":
        raise bad_value(flag, path, "a file path (standard output carries the summary; "
                        "--json prints the rows there)")
    if requests_file is not None and os.path.exists(path) and os.path.exists(requests_file) \
            and os.path.samefile(path, requests_file):
        raise bad_value(flag, path, "a path other than --requests-file's (it would overwrite "
                        "your requests)")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise bad_value(flag, path, "a file path, not a folder")
    if not os.path.isdir(folder):
        raise bad_value(flag, path, f"a path in an existing folder ({folder} does not exist)")
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        raise bad_value(flag, path, "a file that can be written (permission denied)")


def run_simulate(args: argparse.Namespace) -> int:
    """``pagedkv simulate``: build the requests, run (or sweep), report; return the exit
    status (0, or 130 after Ctrl-C with the partial report printed).

    Raises:
        ConfigError: an unknown workload, policy, model or GPU; a number out of range; a bad
            requests file (see :func:`pagedkv.workloads.request_files.load_requests`).
        NotEnoughMemoryError: the weights leave no room for a pool.
    """
    check_args(args)
    from pagedkv.entrypoints.cli_simulate_workload import build_workload

    workload = build_workload(args)
    from pagedkv.entrypoints.cli_simulate_run import run_single, run_sweep

    return run_sweep(args, workload) if args.sweep else run_single(args, workload)

