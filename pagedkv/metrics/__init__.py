"""What a finished run measured, as SGLang's ``srt/metrics/``: :class:`Metrics` (``metrics``:
the run's summary numbers) and per-request latencies with their percentiles
(``request_metrics``, SGLang's ``bench_serving`` definitions). Read from a run's requests and
trace after the scheduler is done; the scheduler never imports this package."""

from pagedkv.metrics.metrics import Metrics

__all__ = ["Metrics"]
