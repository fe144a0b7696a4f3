"""``pagedkv simulate``'s two modes: one run with its per-request table, or a sweep of
settings side by side. Both stop cleanly on Ctrl-C with what had finished."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pagedkv.entrypoints.cli_simulate_output import (
    CsvSink,
    JsonStream,
    print_summary,
    report_dict,
    step_time_text,
)
from pagedkv.entrypoints.cli_simulate_workload import Workload
from pagedkv.entrypoints.engine import Engine
from pagedkv.entrypoints.long_run import run_requests
from pagedkv.entrypoints.simulation import simulated_engine
from pagedkv.entrypoints.sweep import label, parse_axis, print_table, settings
from pagedkv.entrypoints.sweep_run import default_workers, run_processes, run_ray, run_serial
from pagedkv.errors import ConfigError
from pagedkv.releases import check_sglang_version
from pagedkv.sizing_checks import WHOLE_CARD_PREFIX
from pagedkv.units import gib

EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention for Ctrl-C


def engine_options(args: argparse.Namespace, override: dict[str, object] | None = None) -> dict[str, Any]:
    """``simulated_engine``'s keyword arguments from the flags, with a sweep setting's values over them."""
    opts: dict[str, Any] = {
        "model": args.model, "gpu": args.gpu, "mem_fraction_static": args.mem_fraction_static,
        "page_size": args.page_size, "policy": args.policy, "max_total_tokens": args.max_total_tokens,
        "tp": args.tp, "weights_bytes": None if args.weights_gib is None else gib(args.weights_gib),
        "arrival_rate": args.rate, "radix_cache": not args.disable_radix_cache,
        "sglang_version": args.sglang_version,
        "schedule_conservativeness": args.schedule_conservativeness,
        "disable_hybrid_swa_memory": args.disable_hybrid_swa_memory,
        "disable_overlap_schedule": args.disable_overlap_schedule, "core": args.core,
        "kv_cache_dtype": args.kv_cache_dtype, "context_len": args.context_len,
    }
    if args.max_running_requests is not None:  # else the pool's (SGLang's default)
        opts["max_running_requests"] = args.max_running_requests
    if args.chunked_prefill_size is not None:  # else SGLang's for the GPU's memory
        opts["chunked_prefill_size"] = args.chunked_prefill_size
    opts.update(override or {})
    if opts.get("chunked_prefill_size") == -1:  # SGLang's -1: no chunking
        opts["chunked_prefill_size"] = None
    check_sglang_version(opts["sglang_version"])  # a sweep's value too
    return opts


def say_warnings(engine: Engine, prefix: str = "warning", asked_running: int | None = None) -> None:
    """SGLang's start-up warnings for this pool (a ``--max-total-tokens`` above the profiled
    pool), what a capacity planner must read beside it (:attr:`KVPoolPlan.notes`: the whole
    card taken as free, a pool that holds no full-context request, a longer context allowed),
    and a ``--max-running-requests`` SGLang lowered (``asked_running``): on stderr, never silent."""
    plan = engine.plan
    # the whole-card estimate is every --gpu run's: the summary's setting line says it instead
    notes = [n for n in plan.notes if not n.startswith(WHOLE_CARD_PREFIX)]
    for warning in (*plan.warnings, *notes):
        print(f"{prefix}: {warning}", file=sys.stderr)
    if asked_running is not None and plan.max_running_requests < asked_running:
        print(f"{prefix}: max_running_requests={asked_running} lowered to "
              f"{plan.max_running_requests:,}, as SGLang sizes it from the pool "
              f"({plan.max_total_num_tokens:,} tokens)", file=sys.stderr)


def run_single(args: argparse.Namespace, workload: Workload) -> int:
    """One run: the text summary (or one JSON object with every request's row), and the
    per-request CSV file with ``--csv``. Returns 0, or 130 after Ctrl-C."""
    engine = simulated_engine(**engine_options(args))
    say_warnings(engine, asked_running=args.max_running_requests)
    csv_sink = CsvSink(args.csv) if args.csv else None
    stream = JsonStream() if args.json else None
    log: list[str] = []
    on_log = None if not args.log else log.append if args.json else print
    try:
        run = run_requests(engine, workload.make_specs(), workload.num_requests,
                           source=workload.source, sinks=[s for s in (csv_sink, stream) if s],
                           on_log=on_log, quiet=args.quiet)
    except ConfigError:  # a request refused before any ran: no table, not an empty one
        if csv_sink is not None:
            csv_sink.discard()
        raise
    finally:
        if csv_sink is not None:
            csv_sink.close()
    if run.core_note:
        print(run.core_note, file=sys.stderr)
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
    and the plot with ``--plot``. The settings run one after another here, in
    ``--workers`` processes (default: one per core) or as Ray tasks (``--ray``); the
    report is the same bytes whichever way they ran. Returns 0, or 130 after Ctrl-C
    (settings not finished are left out; serially, the one interrupted is marked partial)."""
    combos = settings([parse_axis(spec) for spec in args.sweep])
    engines = [simulated_engine(**engine_options(args, c)) for c in combos]  # every bad value before any run
    for combo, engine in zip(combos, engines, strict=True):
        say_warnings(engine, f"warning ({label(combo)})")
    workers = min(args.workers or default_workers(), len(combos))
    if args.ray is not None:
        outcome = run_ray(engines, combos, workload, args.ray or None, args.quiet)
    elif workers > 1:
        outcome = run_processes(engines, combos, workload, workers, args.quiet)
    else:
        outcome = run_serial(engines, combos, workload, args.quiet)
    rows = [r.row for r in outcome.results]
    interrupted = outcome.interrupted is not None
    title = f"{engines[0].meta.model} on {engines[0].meta.gpu}: {workload.description}"
    if args.json:
        print(json.dumps({"workload": {"description": workload.description,
                                       "arrivals": workload.arrivals, "notes": workload.notes},
                          "step_time_model": step_time_text(engines[0]),
                          "times": "modelled, not measured", "interrupted": interrupted,
                          "sweep": [{**r.row, "meta": r.meta, "summary": r.summary}
                                    for r in outcome.results]}, indent=2))
    else:
        print(title)
        print(f"arrivals: {workload.arrivals}")
        for note in workload.notes:
            print(f"note: {note}")
        print(step_time_text(engines[0]))
        if interrupted:
            print(f"INTERRUPTED (Ctrl-C) {outcome.interrupted}")
        print_table(rows, sys.stdout)
        for row in rows:
            if row["cut_outputs"]:
                print(f"note ({row['setting']}): {row['cut_outputs']:,} requests' outputs cut "
                      "short at arrival to fit the pool or the context (finish_reason length)")
    if args.plot:
        from pagedkv.entrypoints.sweep_plot import write_plot

        write_plot(rows, args.plot, title)
        if not args.json:
            print(f"plot: {args.plot}")
    return EXIT_INTERRUPTED if interrupted else 0
