"""The baseline before paging: each request reserves one contiguous run of KV slots.

This is how systems before vLLM sized the KV cache (vLLM paper, Kwon et al., SOSP 2023,
section 3 and Fig. 3): a request reserves room for its tokens up front, in one contiguous run.
How much it reserves is :func:`orca_reservation` (the paper's three Orca baselines, section
6.1). Runs are placed first fit (the paper assumes Orca places them with a buddy allocator;
pagedkv does not model one). It shows both kinds of fragmentation:

- internal: reserved slots the request never fills (it stopped early);
- external: free slots split into holes, none long enough for the next reservation, so
  a request is refused although enough slots are free in total (:attr:`Fit.NO_CONTIGUOUS_RUN`).

Not SGLang code: SGLang pages from the start. Slot 0 is not reserved here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from pagedkv.errors import AllocatorError, OutOfMemoryError, bad_value, check_positive_int

FREE = -1


class Fit(enum.Enum):
    """Whether a reservation of a given length fits right now."""

    OK = "fits"
    NO_CONTIGUOUS_RUN = "enough free slots in total, but no contiguous run long enough"
    TOO_LITTLE_MEMORY = "fewer free slots in total than the reservation"


class ExternalFragmentationError(OutOfMemoryError):
    """Enough slots are free in total, but no single free run is long enough."""


# vLLM paper (Kwon et al., SOSP 2023), section 6.1: "Orca (Max) ... always reserves the space up
# to the maximum sequence length of the model, i.e., 2048 tokens" (the OPT models it serves).
ORCA_MAX_SEQ_LEN = 2048
ORCA_SCHEMES = ("max", "pow2", "oracle")


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (``n`` an integer >= 1): 25 -> 32, 32 -> 32, 33 -> 64.

    Raises:
        ConfigError: ``n`` is not an integer >= 1.
    """
    check_positive_int("n", n)
    return 1 << (n - 1).bit_length()


def orca_reservation(scheme: str, prompt_len: int, output_len: int,
                     max_seq_len: int = ORCA_MAX_SEQ_LEN) -> int:
    """Slots one request reserves, in one contiguous run, under the vLLM paper's Orca baselines.

    Source: Kwon et al., *Efficient Memory Management for Large Language Model Serving with
    PagedAttention*, SOSP 2023, section 6.1 ("Baseline 2: Orca"):

    - ``"oracle"``: the system knows the true output length: ``prompt_len + output_len``;
    - ``"pow2"``: it "over-reserves the space for outputs by at most 2x. For example, if the
      true output length is 25, it reserves 32 positions for outputs": ``prompt_len +
      next_pow2(output_len)``. Only the output is rounded; the prompt is known exactly;
    - ``"max"``: it "always reserves the space up to the maximum sequence length of the
      model, i.e., 2048 tokens": ``max_seq_len``, whatever the request.

    Where pagedkv chooses: the paper does not say what Pow2 does when the rounded output
    would pass the model's maximum; pagedkv caps the reservation at ``max_seq_len``, the most
    any request can hold.

    Args:
        scheme: ``"max"``, ``"pow2"`` or ``"oracle"``.
        prompt_len, output_len: the request's prompt and true output length in tokens (>= 1).
        max_seq_len: the model's maximum sequence length in tokens (prompt + output).

    Raises:
        ConfigError: an unknown scheme, a length < 1, or ``prompt_len + output_len >
            max_seq_len`` (a request the model cannot hold).
    """
    check_positive_int("prompt_len", prompt_len)
    check_positive_int("output_len", output_len)
    check_positive_int("max_seq_len", max_seq_len)
    if prompt_len + output_len > max_seq_len:
        raise bad_value("prompt_len + output_len", prompt_len + output_len,
                        f"at most max_seq_len={max_seq_len}")
    if scheme == "oracle":
        return prompt_len + output_len
    if scheme == "pow2":
        return min(prompt_len + next_pow2(output_len), max_seq_len)
    if scheme == "max":
        return max_seq_len
    raise bad_value("scheme", scheme, " or ".join(f'"{s}"' for s in ORCA_SCHEMES))


def pow2_reservation(prompt_len: int, output_len: int,
                     max_seq_len: int = ORCA_MAX_SEQ_LEN) -> int:
    """Orca (Pow2)'s reservation: ``prompt_len + next_pow2(output_len)``, at most
    ``max_seq_len`` (see :func:`orca_reservation`, which raises the same errors)."""
    return orca_reservation("pow2", prompt_len, output_len, max_seq_len)


@dataclass
class Run:
    """One request's reservation: slots ``start .. start + reserved - 1``, ``used`` filled."""

    run_id: int
    start: int
    reserved: int
    used: int


