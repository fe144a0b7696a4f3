"""The SGLang releases pagedkv follows, and the check every ``sglang_version`` argument gets.

pagedkv follows SGLang 0.5.23 (the newest release) by default and 0.5.9 (the release the
book was first written against) on request. Where the two differ, the code says which one
it follows; :data:`pagedkv.managers.config.VERSION_DIFFERENCES` lists the differences the
scheduler switches on.
"""

from __future__ import annotations

from pagedkv.errors import bad_value

SGLANG_VERSIONS = ("0.5.23", "0.5.9")
DEFAULT_SGLANG_VERSION = SGLANG_VERSIONS[0]


def check_sglang_version(sglang_version: object) -> str:
    """Return ``sglang_version`` if pagedkv follows it.

    Raises:
        ConfigError: anything but ``"0.5.23"`` or ``"0.5.9"`` (the message names both).
    """
    if sglang_version not in SGLANG_VERSIONS:
        raise bad_value("sglang_version", sglang_version, "one of " + ", ".join(SGLANG_VERSIONS))
    return sglang_version  # type: ignore[return-value]
