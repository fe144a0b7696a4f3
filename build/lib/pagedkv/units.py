"""Byte units. pagedkv keeps memory in bytes; these helpers only format and convert.

SGLang divides by 2^30 and labels the result "GB"; we say GiB for the same number.
GPU datasheets use decimal GB (10^9). Mixing the two is a 7.4 % error at this scale.
"""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
GB = 10**9


def to_gib(num_bytes: float) -> float:
    """Bytes to GiB (2^30 bytes), the unit SGLang's logs print as "GB"."""
    return num_bytes / GiB


def gib(value_gib: float) -> int:
    """GiB to bytes, rounded to the nearest byte."""
    return round(value_gib * GiB)


def fmt_gib(num_bytes: float, digits: int = 2) -> str:
    """Format bytes as ``"27.13 GiB"``."""
    return f"{to_gib(num_bytes):.{digits}f} GiB"
