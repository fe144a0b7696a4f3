"""A simulator of SGLang's scheduler: admission, ``new_token_ratio``, retraction, the trace.

Modules, bottom-up: ``config`` (constants and policies), ``request`` (one request),
``adder`` (``PrefillAdder``), ``batch`` (the running batch, ``retract_decode``), ``timing``
(the roofline step-time model), ``trace``, ``fastforward`` (decode steps between events
taken together), ``prefill`` (a prefill pass), ``scheduler`` (the step loop), ``metrics``,
``simulation`` (``simulate``: pool sizing plus a run), ``analysis`` (reading a finished run:
admission passes, retraction episodes, snapshots), ``examples`` (the book's seeded runs) and
``cli``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pagedkv.scheduler.adder import AddReqResult, PrefillAdder, ceil_to_page
    from pagedkv.scheduler.batch import RunningBatch
    from pagedkv.scheduler.config import ENV_VARS, Policy, SchedulerConfig
    from pagedkv.scheduler.metrics import Metrics
    from pagedkv.scheduler.request import Req
    from pagedkv.scheduler.scheduler import Scheduler
    from pagedkv.scheduler.simulation import SimResult, simulate
    from pagedkv.scheduler.timing import FixedStepTime, RooflineStepTime
    from pagedkv.scheduler.trace import Trace, TraceMeta

# Public name -> defining submodule. The names load on first access (PEP 562) because the
# pools under ``batch`` and ``scheduler`` import torch, and ``pagedkv size`` must start
# without it while ``pagedkv simulate`` is registered from ``pagedkv.scheduler.cli``.
_EXPORTS: dict[str, str] = {
    "AddReqResult": "adder", "PrefillAdder": "adder", "ceil_to_page": "adder",
    "RunningBatch": "batch",
    "ENV_VARS": "config", "Policy": "config", "SchedulerConfig": "config",
    "Metrics": "metrics",
    "Req": "request",
    "Scheduler": "scheduler",
    "SimResult": "simulation", "simulate": "simulation",
    "FixedStepTime": "timing", "RooflineStepTime": "timing",
    "Trace": "trace", "TraceMeta": "trace",
}

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


def __getattr__(name: str) -> Any:
    """Import a public name's submodule on first access and cache the name here."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """List the public names with those already loaded, for ``dir()`` and completion."""
    return sorted({*globals(), *__all__})
