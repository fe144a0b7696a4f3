"""SGLang's scheduler: admission, ``new_token_ratio``, retraction, the trace it writes.

Modules, bottom-up: ``config`` (constants, policies, the SGLang release followed), ``req``
(one request), ``schedule_batch`` (the running batch), ``retract_decode`` (retraction),
``schedule_policy`` (``PrefillAdder``), ``trace`` and ``trace_summary`` (the step record
the scheduler writes: every row, or totals for long runs), ``in_flight_recorder`` and
``page_recorder`` (the visualizer's page record), ``scheduler_components`` (the
scheduler's parts: ratio tracker, waiting queue, batch result processor, metrics reporter,
step recorder, invariant checker, prefill manager, decode fast-forward, overlap result
queue, pool stats, request tracker and validator), ``scheduler_init`` (what the scheduler
builds when it starts), ``scheduler`` (the loops). What runs it is above,
in :mod:`pagedkv.entrypoints` (``Engine``, ``simulate``, the ``pagedkv`` command); a run's
summary numbers are in :mod:`pagedkv.metrics`; the step-time model is
``pagedkv.model_executor.sim_executor``; the book's analyses are in ``pagedkv.lessons``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagedkv.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from pagedkv.managers.config import ENV_VARS, Policy, SchedulerConfig
    from pagedkv.managers.req import Req
    from pagedkv.managers.schedule_batch import ScheduleBatch
    from pagedkv.managers.schedule_policy import AddReqResult, PrefillAdder, ceil_to_page
    from pagedkv.managers.scheduler import Scheduler
    from pagedkv.managers.trace import Trace, TraceMeta
    from pagedkv.model_executor.sim_executor import FixedStepTime, RooflineStepTime

# Public name -> defining module. The names load on first access (PEP 562) because the
# pools under ``batch`` and ``scheduler`` import torch, and ``pagedkv size`` must start
# without it.
_EXPORTS: dict[str, str] = {
    "AddReqResult": "pagedkv.managers.schedule_policy",
    "PrefillAdder": "pagedkv.managers.schedule_policy",
    "ceil_to_page": "pagedkv.managers.schedule_policy",
    "ScheduleBatch": "pagedkv.managers.schedule_batch",
    "ENV_VARS": "pagedkv.managers.config",
    "Policy": "pagedkv.managers.config",
    "SchedulerConfig": "pagedkv.managers.config",
    "Req": "pagedkv.managers.req",
    "Scheduler": "pagedkv.managers.scheduler",
    "FixedStepTime": "pagedkv.model_executor.sim_executor",
    "RooflineStepTime": "pagedkv.model_executor.sim_executor",
    "Trace": "pagedkv.managers.trace",
    "TraceMeta": "pagedkv.managers.trace",
}

__all__ = [
    "ENV_VARS",
    "AddReqResult",
    "FixedStepTime",
    "Policy",
    "PrefillAdder",
    "Req",
    "RooflineStepTime",
    "ScheduleBatch",
    "Scheduler",
    "SchedulerConfig",
    "Trace",
    "TraceMeta",
    "ceil_to_page",
]


# Loaded on first access and cached in this module (see pagedkv.lazy_exports).
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)
