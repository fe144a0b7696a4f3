"""The chapters' "On your GPU" sections: which model runs where, and what they report.

Every section runs its chapter's experiment on a real model through
:class:`pagedkv.entrypoints.engine.Engine`. What "real" means depends on the machine:

- a CUDA GPU with the Hugging Face hub reachable: ``Qwen/Qwen2.5-0.5B-Instruct`` (about 1 GB
  of weights), in bf16 where the card has it, fp16 on a T4 (sm_75 has no bf16);
- a CUDA GPU without the hub (``HF_HUB_OFFLINE=1``, no answer from the hub within 2 s,
  ``allow_download=False``) and without the model in the local cache: random weights in
  Qwen2.5-0.5B's exact shapes, so memory and timing are those of the real model while the
  text is noise. Offline is decided at once (:mod:`pagedkv.model_executor.hub`), not after
  ``transformers`` has retried the network for about 50 s; a cached model loads offline;
- no GPU (the book's own build): the tiny random Llama of the tests (2 layers, 4 query heads
  sharing 2 KV heads of 16) on the CPU, with Triton's interpreter running the decode kernel.
  Nothing is downloaded.

:func:`detect_setup` decides; each section's text says which of the three ran. The
experiments themselves live in :mod:`pagedkv.lessons.on_gpu_memory` (chapters 1 and 3) and
:mod:`pagedkv.lessons.on_gpu_serving` (chapters 4, 5 and 8).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pagedkv.entrypoints.engine import Engine, PromptRequest
from pagedkv.managers.trace import Trace
from pagedkv.model_executor.hub import checkpoint_kwargs, load_tokenizer
from pagedkv.model_executor.model_loader import (
    free_memory,
    load_causal_lm,
    random_model_config,
    resolve_device,
    resolve_dtype,
)
from pagedkv.model_executor.model_runner import ModelRunner

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
_TOPICS = ("a KV cache", "paged attention", "a GPU's memory", "a transformer layer",
           "tokenization", "request batching", "a radix tree", "memory fragmentation")
_ASKS = ("Explain {} in one sentence.", "Write a short poem about {}.",
         "List three facts about {}.", "Why does {} matter when serving language models?")


@dataclass(frozen=True)
class Setup:
    """What the sections run on.

    Attributes:
        device, dtype: where and in what the model runs.
        source: a hub id (real weights) or a ``transformers`` config (random weights).
        kind: ``"real"`` (downloaded weights), ``"random-full"`` (random weights, real shapes,
            on a GPU) or ``"tiny"`` (the tiny random model on the CPU).
        device_name: the GPU's name, or ``"CPU"``.
    """

    device: torch.device
    dtype: torch.dtype
    source: Any
    kind: str
    device_name: str

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def describe(self, serves: bool = True) -> str:
        """One sentence for the reader: what runs, where, and why. ``serves=False`` for a
        section that only loads the model and sizes its pool (chapter 1's), so that the
        sentence promises no decode kernel and no times."""
        dt = str(self.dtype).removeprefix("torch.")
        if self.kind == "real":
            return f"Running {self.source} on {self.device_name} in {dt}."
        if self.kind == "random-full":
            what = ("Running", "memory and times are the real model's, the text is noise") if serves \
                else ("Loading", "memory is the real model's")
            return (f"{what[0]} random weights in {DEFAULT_MODEL}'s shapes on {self.device_name} in "
                    f"{dt} (the hub was not reachable): {what[1]}.")
        tiny = ("the tiny random Llama (2 layers, 4 query heads sharing 2 KV heads of 16, "
                "vocabulary 128) on the CPU in float32")
        if not serves:
            return (f"No GPU here (this is how the book is built): loading {tiny} and sizing "
                    "its pool (nothing is served here); the sizes are small, and on a GPU this "
                    "cell loads Qwen2.5-0.5B-Instruct.")
        return (f"No GPU here (this is how the book is built): running {tiny}, the decode "
                "kernel through Triton's interpreter. Token ids stand in "
                "for text, times are CPU times, and the sizes are small; on a GPU this cell "
                "runs Qwen2.5-0.5B-Instruct.")


    def cpu_note(self, meaningless: str) -> str:
        """On the CPU stand-in, a plain warning that names the numbers that mean nothing there
        (``meaningless``, one or two sentences); "" on a GPU, where every number is real, or
        when there is nothing to name."""
        if self.kind != "tiny" or not meaningless:
            return ""
        return (f"**Not a GPU run.** No GPU was found, so this section ran a tiny model with random "
                f"weights on the CPU instead of {DEFAULT_MODEL}. {meaningless} Run the chapter on a "
                "GPU (on Colab: a T4 runtime) to get real ones.")


def detect_setup(model_id: str = DEFAULT_MODEL, device: str | None = None,
                 allow_download: bool | None = None) -> Setup:
    """Pick the model and device (see the module docstring).

    ``allow_download``: None uses the hub when it answers (or the local cache when it does
    not, :func:`~pagedkv.model_executor.hub.checkpoint_kwargs`, decided at once); False
    never tries. The CPU never downloads. ConfigError for a bad ``device``.
    """
    dev = resolve_device(device)
    dtype = resolve_dtype(None, dev)
    if dev.type == "cpu":
        return Setup(dev, dtype, random_model_config(), "tiny", "CPU")
    name = torch.cuda.get_device_name(dev)
    if allow_download is not False:
        try:
            from transformers import AutoConfig

            # at once: offline and not cached is a ConfigError here, before any retry
            AutoConfig.from_pretrained(model_id, **checkpoint_kwargs(model_id))
            return Setup(dev, dtype, model_id, "real", name)
        except (OSError, ValueError):  # ConfigError included: no hub, no cache, or refused
            pass
    return Setup(dev, dtype, random_model_config("qwen2", "qwen2.5-0.5b"), "random-full", name)


_LOADED: dict[str, tuple[torch.nn.Module, Any]] = {}


def model_and_tokenizer(setup: Setup) -> tuple[torch.nn.Module, Any]:
    """The setup's model (loaded once per process) and its tokenizer (None for random weights)."""
    key = f"{setup.source!r}:{setup.device}:{setup.dtype}"
    if key not in _LOADED:
        model, _ = load_causal_lm(setup.source, setup.device, setup.dtype)
        tokenizer = None
        if setup.kind == "real":
            tokenizer = load_tokenizer(setup.source, **checkpoint_kwargs(setup.source))
        _LOADED[key] = (model, tokenizer)
    return _LOADED[key]


def make_engine(setup: Setup, max_total_tokens: int, page_size: int = 1, **options: Any) -> Engine:
    """An engine over the setup's model with a pool of ``max_total_tokens`` (a cap, as
    SGLang's ``--max-total-tokens``: the chapters want pools small enough to fill)."""
    model, tokenizer = model_and_tokenizer(setup)
    eos = None if setup.kind == "real" else ()
    memory = free_memory(setup.device)  # the card's size picks SGLang's chunk size
    runner = ModelRunner(model, max_total_num_tokens=max_total_tokens // page_size * page_size,
                         page_size=page_size, eos_token_ids=eos, tokenizer=tokenizer,
                         name=setup.source if isinstance(setup.source, str) else None,
                         device_memory_bytes=memory[1] if memory else 0)
    return Engine(runner, **options)


def prompts(setup: Setup, n: int, seed: int = 0, length: tuple[int, int] = (8, 24),
            shared: int = 0) -> list[list[int]]:
    """``n`` prompts as token ids. A real model gets chat-formatted questions, behind a
    system prompt of about ``shared`` tokens if ``shared``; random weights get random ids
    (``length`` tokens each, behind the same ``shared`` random ids)."""
    model, tokenizer = model_and_tokenizer(setup)
    rng = np.random.default_rng(seed)
    if tokenizer is not None:
        asks = [a.format(t) for a in _ASKS for t in _TOPICS]
        system = system_prompt(tokenizer, shared) if shared else None
        return [chat_ids(tokenizer, asks[(seed + i) % len(asks)], system) for i in range(n)]
    vocab = int(model.config.vocab_size)
    head = rng.integers(0, vocab, shared).tolist()
    return [head + rng.integers(0, vocab, int(rng.integers(*length))).tolist() for _ in range(n)]


def system_prompt(tokenizer: Any, tokens: int) -> str:
    """A made-up assistant policy of about ``tokens`` tokens (numbered rules about the topics)."""
    rules, i = [], 0
    while len(tokenizer(" ".join(rules)).input_ids) < tokens:
        topic = _TOPICS[i % len(_TOPICS)]
        rules.append(f"Rule {i + 1}: when asked about {topic}, be accurate, brief and kind, and "
                     f"say what you do not know.")
        i += 1
    return "You are a helpful assistant. " + " ".join(rules)


def chat_ids(tokenizer: Any, text: str, system: str | None = None) -> list[int]:
    """``text`` as one user turn of the model's chat template (after a ``system`` message
    if given), ready for the answer."""
    turns = [{"role": "system", "content": system}] if system else []
    ids = tokenizer.apply_chat_template([*turns, {"role": "user", "content": text}],
                                        add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    return [int(t) for t in (ids["input_ids"] if isinstance(ids, Mapping) else ids)]


def requests(ids: list[list[int]], max_new_tokens: int, arrivals: list[float] | None = None,
             ignore_eos: bool = False) -> list[PromptRequest]:
    """Prompt requests for :meth:`Engine.run` (arrival times in measured seconds)."""
    arrivals = arrivals or [0.0] * len(ids)
    return [PromptRequest(len(p), max_new_tokens, tuple(p), ignore_eos, arrival_s=a)
            for p, a in zip(ids, arrivals, strict=True)]


def warm_up(eng: Engine) -> None:
    """One short request first, so that kernel compilation and library start-up are not
    counted in what the section measures. Not on the CPU: Triton's interpreter compiles
    nothing, and there each decode step costs about a second of interpreted kernel."""
    if eng.executor.device.type == "cpu":
        return
    eng.generate([[1, 2, 3, 4]], 2, ignore_eos=True)


def size(n: float) -> str:
    """Bytes in the largest unit that keeps a digit before the point: B, KiB, MiB or GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def plural(n: int, word: str) -> str:
    """``"1 request"``, ``"2 requests"``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def step_seconds(trace: Trace, kind: str) -> float:
    """Seconds spent in steps of ``kind`` (``prefill``, ``decode``), from the trace's clock."""
    t = np.asarray(trace.steps["time_s"], dtype=float)
    dt = np.diff(np.concatenate(([0.0], t)))
    return float(dt[np.asarray(trace.steps["kind"]) == kind].sum())


@dataclass
class Report:
    """What a section shows: sentences, one table, SGLang's log lines (the widgets render it).

    Attributes:
        setup: what ran. lines: sentences, every number computed. header, rows: the table.
        log: SGLang-format log lines worth reading.
        meaningless: which of the section's numbers mean nothing on the CPU stand-in (shown
            first, by :meth:`Setup.cpu_note`, when the tiny model ran).
    """

    setup: Setup
    lines: list[str] = field(default_factory=list)
    header: tuple[str, ...] = ()
    rows: list[tuple[object, ...]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    meaningless: str = ""

    @property
    def cpu_note(self) -> str:
        """The warning to show above the section on the CPU stand-in, or ""."""
        return self.setup.cpu_note(self.meaningless)