class ContiguousAllocator:
    """First-fit allocator of contiguous slot runs over ``size`` slots.

    Attributes:
        owner: int ``[size]``, the ``run_id`` of the reservation holding each slot, or -1.
        runs: request name -> :class:`Run`.
    """

    def __init__(self, size: int) -> None:
        self.size = check_positive_int("size", size)
        self.owner = np.full(size, FREE, dtype=np.int64)
        self.runs: dict[str, Run] = {}
        self._next_id = 0

    # ----- queries ----------------------------------------------------------------------
    def free_runs(self) -> list[tuple[int, int]]:
        """Maximal free runs as ``(start, length)``, in slot order."""
        free = np.concatenate(([False], self.owner == FREE, [False])).astype(np.int8)
        edges = np.flatnonzero(np.diff(free))
        return [(int(a), int(b - a)) for a, b in zip(edges[::2], edges[1::2], strict=True)]

    def free_slots(self) -> int:
        """Slots not reserved by any request."""
        return int((self.owner == FREE).sum())

    def largest_free_run(self) -> int:
        """Length of the longest free run (0 when full)."""
        return max((n for _, n in self.free_runs()), default=0)

    def used_slots(self) -> int:
        """Slots holding a token."""
        return sum(r.used for r in self.runs.values())

    def reserved_slots(self) -> int:
        """Slots inside reservations (used or not)."""
        return sum(r.reserved for r in self.runs.values())

    def fit(self, length: int) -> Fit:
        """Whether ``alloc(name, length)`` would succeed now; changes nothing."""
        check_positive_int("length", length)
        if self.largest_free_run() >= length:
            return Fit.OK
        return Fit.NO_CONTIGUOUS_RUN if self.free_slots() >= length else Fit.TOO_LITTLE_MEMORY

    # ----- updates ----------------------------------------------------------------------
    def alloc(self, name: str, length: int, used: int = 0, strict: bool = False) -> int | None:
        """Reserve ``length`` contiguous slots for request ``name``, first fit.

        Returns the run's first slot, or None (nothing changed) when it does not fit; with
        ``strict=True`` raises :class:`ExternalFragmentationError` or
        :class:`OutOfMemoryError` with the numbers. ``used`` tokens are filled at once.
        """
        if name in self.runs:
            raise AllocatorError(f"request {name!r} already holds a reservation")
        verdict = self.fit(length)
        if not 0 <= used <= length:
            raise bad_value("used", used, f"an integer in [0, {length}]")
        if verdict is not Fit.OK:
            if strict:
                cls = (ExternalFragmentationError if verdict is Fit.NO_CONTIGUOUS_RUN
                       else OutOfMemoryError)
                raise cls(f"cannot reserve {length} contiguous slots: {verdict.value} "
                          f"({self.free_slots()} free, longest run {self.largest_free_run()})")
            return None
        start = next(s for s, n in self.free_runs() if n >= length)
        self.owner[start:start + length] = self._next_id
        self.runs[name] = Run(self._next_id, start, length, used)
        self._next_id += 1
        return start

    def grow(self, name: str, tokens: int = 1) -> None:
        """Fill ``tokens`` more slots of ``name``'s reservation (a decode step)."""
        run = self._run(name)
        if run.used + tokens > run.reserved:
            raise AllocatorError(f"request {name!r} would hold {run.used + tokens} tokens in a "
                                 f"reservation of {run.reserved}")
        run.used += tokens

    def free(self, name: str) -> None:
        """Release ``name``'s whole reservation."""
        run = self._run(name)
        del self.runs[name]
        self.owner[run.start:run.start + run.reserved] = FREE

    def _run(self, name: str) -> Run:
        if name not in self.runs:
            raise AllocatorError(f"request {name!r} holds no reservation")
        return self.runs[name]

    def slot_labels(self) -> list[str]:
        """Per slot: ``"A3"`` (request A's token 3), ``"A·"`` (reserved, empty) or ``""``."""
        labels = [""] * self.size
        for name, run in self.runs.items():
            for i in range(run.reserved):
                labels[run.start + i] = f"{name}{i}" if i < run.used else f"{name}·"
        return labels

    def check_invariants(self) -> None:
        """Runs lie inside the pool, do not overlap, match ``owner``, and used <= reserved."""
        expect = np.full(self.size, FREE, dtype=np.int64)
        for name, run in self.runs.items():
            span = expect[run.start:run.start + run.reserved]
            if run.start < 0 or len(span) != run.reserved or (span != FREE).any():
                raise AllocatorError(f"run of {name!r} overlaps another or leaves the pool")
            if not 0 <= run.used <= run.reserved:
                raise AllocatorError(f"run of {name!r} holds {run.used} of {run.reserved}")
            span[:] = run.run_id
        if not np.array_equal(expect, self.owner):
            raise AllocatorError("the owner map disagrees with the runs")
