"""Reference tests: pagedkv against SGLang's own classes (see README.md in this folder).

Puts this folder and the repository root on ``sys.path`` (pagedkv is not installed in the
reference venvs), checks that the installed SGLang is the release the caller asked for
(``PAGEDKV_SGLANG_RELEASE``, set by ``scripts/test.sh``), and prints how many cases each area
compared. Test modules that need SGLang skip themselves, with the reason, where it is not
installed (the main ``.venv``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parents[1]))

import compare  # noqa: E402
import sgl_boot  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    # importing SGLang's modules on a CPU warns about GPU-only features and deprecated torch
    # APIs it uses; none of it concerns the code paths compared here
    config.addinivalue_line("filterwarnings", "ignore::UserWarning:sglang")
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:torch")
    wanted = os.environ.get("PAGEDKV_SGLANG_RELEASE")
    if wanted and wanted != sgl_boot.VERSION:
        raise pytest.UsageError(f"PAGEDKV_SGLANG_RELEASE={wanted} but this interpreter has "
                                f"SGLang {sgl_boot.VERSION}: use .venv-sglang-{wanted}/bin/python")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if compare.COUNTS:
        parts = ", ".join(f"{area} {n}" for area, n in sorted(compare.COUNTS.items()))
        terminalreporter.write_line(f"SGLang {sgl_boot.VERSION} reference cases compared: {parts}")
