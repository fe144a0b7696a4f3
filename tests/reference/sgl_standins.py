"""Stand-ins for what a CPU cannot give SGLang's scheduler, shared by the event-loop
references of every release (:mod:`loop_sglang`, :mod:`loop_sglang_0509`): a config object
that answers None for fields it was not given, a one-rank process group and an output sink.
Plain Python: nothing here imports SGLang."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

UNKNOWN_READS: set[str] = set()  # config fields SGLang read that a bag was not given


class AttributeBag:
    """Stands for a config object: given fields, and None for any other (recorded in
    :data:`UNKNOWN_READS`)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        UNKNOWN_READS.add(name)
        return None


class OneRank:
    """A process group of one rank: its size and rank; any collective is an error."""

    world_size, rank, rank_in_group, local_rank = 1, 0, 0, 0
    first_rank = last_rank = 0
    is_first_rank = is_last_rank = True
    ranks = (0,)
    device_group = None

    @property
    def cpu_group(self) -> OneRank:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"a collective ({name}) was called on a one-rank group")


class Sink:
    """Where SGLang sends its outputs (to the tokenizer and the detokenizer): dropped."""

    def send_output(self, *args: Any, **kwargs: Any) -> None:
        pass

    send_pyobj = send = send_output


def field_defaults(cls: type) -> Any:
    """An instance of the dataclass ``cls`` holding its field defaults (factories called),
    built without ``__init__`` or ``__post_init__`` (SGLang's ``ServerArgs.__post_init__``
    would read the model's Hugging Face config); a field without a default is left unset."""
    obj = object.__new__(cls)
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            setattr(obj, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(obj, f.name, f.default_factory())
    return obj


class Retractions(logging.Handler):
    """SGLang's retraction log line (``Retract requests ...``, with ``#new_tokens_gained``),
    as it logs it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Retract requests" in message:
            self.lines.append(message)
