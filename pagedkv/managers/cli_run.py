"""``pagedkv simulate``'s two modes: one run with its per-request table, or a sweep of
settings side by side. Both stop cleanly on Ctrl-C with what had finished."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pagedkv.managers.cli_output import CsvSink, JsonStream, print_summary, report_dict, step_time_text
from pagedkv.managers.cli_workload import Workload
from pagedkv.managers.simulation import SimSetup, prepare
from pagedkv.managers.sweep import label, parse_axis, print_table, settings, sweep_row
from pagedkv.managers.trace_run import run_requests
from pagedkv.releases import check_sglang_version
from pagedkv.units import gib

EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention for Ctrl-C


def setup_options(args: argparse.Namespace, override: dict[str, object] | None = None) -> dict[str, Any]:
    """``prepare``'s keyword arguments from the flags, with a sweep setting's values over them."""
    opts: dict[str, Any] = {
        "model": args.model, "gpu": args.gpu, "mem_fraction_static": args.mem_fraction_static,
        "page_size": args.page_size, "policy": args.policy, "max_total_tokens": args.max_total_tokens,
        "tp": args.tp, "weights_bytes": None if args.weights_gib is None else gib(args.weights_gib),
        "arrival_rate": args.rate, "radix_cache": not args.disable_radix_cache,
        "sglang_version": args.sglang_version,
        "schedule_conservativeness": args.schedule_conservativeness,
    }
    opts.update(override or {})
    check_sglang_version(opts["sglang_version"])  # a sweep's value too
    return opts


def say_warnings(setup: SimSetup, prefix: str = "warning") -> None:
    """SGLang's start-up warnings for this pool (a ``--max-total-tokens`` above the profiled
    pool), on stderr: never silent."""
    for warning in setup.plan.warnings:
        print(f"{prefix}: {warning}", file=sys.stderr)


def run_single(args: argparse.Namespace, workload: Workload) -> int:
    """One run: the text summary (or one JSON object with every request's row), and the
    per-request CSV file with ``--csv``. Returns 0, or 130 after Ctrl-C."""
    setup = prepare(**setup_options(args))
    say_warnings(setup)
    csv_sink = CsvSink(args.csv) if args.csv else None
    stream = JsonStream() if args.json else None
    log: list[str] = []
    on_log = None if not args.log else log.append if args.json else print
    try:
        run = run_requests(setup, workload.make_specs(), workload.num_requests,
                           source=workload.source, sinks=[s for s in (csv_sink, stream) if s],
                           on_log=on_log, quiet=args.quiet)
    finally:
        if csv_sink is not None:
            csv_sink.close()
    if stream is not None:
        report = report_dict(run, workload)
        if args.log:
            report["log"] = log
        stream.finish(report)
    else:
        print_summary(run, workload)
        if args.csv:
            print(f"per-request table: {args.csv} ({run.table.count:,} rows)")
    return EXIT_INTERRUPTED if run.interrupted else 0


def run_sweep(args: argparse.Namespace, workload: Workload) -> int:
    """Every setting of the ``--sweep`` axes on the same requests; one table (or JSON),
    and the plot with ``--plot``. Returns 0, or 130 after Ctrl-C (settings not reached
    are left out; the one interrupted is marked partial)."""
    combos = settings([parse_axis(spec) for spec in args.sweep])
    setups = [prepare(**setup_options(args, c)) for c in combos]  # every bad value before any run
    for combo, setup in zip(combos, setups, strict=True):
        say_warnings(setup, f"warning ({label(combo)})")
    rows, runs = [], []
    for i, (combo, setup) in enumerate(zip(combos, setups, strict=True)):
        run = run_requests(setup, workload.make_specs(), workload.num_requests,
                           source=workload.source, quiet=args.quiet,
                           label=f"{i + 1}/{len(combos)} {label(combo)}")
        rows.append(sweep_row(combo, run))
        runs.append(run)
        if run.interrupted:
            break
    interrupted = runs[-1].interrupted
    title = f"{setups[0].meta.model} on {setups[0].meta.gpu}: {workload.description}"
    if args.json:
        print(json.dumps({"workload": {"description": workload.description,
                                       "arrivals": workload.arrivals, "notes": workload.notes},
                          "step_time_model": step_time_text(setups[0]),
                          "times": "modelled, not measured", "interrupted": interrupted,
                          "sweep": [{**row, "meta": run.setup.meta.to_dict(),
                                     "summary": run.table.summary()}
                                    for row, run in zip(rows, runs, strict=True)]}, indent=2))
    else:
        print(title)
        print(f"arrivals: {workload.arrivals}")
        for note in workload.notes:
            print(f"note: {note}")
        print(step_time_text(setups[0]))
        if interrupted:
            print(f"INTERRUPTED (Ctrl-C) in setting {len(runs)} of {len(combos)}")
        print_table(rows, sys.stdout)
    if args.plot:
        from pagedkv.managers.sweep_plot import write_plot

        write_plot(rows, args.plot, title)
        if not args.json:
            print(f"plot: {args.plot}")
    return EXIT_INTERRUPTED if interrupted else 0
