"""Chapter 6's evidence about the paged decode kernel, kept out of the engine.

:mod:`pagedkv.layers.attention` holds what a run executes; this package holds what the book,
``bench/`` and the tests use to study it:

- ``cases``: :func:`random_decode_case`, seeded inputs on a shuffled pool.
- ``traffic``: the bytes a decode step must move; ``roofline``: the time that predicts per GPU.
- ``compiled`` and ``compile_matrix``: registers, shared memory and tensor-core use of every
  launched kernel, compiled for each target without a GPU.
- ``agreement``: kernel against reference, and the paged model against Hugging Face.
- ``baselines`` and ``provenance``: what ``bench/bench_decode.py`` compares against and records.
- ``paged_llama``: :class:`PagedLlamaRunner`, a Hugging Face Llama driven by hand on pagedkv's
  pools (imported on its own: it needs transformers).
- ``python -m pagedkv.lessons.kernel``: check the kernel against the reference, report GB/s.
"""

from __future__ import annotations

# Import the kernel package first: without CUDA it sets TRITON_INTERPRET=1, which must happen
# before anything here (or transformers) imports triton.
import pagedkv.layers.attention  # noqa: F401
from pagedkv.lessons.kernel.cases import DecodeCase, random_decode_case
from pagedkv.lessons.kernel.traffic import decode_bytes

__all__ = ["DecodeCase", "decode_bytes", "random_decode_case"]
