"""SchedulerMetricsReporter alone: SGLang's prefill and decode lines, field for field, in
each release's order, and nothing built for a trace that keeps no log."""

from __future__ import annotations

from types import SimpleNamespace

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.scheduler_components import SchedulerMetricsReporter, WaitingQueue
from pagedkv.managers.trace import Trace, TraceMeta
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.workloads.synthetic import RequestSpec


def reporter(version: str, trace: Trace | SummaryTrace | None = None,
             in_use: int = 250) -> SchedulerMetricsReporter:
    reqs = [Req.from_spec(i, RequestSpec(10 + i, 2, 4, 0.0)) for i in range(3)]
    waiting = WaitingQueue.from_reqs(reqs)
    waiting.recv_requests(0.0)  # 10 + 11 + 12 tokens waiting
    return SchedulerMetricsReporter(
        config=SchedulerConfig(sglang_version=version), max_total_num_tokens=1000,
        trace=Trace(TraceMeta(1000)) if trace is None else trace, waiting=waiting,
        get_tokens_in_use=lambda: in_use)


ADDER = SimpleNamespace(can_run_list=[0, 1], log_input_tokens=40, log_hit_tokens=8)


def test_prefill_line_0523_has_pending_tokens() -> None:
    r = reporter("0.5.23")
    r.report_prefill_stats(3, ADDER, running_bs=5, extend_tokens=40, seconds=0.5,
                           chunked_pending=7)
    assert r.trace.log == [
        "Prefill batch, #new-seq: 2, #new-token: 40, #cached-token: 8, token usage: 0.25, "
        "#running-req: 5, #queue-req: 3, #pending-token: 40, cuda graph: False, "
        "input throughput (token/s): 80.00"]
    assert r.trace.log_steps == [3]


def test_prefill_line_0509() -> None:
    r = reporter("0.5.9")
    r.report_prefill_stats(0, ADDER, running_bs=0, extend_tokens=40, seconds=0.0,
                           chunked_pending=0)
    assert r.trace.log == [
        "Prefill batch, #new-seq: 2, #new-token: 40, #cached-token: 8, token usage: 0.25, "
        "#running-req: 0, #queue-req: 3, input throughput (token/s): 0.00, cuda graph: False"]


def test_decode_throughput_is_over_the_span_since_the_last_line() -> None:
    r = reporter("0.5.23")
    r.report_decode_stats(40, clock=2.0, decoded=400, bs=10)
    r.report_decode_stats(80, clock=3.0, decoded=650, bs=300, tokens_in_use=500)
    assert r.trace.log == [
        "Decode batch, #running-req: 10, #token: 250, token usage: 0.25, cuda graph: True, "
        "gen throughput (token/s): 200.00, #queue-req: 3",
        "Decode batch, #running-req: 300, #token: 500, token usage: 0.50, cuda graph: False, "
        "gen throughput (token/s): 250.00, #queue-req: 3"]
    assert (r.last_clock, r.last_decoded) == (3.0, 650)


def test_a_trace_without_a_log_gets_no_lines_but_the_span_moves_on() -> None:
    def no_usage() -> int:
        raise AssertionError("#token is not read when no line is built")

    summary = SummaryTrace(TraceMeta(1000))
    r = reporter("0.5.23", summary)
    r.get_tokens_in_use = no_usage
    r.report_prefill_stats(0, ADDER, 0, 40, 0.5, 0)
    r.report_decode_stats(40, clock=2.0, decoded=400, bs=10)
    assert (r.last_clock, r.last_decoded) == (2.0, 400)
    lines: list[str] = []
    summary.on_log = lines.append
    r.report_decode_stats(80, clock=4.0, decoded=500, bs=10, tokens_in_use=100)
    assert lines == ["Decode batch, #running-req: 10, #token: 100, token usage: 0.10, "
                     "cuda graph: True, gen throughput (token/s): 50.00, #queue-req: 3"]
