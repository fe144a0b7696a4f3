"""Per-request metrics, taken as each request finishes, and their percentiles.

Definitions follow SGLang's ``bench_serving`` (``python/sglang/benchmark/serving.py``,
``calculate_metrics``, 0.5.23), counted from the moment the client sends the request
(:attr:`~pagedkv.managers.req.Req.arrival_s`: its arrival time, or for a later turn of a
conversation, when the turn before it finished if that is later):

- ``ttft_s``: time to first token, sent to the end of the prefill pass that sampled it.
- ``e2e_s``: end-to-end latency, sent to the end of the step that produced its last token.
- ``tpot_s``: mean inter-token time (time per output token after the first),
  ``(e2e_s - ttft_s) / (output_len - 1)``; empty for a one-token output, which
  ``bench_serving`` leaves out of TPOT too. It is exactly the mean of the request's gaps
  between consecutive tokens (the gaps add up to ``e2e_s - ttft_s``), so no per-token time
  is kept; ``bench_serving``'s ITL percentiles, over every single gap, are not computed.
- ``queue_s``: time in the waiting queue: sent to first admission, plus every wait after a
  retraction.
- ``cached_tokens``: prefix tokens reused from the radix cache over all its prefills;
  ``num_retractions``; ``recomputed_tokens``: KV tokens retraction freed that were
  computed again.

Times are modelled seconds (the step-time model's), not measurements. Memory: one float64
per request per time column (40 MB for a million requests) for the percentiles, and each
row is handed to the sinks (a CSV file, a JSON stream) as its request finishes, never kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pagedkv.managers.req import Req
from pagedkv.managers.trace_summary import FinishedColumns
from pagedkv.workloads.request_rows import RequestFile

COLUMNS = ("rid", "line", "conversation_id", "turn", "prompt_len", "output_len", "cached_tokens",
           "arrival_s", "queue_s", "ttft_s", "tpot_s", "e2e_s", "num_retractions",
           "recomputed_tokens", "finish_reason")
TIMES = ("ttft_s", "tpot_s", "e2e_s", "queue_s")
PERCENTILES = (50, 90, 99)
Row = dict[str, Any]


class RequestTable:
    """The finished requests' metrics: columns for the summary, rows for the sinks.

    Args:
        num_requests: requests in the run (the columns' length).
        source: the requests file they came from (gives ``line``, ``conversation_id``, ``turn``),
            or None for a built-in workload.
        sinks: each is called with every finished request's row (a dict over
            :data:`COLUMNS`), in finish order.
    """

    def __init__(self, num_requests: int, source: RequestFile | None = None,
                 sinks: list[Callable[[Row], None]] | None = None) -> None:
        self.source = source
        self.sinks = list(sinks or [])
        self.times = {name: np.empty(num_requests) for name in TIMES}
        self.count = 0
        self.totals = {"prompt_tokens": 0, "output_tokens": 0, "cached_tokens": 0,
                       "num_retractions": 0, "retracted_requests": 0, "recomputed_tokens": 0}
        self.last_finish_s = 0.0

    def row(self, req: Req) -> Row:
        """A finished request's row (times in modelled seconds)."""
        ttft = req.first_token_s - req.arrival_s
        e2e = req.finish_s - req.arrival_s
        src, rid = self.source, req.rid
        conv = None if src is None or src.conversation[rid] < 0 else \
            src.conversation_names[src.conversation[rid]]
        return {
            "rid": rid,
            "line": None if src is None else int(src.line[rid]),
            "conversation_id": conv,
            "turn": None if conv is None else int(src.turn[rid]),
            "prompt_len": req.prompt_len,
            "output_len": req.generated,
            "cached_tokens": req.cached_tokens,
            "arrival_s": req.arrival_s,
            "queue_s": req.queue_s,
            "ttft_s": ttft,
            "tpot_s": (e2e - ttft) / (req.generated - 1) if req.generated > 1 else None,
            "e2e_s": e2e,
            "num_retractions": req.num_retractions,
            "recomputed_tokens": req.recomputed_tokens,
            "finish_reason": req.finish_reason,
        }

    def add(self, req: Req) -> None:
        """Take a request that has just finished: its times into the columns, its row to
        the sinks."""
        row = self.row(req)
        i = self.count
        for name in TIMES:
            self.times[name][i] = np.nan if row[name] is None else row[name]
        self.count += 1
        t = self.totals
        t["prompt_tokens"] += req.prompt_len
        t["output_tokens"] += req.generated
        t["cached_tokens"] += req.cached_tokens
        t["num_retractions"] += req.num_retractions
        t["retracted_requests"] += req.num_retractions > 0
        t["recomputed_tokens"] += req.recomputed_tokens
        self.last_finish_s = max(self.last_finish_s, req.finish_s)
        for sink in self.sinks:
            sink(row)

    def add_columns(self, done: FinishedColumns) -> None:
        """Take requests that have just finished, as columns in finish order (the compiled
        core's route): the same columns, totals and rows, in the same order, as
        :meth:`add` on each of them, the arithmetic done over numpy arrays. A sink with a
        ``write_rows`` method takes the rows as tuples over :data:`COLUMNS` at once; the
        others are called with each row's dict."""
        n = len(done.rid)
        if not n:
            return
        gen = done.generated
        ttft = done.first_token_s - done.arrival_s
        e2e = done.finish_s - done.arrival_s
        many = gen > 1
        tpot = np.full(n, np.nan)
        tpot[many] = (e2e[many] - ttft[many]) / (gen[many] - 1)
        i = self.count
        for name, col in (("ttft_s", ttft), ("tpot_s", tpot), ("e2e_s", e2e), ("queue_s", done.queue_s)):
            self.times[name][i:i + n] = col
        self.count += n
        t = self.totals
        t["prompt_tokens"] += int(done.prompt_len.sum())
        t["output_tokens"] += int(gen.sum())
        t["cached_tokens"] += int(done.cached_tokens.sum())
        t["num_retractions"] += int(done.num_retractions.sum())
        t["retracted_requests"] += int((done.num_retractions > 0).sum())
        t["recomputed_tokens"] += int(done.recomputed_tokens.sum())
        self.last_finish_s = max(self.last_finish_s, float(done.finish_s.max()))
        if self.sinks:
            self._write_rows(done, ttft, tpot, e2e)

    def _write_rows(self, done: FinishedColumns, ttft: np.ndarray, tpot: np.ndarray,
                    e2e: np.ndarray) -> None:
        """The rows of :meth:`add_columns` to the sinks (values as :meth:`row` gives them)."""
        src, rid = self.source, done.rid
        n = len(rid)
        if src is None:
            line: list[Any] = [None] * n
            conv: list[Any] = line
            turn: list[Any] = line
        else:
            line = src.line[rid].tolist()
            names = src.conversation_names
            conv = [None if c < 0 else names[c] for c in src.conversation[rid].tolist()]
            turn = [None if c is None else k for c, k in zip(conv, src.turn[rid].tolist(), strict=True)]
        rows = list(zip(
            rid.tolist(), line, conv, turn, done.prompt_len.tolist(), done.generated.tolist(),
            done.cached_tokens.tolist(), done.arrival_s.tolist(), done.queue_s.tolist(),
            ttft.tolist(), [None if x != x else x for x in tpot.tolist()], e2e.tolist(),
            done.num_retractions.tolist(), done.recomputed_tokens.tolist(), done.finish_reason,
            strict=True))
        for sink in self.sinks:
            write_rows = getattr(sink, "write_rows", None)
            if write_rows is not None:
                write_rows(rows)
            else:
                for values in rows:
                    sink(dict(zip(COLUMNS, values, strict=True)))

    def summary(self) -> dict[str, Any]:
        """Counts, throughputs and, per time column, mean and p50/p90/p99 (seconds).

        Throughputs are per modelled second from t=0 to the last finish, as
        ``bench_serving`` divides by the benchmark's duration: ``request_throughput``
        (requests/s), ``input_throughput``, ``output_throughput``, ``total_throughput``
        (tokens/s). Percentiles are numpy's linear interpolation (``bench_serving``'s).
        """
        t, dur, n = self.totals, self.last_finish_s, self.count
        out: dict[str, Any] = {"completed": n, **t, "duration_s": dur,
                               "prefix_hit_rate": t["cached_tokens"] / t["prompt_tokens"]
                               if t["prompt_tokens"] else 0.0}
        per_s = (lambda x: x / dur) if dur > 0 else (lambda x: 0.0)
        out.update(request_throughput=per_s(n), input_throughput=per_s(t["prompt_tokens"]),
                   output_throughput=per_s(t["output_tokens"]),
                   total_throughput=per_s(t["prompt_tokens"] + t["output_tokens"]))
        for name in TIMES:
            col = self.times[name][:n]
            col = col[~np.isnan(col)]
            stem = name[:-2]
            out[f"mean_{stem}_s"] = float(col.mean()) if len(col) else None
            for q in PERCENTILES:
                out[f"p{q}_{stem}_s"] = float(np.percentile(col, q)) if len(col) else None
        return out
