"""How ``pagedkv simulate`` reports a run: a text summary, a streamed JSON object, a CSV file.

Every report names the step-time model and says that its times are modelled, not
measured. The per-request rows are written as requests finish (:class:`CsvSink`,
:class:`JsonStream`), so a million-request run never holds its table in memory.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any, TextIO

from pagedkv.entrypoints.cli_simulate_workload import Workload
from pagedkv.entrypoints.engine import Engine
from pagedkv.entrypoints.long_run import RunOutcome
from pagedkv.errors import bad_value
from pagedkv.hybrid_pools import mamba_tracking_slots
from pagedkv.managers.trace import TraceMeta
from pagedkv.metrics.request_metrics import COLUMNS, PERCENTILES, TIMES, Row
from pagedkv.pool_plan import KVPoolPlan
from pagedkv.releases import as_release
from pagedkv.sizing_checks import WHOLE_CARD_PREFIX
from pagedkv.units import MiB

TIME_LABELS = {"ttft_s": "TTFT", "tpot_s": "TPOT (mean inter-token)", "e2e_s": "end-to-end",
               "queue_s": "queueing"}


def step_time_text(engine: Engine) -> str:
    """One sentence naming the step-time model and its peaks (and, for a mixture of experts,
    a sliding-window or a linear-attention hybrid, what it reads instead)."""
    st = engine.executor.step_time
    reads, params = "the weights and the batch's KV", "parameter"
    if getattr(st, "experts", None) is not None:
        reads = ("the dense weights, the experts the batch's tokens are routed to (uniform "
                 "routing assumed) and the batch's KV")
        params = "active parameter"
    if st.sliding_window is not None:
        reads += f" (window layers: at most {st.sliding_window:,} tokens per request)"
    if getattr(st, "state_bytes", 0):
        reads += ", and each request's state slot (read and written),"
    tp = engine.plan.tp if engine.plan is not None else 1
    shared = (f"; each of the {tp} GPUs takes its share, with no communication between them "
              "modelled" if tp > 1 else "")
    return (f"times are modelled, not measured: roofline step-time model (RooflineStepTime): "
            f"a decode step reads {reads} at {st.hbm_bandwidth / 1e12:.2f} "
            f"TB/s, a prefill does 2 FLOPs per {params} per token at {st.peak_flops / 1e12:,.0f} "
            f"TFLOP/s, the {engine.meta.gpu}'s datasheet peaks{shared}; real steps are slower")


def setting_text(meta: TraceMeta, plan: KVPoolPlan | None = None) -> str:
    """The pool and the scheduler a run used, in one line (a sliding-window hybrid's
    ``plan``: both pools)."""
    cache = "on" if meta.radix_cache else "off"
    pool = f"pool {meta.max_total_num_tokens:,} tokens"
    if plan is not None and plan.is_swa:
        pool = (f"full pool {meta.max_total_num_tokens:,} tokens and SWA pool "
                f"{plan.swa_max_total_num_tokens:,} (window {plan.sliding_window:,})")
    shape = f"page_size {meta.page_size}, mem_fraction_static {meta.mem_fraction_static}"
    if plan is not None and plan.kv_cache_dtype != "bf16":
        shape += f", {plan.kv_cache_dtype} KV"
    if plan is not None and plan.tp > 1:
        shape += f", one GPU of tp {plan.tp}"
    return (f"{meta.model} on {meta.gpu}: {pool} ({shape}), SGLang "
            f"{meta.sglang_version} scheduler ({meta.loop}), radix cache {cache}, policy "
            f"{meta.policy}")


def print_summary(run: RunOutcome, workload: Workload, out: TextIO | None = None) -> None:
    """The text report of one run (on standard output by default)."""
    out = out or sys.stdout
    s, m = run.table.summary(), run.metrics
    print(setting_text(run.engine.meta, run.engine.plan), file=out)
    if any(n.startswith(WHOLE_CARD_PREFIX) for n in run.engine.plan.notes):
        print("note: the pool takes the whole card as free before loading; a real server's "
              "comes out about 1-2 % smaller (pagedkv size with its 'avail mem' readings gives "
              "the exact one)", file=out)
    if run.engine.mamba_pool is not None:
        slots = run.engine.mamba_pool
        meta = run.engine.meta
        track = mamba_tracking_slots(
            disable_radix_cache=not meta.radix_cache, page_size=meta.page_size,
            disable_overlap_schedule=meta.disable_overlap_schedule,
            auto_extra_buffer=as_release(meta.sglang_version).mamba_auto_extra_buffer)
        held = ("one" if not track else f"{1 + track} (its state and {track} track "
                f"slot{'s' if track > 1 else ''})")
        kept = "; the radix cache keeps recorded states in others" if meta.radix_cache else ""
        print(f"state slots: {slots.size:,} of {slots.bytes_per_slot / MiB:,.2f} MiB each, "
              f"{held} held by each running request from admission to finish or "
              f"retraction{kept}", file=out)
    print(f"workload: {workload.description}; arrivals: {workload.arrivals}", file=out)
    for note in [*workload.notes, *cut_notes(run)]:
        print(f"note: {note}", file=out)
    print(step_time_text(run.engine), file=out)
    if run.interrupted:
        print(f"INTERRUPTED (Ctrl-C): partial summary over the {s['completed']:,} of "
              f"{run.num_requests:,} requests that had finished", file=out)
    print(f"{'':26}{'mean':>13}" + "".join(f"{'p' + str(q):>13}" for q in PERCENTILES)
          + "   (ms)", file=out)
    for name in TIMES:
        stem = name[:-2]
        cells = [s[f"mean_{stem}_s"]] + [s[f"p{q}_{stem}_s"] for q in PERCENTILES]
        print(f"{TIME_LABELS[name]:26}" + "".join(_ms(v) for v in cells), file=out)
    print(f"completed: {s['completed']:,} of {run.num_requests:,} requests in "
          f"{s['duration_s']:,.2f} modelled s ({m.num_steps:,} steps: {m.num_prefill_steps:,} "
          f"prefill, {m.num_decode_steps:,} decode, {m.num_idle_steps:,} idle); "
          f"{run.wall_s:,.1f} s of wall time to simulate", file=out)
    print(f"throughput: {s['request_throughput']:,.2f} requests/s, {s['input_throughput']:,.0f} "
          f"input, {s['output_throughput']:,.0f} output, {s['total_throughput']:,.0f} total "
          f"tokens/s", file=out)
    print(f"retractions: {s['num_retractions']:,} ({s['retracted_requests']:,} requests "
          f"retracted), {s['recomputed_tokens']:,} tokens recomputed", file=out)
    print(f"prefix reuse: {s['cached_tokens']:,} of {s['prompt_tokens']:,} prompt tokens from "
          f"the radix cache ({100 * s['prefix_hit_rate']:.1f} %)", file=out)
    plan = run.engine.plan
    print(f"{'full KV pool' if plan.is_swa else 'KV pool'}: peak {100 * m.peak_usage:.1f} % of "
          f"pages in use, mean {100 * m.mean_usage:.1f} % over busy steps; peak "
          f"{m.peak_tokens_used:,} tokens held by running requests", file=out)
    if run.swa_peak_in_use is not None and plan.swa_max_total_num_tokens:
        print(f"SWA pool: peak {100 * run.swa_peak_in_use / plan.swa_max_total_num_tokens:.1f} % "
              f"in use ({run.swa_peak_in_use:,} of {plan.swa_max_total_num_tokens:,} tokens, "
              f"window {plan.sliding_window:,})", file=out)


SHOWN_CUTS = 3  # cut requests named one by one in the text report; JSON lists more


def cut_notes(run: RunOutcome, shown: int = SHOWN_CUTS) -> list[str]:
    """What the text report says of requests whose output the arrival clamp cut short:
    how many, and the first ``shown`` with the bound that cut them (none: no line)."""
    if not run.cut:
        return []
    n = len(run.cut)
    lines = [f"{n:,} request{'s' if n > 1 else ''} asked for more output than the pool or the "
             "context lets one request hold: cut short at arrival (finish_reason length), and "
             "the latencies and throughputs count the tokens granted"]
    lines += [c.message(run.where(c.rid)) for c in run.cut[:shown]]
    if n > shown:
        lines.append(f"... and {n - shown:,} more (--json lists the first {MAX_JSON_CUTS} with "
                     "the output each asked for; in --csv each ends with finish_reason length)")
    return lines


MAX_JSON_CUTS = 100


def _ms(seconds: float | None) -> str:
    return f"{'-':>13}" if seconds is None else f"{1000 * seconds:>13,.2f}"


def report_dict(run: RunOutcome, workload: Workload) -> dict[str, Any]:
    """The JSON report of a run but its per-request rows."""
    cut = {"count": len(run.cut),
           "first": [{**c.to_dict(), "line": run.line(c.rid)} for c in run.cut[:MAX_JSON_CUTS]]}
    plan, config = run.engine.plan, run.engine.config
    setting = {"core": run.core, "kv_cache_dtype": plan.kv_cache_dtype, "tp": plan.tp,
               "context_len": plan.context_len, "chunked_prefill_size": config.chunked_prefill_size,
               "max_running_requests": config.max_running_requests}
    return {"meta": {**run.engine.meta.to_dict(), **setting}, "plan_notes": list(plan.notes),
            "workload": {"description": workload.description, "arrivals": workload.arrivals,
                         "notes": workload.notes},
            "step_time_model": step_time_text(run.engine), "times": "modelled, not measured",
            "interrupted": run.interrupted, "cut_outputs": cut, "summary": run.table.summary(),
            "metrics": run.metrics.as_dict(), "wall_s": run.wall_s,
            **({} if run.swa_peak_in_use is None else {"swa_peak_in_use": run.swa_peak_in_use})}


def _json_value(value: object) -> object:
    """NaN or infinity would make invalid JSON: they become null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


