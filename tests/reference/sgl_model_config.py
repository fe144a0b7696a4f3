"""What the pool-sizing references of every release (:mod:`pools_sglang`,
:mod:`pools_sglang_0509`) take from SGLang alike: its own ``ModelConfig`` parsed from a config
dict, and a handler that keeps the log lines SGLang prints while it sizes the pools."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sgl_boot

sgl_boot.load()

from sglang.srt.configs.model_config import ModelConfig  # noqa: E402


class LogLines(logging.Handler):
    """Every INFO-or-above line logged to the loggers it is added to, as logged."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def captured_logs(names: Sequence[str]) -> Iterator[LogLines]:
    """The loggers ``names`` (``""``: the root logger, where SGLang's warnings go) at INFO,
    their lines kept by the :class:`LogLines` handler given and not propagated; levels and
    propagation put back on leaving."""
    handler = LogLines()
    loggers = [logging.getLogger(name) for name in names]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    try:
        yield handler
    finally:
        for lg, (level, propagate) in zip(loggers, saved, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate


class ModelConfigs:
    """SGLang's ``ModelConfig`` for a config dict, as ``ModelConfig.from_server_args`` builds
    it (the server arguments it takes here: ``--disable-hybrid-swa-memory`` and
    ``--enable-multimodal``), parsed once per distinct config and flags: the config is written
    to a temporary folder (named ``prefix...``) so that transformers' config classes fill their
    defaults as at server start.

    ``init_memory_pool`` never writes to it on the sizing paths (``initialize`` would have
    narrowed its layer-id lists to the pipeline stage: every layer, with one stage), so one
    parse is shared."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._parsed: dict[str, ModelConfig] = {}

    def __call__(self, config: dict[str, Any], disable_hybrid_swa_memory: bool = False,
                 enable_multimodal: bool | None = None) -> ModelConfig:
        text = json.dumps(config, sort_keys=True)
        key = f"{disable_hybrid_swa_memory}:{enable_multimodal}:{text}"
        if key not in self._parsed:
            folder = Path(tempfile.mkdtemp(prefix=self.prefix))
            (folder / "config.json").write_text(text)
            self._parsed[key] = ModelConfig(str(folder), trust_remote_code=False,
                                            disable_hybrid_swa_memory=disable_hybrid_swa_memory,
                                            enable_multimodal=enable_multimodal)
        return self._parsed[key]
