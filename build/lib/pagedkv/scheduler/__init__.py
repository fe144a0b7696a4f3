"""A simulator of SGLang's scheduler: admission, ``new_token_ratio``, retraction, the trace.

Modules, bottom-up: ``config`` (constants and policies), ``request`` (one request),
``adder`` (``PrefillAdder``), ``batch`` (the running batch, ``retract_decode``), ``timing``
(the roofline step-time model), ``trace``, ``fastforward`` (decode steps between events
taken together), ``prefill`` (a prefill pass), ``scheduler`` (the step loop), ``metrics``,
``simulation`` (``simulate``: pool sizing plus a run), ``analysis`` (reading a finished run:
admission passes, retraction episodes, snapshots), ``examples`` (the book's seeded runs) and
``cli``.
"""

from pagedkv.scheduler.adder import AddReqResult, PrefillAdder, ceil_to_page
from pagedkv.scheduler.batch import RunningBatch
from pagedkv.scheduler.config import ENV_VARS, Policy, SchedulerConfig
from pagedkv.scheduler.metrics import Metrics
from pagedkv.scheduler.request import Req
from pagedkv.scheduler.scheduler import Scheduler
from pagedkv.scheduler.simulation import SimResult, simulate
from pagedkv.scheduler.timing import FixedStepTime, RooflineStepTime
from pagedkv.scheduler.trace import Trace, TraceMeta

__all__ = [
    "ENV_VARS",
    "AddReqResult",
    "FixedStepTime",
    "Metrics",
    "Policy",
    "PrefillAdder",
    "Req",
    "RooflineStepTime",
    "RunningBatch",
    "Scheduler",
    "SchedulerConfig",
    "SimResult",
    "Trace",
    "TraceMeta",
    "ceil_to_page",
    "simulate",
]
