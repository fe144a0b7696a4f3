"""Errors raised by pagedkv, and the one helper that phrases a bad-parameter message.

Every error names the parameter, the value it got and the valid range, so that a reader
who passes ``page_size=0`` learns what to pass instead rather than reading a stack trace
from deep inside a tensor operation.
"""

from __future__ import annotations

import math


class PagedKVError(Exception):
    """Base class of every error pagedkv raises on purpose."""


class ConfigError(PagedKVError, ValueError):
    """A parameter or a model/GPU description is outside what pagedkv can size."""


class RequestError(ConfigError):
    """A request of a workload that SGLang would refuse, named by ``rid`` (the scheduler's
    index): a caller that read the requests from a file can say which line it is on.

    Attributes:
        rid: the request. detail: the message after ``request {rid}``.
    """

    def __init__(self, rid: int, detail: str) -> None:
        super().__init__(f"request {rid}{detail}")
        self.rid, self.detail = rid, detail

    def __reduce__(self) -> tuple[type, tuple[int, str]]:
        # a sweep's worker process or Ray task sends it back pickled: rebuild it from its parts
        return type(self), (self.rid, self.detail)


class NotEnoughMemoryError(PagedKVError):
    """The weights leave no room for a KV pool (SGLang fails at start-up the same way)."""


class OutOfMemoryError(PagedKVError):
    """An allocation asked for more KV slots or request rows than are free."""


class AllocatorError(PagedKVError):
    """Misuse of a pool or allocator: double free, freeing slot 0, writing past a row."""


def bad_value(name: str, value: object, valid: str) -> ConfigError:
    """Build the standard message: ``page_size=0 is invalid; valid: an integer >= 1``."""
    return ConfigError(f"{name}={value!r} is invalid; valid: {valid}")


def bad_request(rid: int, name: str, value: object, valid: str) -> RequestError:
    """:func:`bad_value` for a field of request ``rid``: ``request 3 prompt_len=... is invalid``."""
    return RequestError(rid, f" {bad_value(name, value, valid)}")


def check_fraction(name: str, value: float) -> float:
    """Return ``value`` if it lies in (0, 1], else raise :class:`ConfigError`."""
    if not isinstance(value, (int, float)) or not 0.0 < float(value) <= 1.0:
        raise bad_value(name, value, "a fraction in (0, 1]")
    return float(value)


def check_positive_int(name: str, value: object, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer >= ``minimum``, else raise :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise bad_value(name, value, f"an integer >= {minimum}")
    return value


def check_real(name: str, value: object, low: float | None = None, *, open_low: bool = False,
               unit: str = "") -> float:
    """Return ``value`` as a float if it is finite (NaN and infinities are refused) and at
    least ``low`` (more than ``low`` when ``open_low``), else raise :class:`ConfigError`."""
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))
    if ok and low is not None:
        ok = value > low if open_low else value >= low
    if not ok:
        bound = "" if low is None else f" {'>' if open_low else '>='} {low:g}"
        raise bad_value(name, value, f"a finite number{bound}{unit}")
    return float(value)
