"""The SGLang releases pagedkv follows, as data: one frozen :class:`Release` per release.

pagedkv follows SGLang 0.5.23 (the newest release) by default and 0.5.9 (the release the
book was first written against) on request. Every behaviour that differs between them is
one field of :class:`Release`, named for the behaviour and documented in its metadata
(:mod:`pagedkv.release_behaviours`); the code reads fields and never compares release
names. This module holds the releases themselves, one :class:`Release` each
(:data:`RELEASES`). :func:`differences` turns the fields into the book's table of rules, and
``pagedkv.lessons.versions`` runs each field on one small case.

The public API takes a release name (``sglang_version="0.5.9"``) at its boundary and turns
it into a :class:`Release` once, with :func:`as_release`.
"""

from __future__ import annotations

from dataclasses import fields

from pagedkv.errors import bad_value
from pagedkv.release_behaviours import Release

# fa4's page size 128 holds only under these conditions (0.5.23 arg_groups/overrides.py
# _fa4_page_constraint; 0.5.9 server_args.py _handle_attention_backend_compatibility)
_FA4_WHEN_0523 = ("for a non-MLA model on sm_100 with `--speculative-eagle-topk` "
                  "(how many candidate tokens each draft step keeps in EAGLE, a "
                  "speculative-decoding method whose draft proposes a tree of tokens) unset or "
                  "at most 1, "
                  "whichever of the three backend flags names fa4")
_FA4_WHEN_0509 = "for a non-MLA model, only through `--prefill-attention-backend fa4`"
_BACKENDS = ("triton", "flashinfer", "fa3", "fa4", "trtllm_mha", "trtllm_mla", "flashmla", "aiter")

RELEASES: dict[str, Release] = {r.name: r for r in (
    Release(
        name="0.5.23",
        extra_page_per_request=True, ignore_eos_reserves_all=True,
        max_prefill_tokens_with_chunking=False, chunk_ends_on_page_boundary=True,
        prefill_log_raw_tokens=True, prefill_log_pending_tokens=True,
        cap_max_new_tokens_by_pool=True, allocatable_counts_free_rows=True,
        filter_finished_every_step=True, batch_full_only_when_busy=True,
        stop_pass_at_spent_budget=True, touch_waiting_prefixes=True, abort_last_request=True,
        reset_ratio_only_when_idle=True, group_prefill_frees=True,
        skip_finishing_decode_in_flight=True,
        req_pool_padding_row=True, req_pool_reuses_last_freed=True, free_order="row",
        evict_until_free=True, split_output_from_prompt=True,
        chunked_prefill_size_20_35_gib=4096, cuda_graph_max_bs_20_35_gib=(48, 160),
        prefill_cuda_graph_reserve=True, req_to_token_rows_are_cap=True,
        req_rows_from_final_pool=True, context_len_skips_layered_rope=True,
        null_head_dim_sized=True, multimodal_kv_reservation=True, sized_by_pool_configurator=True,
        swa_sized_by_configurator=True,
        swa_pool_lines_labelled=True,
        mamba_share_keeps_padding_slot=True, mamba_cap_warns=True,
        mamba_auto_extra_buffer=True, mamba_slots_taken_ahead=True, retract_log_counts_mamba_slots=True,
        cap_running_at_half_pool=True, page_pool_before_cap=True,
        kv_dtype_in_allocation_log=True,
        weights_leave_no_memory_error=True,
        attention_backends=(*_BACKENDS, "cutedsl_mla", "hpc_ops"),
        forced_page_sizes=(("flashmla", (64,), 64), ("trtllm_mla", (32, 64), 64),
                           ("cutedsl_mla", (32, 64), 64), ("trtllm_mha", (16, 32, 64, 128), 64),
                           ("hpc_ops", (64,), 64), ("fa4", (128,), 128, _FA4_WHEN_0523)),
        fa4_for_asymmetric_kv=True, flashinfer_avoids_attention_sinks=True,
        gpt_oss_aiter_on_rocm=True,
        dsa_attention_backend=("dsa", "flashmla_kv"), dsa_fp8_latent_profiled_as_stored=True),
    Release(
        name="0.5.9",
        extra_page_per_request=False, ignore_eos_reserves_all=False,
        max_prefill_tokens_with_chunking=True, chunk_ends_on_page_boundary=False,
        prefill_log_raw_tokens=False, prefill_log_pending_tokens=False,
        cap_max_new_tokens_by_pool=False, allocatable_counts_free_rows=False,
        filter_finished_every_step=False, batch_full_only_when_busy=False,
        stop_pass_at_spent_budget=False, touch_waiting_prefixes=False, abort_last_request=False,
        reset_ratio_only_when_idle=False, group_prefill_frees=False,
        skip_finishing_decode_in_flight=False,
        req_pool_padding_row=False, req_pool_reuses_last_freed=False, free_order="sorted",
        evict_until_free=False, split_output_from_prompt=False,
        chunked_prefill_size_20_35_gib=2048, cuda_graph_max_bs_20_35_gib=(24, 80),
        prefill_cuda_graph_reserve=False, req_to_token_rows_are_cap=False,
        req_rows_from_final_pool=False, context_len_skips_layered_rope=False,
        null_head_dim_sized=False, multimodal_kv_reservation=False,
        sized_by_pool_configurator=False,
        swa_sized_by_configurator=False,
        swa_pool_lines_labelled=False, mamba_share_keeps_padding_slot=False,
        mamba_cap_warns=False, mamba_auto_extra_buffer=False, mamba_slots_taken_ahead=False,
        retract_log_counts_mamba_slots=False, cap_running_at_half_pool=False,
        page_pool_before_cap=False,
        kv_dtype_in_allocation_log=False,
        weights_leave_no_memory_error=False,
        attention_backends=(*_BACKENDS, "cutlass_mla"),
        forced_page_sizes=(("flashmla", (64,), 64), ("cutlass_mla", (128,), 128),
                           ("trtllm_mla", (32, 64), 64), ("trtllm_mha", (16, 32, 64), 64),
                           ("fa4", (128,), 128, _FA4_WHEN_0509)),
        fa4_for_asymmetric_kv=False, flashinfer_avoids_attention_sinks=False,
        gpt_oss_aiter_on_rocm=False,
        dsa_attention_backend=("nsa", "flashmla_auto"), dsa_fp8_latent_profiled_as_stored=False),
)}

