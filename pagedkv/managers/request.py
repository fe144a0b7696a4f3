"""One simulated request (SGLang's ``Req`` in ``managers/schedule_batch.py``, reduced to lengths).

Token bookkeeping, as in SGLang: a prefill writes the KV of every token it is given and
samples one new token, so after a prefill over ``prompt_len + generated`` tokens the request
has ``generated + 1`` output tokens. Each decode step writes the KV of the newest token and
samples the next. The last sampled token's KV is never written, so a running request always
holds ``kv_len = prompt_len + generated - 1`` tokens of KV.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from pagedkv.errors import bad_value, check_positive_int


class RequestLike(Protocol):
    """What the scheduler reads from a workload entry (``pagedkv.workloads.synthetic.RequestSpec``)."""

    prompt_len: int
    output_len: int
    max_new_tokens: int
    arrival_s: float


@dataclass(eq=False)
class Req:
    """A request's lengths and the scheduler's state for it.

    Attributes:
        rid: request id (position in the submitted workload).
        prompt_len: prompt tokens.
        output_len: tokens it will generate before stopping (EOS), known to the simulator only.
        max_new_tokens: the client's cap, what admission sees; ``output_len <= max_new_tokens``.
        arrival_s: arrival time, seconds.
        generated: output tokens so far (kept across retraction, as SGLang keeps ``output_ids``).
        kv_len: tokens whose KV is in the pool now (0 while waiting).
        req_pool_idx: row in ``req_to_token``, -1 while it holds none.
        first_admit_s, first_token_s, finish_s: times in seconds, None until they happen.
        num_retractions: times ``retract_decode`` sent it back.
        recomputed_tokens: KV tokens freed by retraction, to be computed again.
        queue_s: total seconds spent in the waiting queue (arrival and every retraction).
    """

    rid: int
    prompt_len: int
    output_len: int
    max_new_tokens: int
    arrival_s: float = 0.0
    generated: int = 0
    kv_len: int = 0
    req_pool_idx: int = -1
    first_admit_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    num_retractions: int = 0
    recomputed_tokens: int = 0
    queue_s: float = 0.0
    enqueued_s: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        check_positive_int("prompt_len", self.prompt_len)
        check_positive_int("output_len", self.output_len)
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) \
                or self.max_new_tokens < self.output_len:
            raise bad_value("max_new_tokens", self.max_new_tokens,
                            f"an integer >= output_len={self.output_len}")
        if not self.arrival_s >= 0:
            raise bad_value("arrival_s", self.arrival_s, "seconds >= 0")
        self.enqueued_s = self.arrival_s

    @classmethod
    def from_spec(cls, rid: int, spec: RequestLike) -> Req:
        """A fresh request from a workload entry; ConfigError on inconsistent lengths."""
        return cls(rid, int(spec.prompt_len), int(spec.output_len), int(spec.max_new_tokens),
                   float(spec.arrival_s))

    @property
    def fill_len(self) -> int:
        """Tokens a (re)prefill covers: the prompt plus the output so far (SGLang ``fill_ids``)."""
        return self.prompt_len + self.generated

    @property
    def extend_input_len(self) -> int:
        """Tokens still to prefill: ``fill_len - kv_len`` (SGLang ``extend_input_len``)."""
        return self.fill_len - self.kv_len

    @property
    def finished(self) -> bool:
        """Whether it has produced all ``output_len`` tokens."""
        return self.generated >= self.output_len
