"""A linear-attention hybrid's state slots: SGLang's own ``HybridReqToTokenPool`` (its
``MambaPool`` and slot free list) against :mod:`pagedkv.mem_cache.mamba_pool`.

Sequences (both releases): random request lives over 1-8 request rows and 1-8 state slots
(:mod:`drive_mamba`): batches of new requests, chunk continuations that keep their row and
slot, requests re-admitted with only their slot, finishes and retractions (slot and row
freed), row-only and slot-only frees, rows running out (None) and slots running out (SGLang's
assertion, pagedkv's ``OutOfMemoryError``). Compared after every step: every answer, each
request's row and slot, the rows' slots, both free lists in order, both available counts.

State bytes (0.5.23): the shapes, dtypes, layers and ``mamba_cache_per_req`` SGLang's
``Qwen3NextConfig.mamba2_cache_params`` computes at every attention-TP size that divides the
heads, and the conv and temporal bytes and ``mem_usage`` of the ``MambaPool`` it builds (meta
device), for the Qwen3-Next preset (the only linear-attention preset) and variants of its
config (heads, head dims, conv kernel, layer pattern, ``mamba_ssm_dtype``), against
:func:`pagedkv.configs.mamba_utils.gdn_cache_params` and :class:`MambaPool`.
"""

from __future__ import annotations

import json
from pathlib import Path

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import drive_mamba as D  # noqa: E402
import mamba_sglang  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402

from pagedkv.configs.mamba_utils import gdn_cache_params  # noqa: E402
from pagedkv.mem_cache.mamba_pool import MambaPool  # noqa: E402

RANDOM_CASES, BLOCK = 400, 200
PRESET = Path(__file__).parents[2] / "pagedkv" / "presets" / "models" / "qwen3-next-80b-a3b.json"
#: Config variants: (field, value) pairs over the preset's config, the preset itself first.
VARIANTS: list[dict] = [
    {}, {"mamba_ssm_dtype": "bfloat16"}, {"mamba_ssm_dtype": "float16"},
    {"mamba_ssm_dtype": "float32"}, {"linear_num_key_heads": 8},
    {"linear_num_value_heads": 16, "linear_num_key_heads": 8}, {"linear_key_head_dim": 64},
    {"linear_value_head_dim": 256}, {"linear_conv_kernel_dim": 2},
    {"full_attention_interval": 2}, {"full_attention_interval": 8, "num_hidden_layers": 40},
    {"num_hidden_layers": 24, "linear_num_value_heads": 64, "mamba_ssm_dtype": "bfloat16"},
]


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_sequences(block: int) -> None:
    release = sgl_boot.VERSION
    compare.compare_seeds("mamba slot pool", range(block * BLOCK, (block + 1) * BLOCK),
                          lambda seed: D.random_case(seed, sg.OLD),
                          lambda c: D.run(c, mamba_sglang.SglangSlots),
                          lambda c: D.run(c, D.PagedkvSlots, release))


def test_the_cases_reach_every_outcome() -> None:
    """The random cases run out of rows, run out of slots, continue chunks and re-admit
    slot-only requests (else the comparison above would prove less than it says)."""
    seen = {"rows out": 0, "slots out": 0, "chunk": 0, "slot only": 0}
    for seed in range(RANDOM_CASES):
        for rec in D.run(D.random_case(seed, sg.OLD), D.PagedkvSlots, sgl_boot.VERSION)[1:]:
            step = rec if isinstance(rec, dict) else rec[0]
            if isinstance(step, dict):
                seen["rows out"] += step["alloc"] is None
                seen["slots out"] += step["alloc"] == "no state slot"
                if isinstance(step["alloc"], list):
                    seen["chunk"] += "chunk" in step["kinds"]
                    seen["slot only"] += "slot only" in step["kinds"]
    assert min(seen.values()) >= 30, seen


def test_sglang_fails_on_slots_after_taking_rows() -> None:
    """Why a case ends at "no state slot": SGLang's assertion fires after the rows are bound
    (pagedkv checks first and changes nothing, its scheduler having checked as SGLang's
    does)."""
    s = mamba_sglang.SglangSlots(4, 1)
    assert s.alloc(["a", "b"]) == "no state slot"
    compare.same("mamba slot pool (directed)", s.state()["available"][0], 2,
                 "SGLang took both rows before its slot assertion")


def _variants() -> list[tuple[dict, int, int]]:
    base = json.loads(PRESET.read_text())
    rng = np.random.default_rng(31)
    out = []
    for change in VARIANTS:
        config = {**base, **change}
        k, v = config["linear_num_key_heads"], config["linear_num_value_heads"]
        for tp in (t for t in (1, 2, 4, 8, 16) if not (k % t or v % t)):
            out.append((config, tp, int(rng.integers(1, 1000))))
    return out


@pytest.mark.skipif(sg.OLD, reason="0.5.9's state bytes are compared by its pool sizing "
                    "(test_pool_sizing_hybrid.py's 'Mamba Cache is allocated' lines)")
def test_state_bytes_are_sglangs() -> None:
    cases = _variants()
    assert len(cases) >= 40
    bad = []
    for config, tp, slots in cases:
        theirs = mamba_sglang.state_bytes(config, tp, slots)
        params = gdn_cache_params(config, tp)
        pool = MambaPool(slots, params)
        ours = {"conv": list(params.shape.conv), "temporal": params.shape.temporal,
                "dtypes": (params.conv_dtype, params.temporal_dtype), "layers": params.layers,
                "per_req": params.mamba_cache_per_req, "conv_bytes": pool.conv_state_bytes,
                "ssm_bytes": pool.ssm_state_bytes, "mem_usage": pool.mem_usage}
        compare.COUNTS["mamba state bytes"] += 1
        if ours != theirs:
            bad.append(f"tp={tp} slots={slots} {config}:\n  SGLang : {theirs}\n  pagedkv: {ours}")
    assert not bad, f"{len(bad)} of {len(cases)} disagree:\n" + "\n".join(bad[:3])