DEFAULT_RELEASE = RELEASES["0.5.23"]
SGLANG_VERSIONS = tuple(RELEASES)  # newest first
DEFAULT_SGLANG_VERSION = DEFAULT_RELEASE.name
BEHAVIOURS = tuple(f.name for f in fields(Release) if f.name != "name")


def as_release(sglang_version: object) -> Release:
    """The :class:`Release` named ``sglang_version`` (a :class:`Release` passes through).

    Raises:
        ConfigError: a name not in :data:`RELEASES` (the message lists them).
    """
    if isinstance(sglang_version, Release):
        return sglang_version
    if isinstance(sglang_version, str) and sglang_version in RELEASES:
        return RELEASES[sglang_version]
    raise bad_value("sglang_version", sglang_version, "one of " + ", ".join(RELEASES))


def check_sglang_version(sglang_version: object) -> str:
    """Return ``sglang_version`` if pagedkv follows it.

    Raises:
        ConfigError: anything but a name in :data:`RELEASES` (the message names them).
    """
    return as_release(sglang_version).name


def describe(release: Release, behaviour: str) -> str:
    """``release``'s value of ``behaviour`` in words (a flag through its ``shows`` metadata)."""
    meta = next(f.metadata for f in fields(Release) if f.name == behaviour)
    value = getattr(release, behaviour)
    if "shows" in meta:
        return meta["shows"][value]
    if "parts" in meta:  # a tuple whose positions mean different things: label each
        return ", ".join(f"{part}: {v}" for part, v in zip(meta["parts"], value, strict=True))
    if isinstance(value, tuple):
        return ", ".join(map(str, value)) if value and not isinstance(value[0], tuple) else \
            "; ".join(f"{b}: {'/'.join(map(str, ok))} -> {to}{f' ({when[0]})' if when else ''}"
                      for b, ok, to, *when in value)
    return str(value)


def differences(old: Release | None = None, new: Release | None = None
                ) -> tuple[tuple[str, str, str, str], ...]:
    """``(what, old's rule, new's rule, SGLang source)`` per behaviour where ``old`` (default
    the oldest release) and ``new`` (default :data:`DEFAULT_RELEASE`) differ, in field order."""
    old = old or RELEASES[SGLANG_VERSIONS[-1]]
    new = new or DEFAULT_RELEASE
    return tuple((f.metadata["what"], describe(old, f.name), describe(new, f.name),
                  f.metadata["source"])
                 for f in fields(Release)
                 if f.name != "name" and getattr(old, f.name) != getattr(new, f.name))
