"""Byte units. pagedkv keeps memory in bytes; these helpers only format and convert.

SGLang divides by 2^30 and labels the result "GB"; we say GiB for the same number.
GPU datasheets use decimal GB (10^9). Mixing the two is a 7.4 % error at this scale.
"""

from __future__ import annotations

from pagedkv.errors import bad_value

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


#: Bytes per element of each KV-cache dtype SGLang accepts (``--kv-cache-dtype``).
#: fp8 caches are stored as one byte per element.
KV_DTYPE_BYTES: dict[str, int] = {
    "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "half": 2,
    "fp32": 4, "float32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1,
}


def kv_dtype_bytes(kv_cache_dtype: str) -> int:
    """Bytes per stored KV element for ``kv_cache_dtype`` (``"bf16"``, ``"fp8_e4m3"``, ...)."""
    try:
        return KV_DTYPE_BYTES[kv_cache_dtype]
    except KeyError:
        raise bad_value("kv_cache_dtype", kv_cache_dtype, ", ".join(KV_DTYPE_BYTES)) from None
