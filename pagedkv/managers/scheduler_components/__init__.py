"""Parts of the scheduler, each a typed dataclass that names what it uses, as SGLang 0.5.23
lays them out (``python/sglang/srt/managers/scheduler_components/``)."""

from pagedkv.managers.scheduler_components.batch_result_processor import (
    SchedulerBatchResultProcessor,
)
from pagedkv.managers.scheduler_components.decode_fast_forward import (
    DecodeFastForward,
    DecodeWindow,
    LoopCounters,
)
from pagedkv.managers.scheduler_components.invariant_checker import SchedulerInvariantChecker
from pagedkv.managers.scheduler_components.metrics_reporter import SchedulerMetricsReporter
from pagedkv.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
from pagedkv.managers.scheduler_components.step_recorder import SchedulerStepRecorder
from pagedkv.managers.scheduler_components.waiting_queue import WaitingQueue

__all__ = [
    "DecodeFastForward",
    "DecodeWindow",
    "LoopCounters",
    "NewTokenRatioTracker",
    "SchedulerBatchResultProcessor",
    "SchedulerInvariantChecker",
    "SchedulerMetricsReporter",
    "SchedulerStepRecorder",
    "WaitingQueue",
]
