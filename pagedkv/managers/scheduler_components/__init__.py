"""Parts of the scheduler, each a typed dataclass that names what it uses, as SGLang 0.5.23
lays them out (``python/sglang/srt/managers/scheduler_components/``)."""

from pagedkv.managers.scheduler_components.batch_result_processor import (
    InFlight,
    SchedulerBatchResultProcessor,
)
from pagedkv.managers.scheduler_components.decode_fast_forward import (
    MAX_WINDOW,
    DecodeFastForward,
    DecodeWindow,
    decode_many,
)
from pagedkv.managers.scheduler_components.decode_memory_checker import DecodeMemoryChecker
from pagedkv.managers.scheduler_components.decode_step_runner import DecodeStepRunner
from pagedkv.managers.scheduler_components.invariant_checker import SchedulerInvariantChecker
from pagedkv.managers.scheduler_components.loop_counters import LoopCounters
from pagedkv.managers.scheduler_components.metrics_reporter import SchedulerMetricsReporter
from pagedkv.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
from pagedkv.managers.scheduler_components.overlap_result_queue import OverlapResultQueue
from pagedkv.managers.scheduler_components.pool_stats_observer import SchedulerPoolStatsObserver
from pagedkv.managers.scheduler_components.prefill_manager import PrefillManager, PrefillPass
from pagedkv.managers.scheduler_components.request_tracker import SchedulerRequestTracker
from pagedkv.managers.scheduler_components.request_validator import (
    default_max_running_requests,
    validate_requests,
    validate_sizes,
)
from pagedkv.managers.scheduler_components.step_recorder import SchedulerStepRecorder
from pagedkv.managers.scheduler_components.waiting_queue import WaitingQueue

__all__ = [
    "MAX_WINDOW",
    "DecodeFastForward",
    "DecodeMemoryChecker",
    "DecodeStepRunner",
    "DecodeWindow",
    "InFlight",
    "LoopCounters",
    "NewTokenRatioTracker",
    "OverlapResultQueue",
    "PrefillManager",
    "PrefillPass",
    "SchedulerBatchResultProcessor",
    "SchedulerInvariantChecker",
    "SchedulerMetricsReporter",
    "SchedulerPoolStatsObserver",
    "SchedulerRequestTracker",
    "SchedulerStepRecorder",
    "WaitingQueue",
    "decode_many",
    "default_max_running_requests",
    "validate_requests",
    "validate_sizes",
]