class JsonStream:
    """One JSON object on ``out``, its ``requests`` list written row by row as requests
    finish (keys: the report's, plus ``requests``; ``log`` with ``--log``)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout  # read now, not at import: tests swap sys.stdout
        self.rows = 0

    def __call__(self, row: Row) -> None:
        head = '{"requests": [\n' if not self.rows else ",\n"
        self.out.write(head + json.dumps({k: _json_value(v) for k, v in row.items()}))
        self.rows += 1

    def finish(self, report: dict[str, Any]) -> None:
        """Close the list and write the rest of the report."""
        body = json.dumps(report, indent=2)
        self.out.write(("],\n" if self.rows else '{"requests": [],\n') + body[1:].lstrip("\n") + "\n")


class CsvSink:
    """The per-request table as a CSV file (header: :data:`COLUMNS`), one row per finished
    request, times in modelled seconds."""

    def __init__(self, path: str) -> None:
        try:
            self.file = open(path, "w", newline="", encoding="utf-8")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise bad_value("--csv", path, f"a file that can be written ({exc.strerror})") from None
        self.writer = csv.writer(self.file)
        self.writer.writerow(COLUMNS)

    def __call__(self, row: Row) -> None:
        # what csv.DictWriter writes (None as an empty field), without its per-row check
        # for keys outside the header (a row has exactly COLUMNS)
        self.writer.writerow([row[name] for name in COLUMNS])

    def write_rows(self, rows: list[tuple[Any, ...]]) -> None:
        """Rows as tuples over :data:`COLUMNS`, at once (what calling it on each writes)."""
        self.writer.writerows(rows)

    def close(self) -> None:
        self.file.close()

    def discard(self) -> None:
        """Close and remove the file: the run it was for never ran."""
        self.file.close()
        Path(self.file.name).unlink(missing_ok=True)
