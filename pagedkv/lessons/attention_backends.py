"""SGLang's attention backends as the KV pool sees them: which one a server picks by default,
whether its kernel is handed one index per token or one per page, and the page sizes some
of them force.

Nothing here runs a kernel; it is the book's record of SGLang's rules, checked against the
source of both releases pagedkv follows (paths as in the repository, ``python/sglang/...``):

- the default backend: 0.5.23 ``srt/arg_groups/model_override_base.py``
  ``get_default_attn_backend`` (called from ``srt/arg_groups/overrides.py``
  ``_attention_backend_default``); 0.5.9 ``srt/server_args.py``
  ``ServerArgs._handle_attention_backend_compatibility``;
- forced page sizes: 0.5.23 ``srt/arg_groups/overrides.py`` ``_mla_backend_page_constraints``,
  ``_fa4_page_constraint`` and ``_page_size_default``; 0.5.9 the same
  ``_handle_attention_backend_compatibility`` and ``ServerArgs._handle_page_size``. Both
  releases choose the backend before the page-size default, so a backend that forces a
  page size also sets it when ``--page-size`` is not given;
- how each backend indexes the pool: ``srt/layers/attention/triton_backend.py`` and
  ``flashinfer_backend.py`` build ``kv_indptr`` / ``kv_indices`` with one slot id per token
  (FlashInfer's wrappers are planned with page size 1 and ``kv_last_page_len`` all ones);
  ``flashattention_backend.py`` (FA3, FA4) hands its kernel ``req_to_token[:, ::page_size]
  // page_size``, one page id per page; ``trtllm_mha_backend.py``, ``trtllm_mla_backend.py``,
  ``flashmla_backend.py`` (and 0.5.9's ``cutlass_mla_backend.py``) take page tables too.

Where pagedkv simplifies: only models with multi-head (MHA/GQA) attention, no speculative
decoding, CUDA 12.8 or newer (older CUDA changes the Hopper and Blackwell choices), default
flags otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.releases import DEFAULT_SGLANG_VERSION, RELEASES, SGLANG_VERSIONS, Release, as_release

TOKEN, PAGE = "token", "page"


@dataclass(frozen=True)
class AttentionBackend:
    """One ``--attention-backend`` choice.

    Attributes:
        name: the flag's value, e.g. ``"flashinfer"``.
        indexes: ``"token"`` (the kernel gets one slot id per cached token) or ``"page"``
            (one page id per page); ``None`` where the book does not cover it.
        how: what SGLang hands the kernel, in words.
        source: the SGLang file (0.5.23 path; the same file in 0.5.9).

    Which releases offer it is ``Release.attention_backends`` (see :attr:`releases`).
    """

    name: str
    indexes: str | None
    how: str
    source: str

    @property
    def releases(self) -> tuple[str, ...]:
        """The names of the releases that offer it, newest first."""
        return tuple(n for n, r in RELEASES.items() if self.name in r.attention_backends)


_LAYERS = "python/sglang/srt/layers/attention/"
BACKENDS: dict[str, AttentionBackend] = {b.name: b for b in (
    AttentionBackend("triton", TOKEN, "kv_indptr / kv_indices: one slot id per token",
                     _LAYERS + "triton_backend.py"),
    AttentionBackend("flashinfer", TOKEN, "kv_indices of one slot id per token; the wrapper "
                     "is planned with page size 1 and kv_last_page_len = 1",
                     _LAYERS + "flashinfer_backend.py"),
    AttentionBackend("fa3", PAGE, "page_table = req_to_token[:, ::page_size] // page_size",
                     _LAYERS + "flashattention_backend.py"),
    AttentionBackend("fa4", PAGE, "the same page table as fa3",
                     _LAYERS + "flashattention_backend.py"),
    AttentionBackend("trtllm_mha", PAGE, "a page table (0.5.23 builds it on the GPU, "
                     "build_trtllm_mha_page_table)", _LAYERS + "trtllm_mha_backend.py"),
    AttentionBackend("trtllm_mla", PAGE, "block_kv_indices: one page id per page",
                     _LAYERS + "trtllm_mla_backend.py"),
    AttentionBackend("flashmla", PAGE, "block_kv_indices: one page id per page of 64",
                     _LAYERS + "flashmla_backend.py"),
    AttentionBackend("cutlass_mla", PAGE, "block_kv_indices: one page id per page of 128",
                     _LAYERS + "cutlass_mla_backend.py"),
    AttentionBackend("cutedsl_mla", PAGE, "a page table (pages of 32 or 64)",
                     _LAYERS + "cutedsl_mla_backend.py"),
    AttentionBackend("hpc_ops", None, "pages of 64 (Hopper only)", _LAYERS + "hpc_ops_backend.py"),
    AttentionBackend("aiter", None, "AMD's kernels: a per-token or a paged table, by mode",
                     _LAYERS + "aiter_backend.py"),
)}


@dataclass(frozen=True)
class GPUClass:
    """A family of GPUs that SGLang treats alike when it picks a backend."""

    label: str
    examples: str
    sm: int  # compute capability times 10 (90 for sm_90); 0 for AMD
    platform: str = "cuda"


GPU_CLASSES = (
    GPUClass("Hopper (sm_90)", "H100, H200, H20", 90),
    GPUClass("Blackwell data centre (sm_100)", "B200, GB200, B300", 100),
    GPUClass("Blackwell consumer (sm_120)", "RTX 5090", 120),
    GPUClass("Ada (sm_89)", "L4, L40, RTX 4090", 89),
    GPUClass("Ampere (sm_80, sm_86)", "A100, A10", 80),
    GPUClass("Turing (sm_75)", "T4", 75),
    GPUClass("AMD (ROCm)", "MI300X", 0, "rocm"),
)


def default_attention_backend(sm: int, sglang_version: str | Release = DEFAULT_SGLANG_VERSION, *,
                              platform: str = "cuda", flashinfer_installed: bool = True,
                              attention_sinks: bool = False,
                              asymmetric_kv: bool = False) -> str:
    """The ``--attention-backend`` SGLang picks when none is given, for an MHA/GQA model.

    Args:
        sm: compute capability times 10 (``90`` for an H100); ignored on ROCm.
        sglang_version: a name in :data:`~pagedkv.releases.RELEASES` (default 0.5.23) or a
            :class:`~pagedkv.releases.Release`.
        platform: ``"cuda"`` or ``"rocm"``.
        flashinfer_installed: whether ``flashinfer`` imports (the SGLang wheel depends on it).
        attention_sinks: the model has attention sinks and no backend rule of its own, as
            MiMo-V2-Flash below sm_100 (0.5.23 then avoids FlashInfer:
            ``Release.flashinfer_avoids_attention_sinks``). gpt-oss has sinks but its own rule
            in both releases: :func:`gpt_oss_attention_backend`.
        asymmetric_kv: K and V rows differ in width (0.5.23 then picks fa4 on sm_100:
            ``Release.fa4_for_asymmetric_kv``).

    Returns:
        ``"fa3"`` on Hopper, ``"trtllm_mha"`` on sm_100 (``"fa4"`` for asymmetric K/V in
        0.5.23), ``"aiter"`` on ROCm, else ``"flashinfer"`` if installed (and, in 0.5.23, the
        model has no attention sinks), else ``"triton"``.

    Raises:
        ConfigError: a bad ``sm``, ``platform`` or ``sglang_version``.

    Source: 0.5.23 ``get_default_attn_backend``; 0.5.9
    ``ServerArgs._handle_attention_backend_compatibility`` (see the module docstring).
    """
    release = as_release(sglang_version)
    if platform == "rocm":
        return "aiter"
    if platform != "cuda":
        raise bad_value("platform", platform, '"cuda" or "rocm"')
    major = check_positive_int("sm", sm, minimum=70) // 10
    if major == 9:
        return "fa3"
    if major == 10:
        return "fa4" if release.fa4_for_asymmetric_kv and asymmetric_kv else "trtllm_mha"
    if flashinfer_installed and not (release.flashinfer_avoids_attention_sinks and attention_sinks):
        return "flashinfer"
    return "triton"


def gpt_oss_attention_backend(sm: int, sglang_version: str | Release = DEFAULT_SGLANG_VERSION,
                              *, platform: str = "cuda") -> str:
    """The ``--attention-backend`` SGLang picks for gpt-oss when none is given.

    gpt-oss has its own rule, which runs before :func:`default_attention_backend`'s: trtllm_mha
    on sm_100 (B200, GB200, B300), fa3 on sm_90, triton on every other NVIDIA GPU (consumer
    Blackwell, sm_120, included); on ROCm aiter in 0.5.23, triton in 0.5.9
    (``Release.gpt_oss_aiter_on_rocm``). Intel, CPU and Apple back-ends are left out.

    Args:
        sm: compute capability times 10 (``120`` for an RTX 5090); ignored on ROCm.
        sglang_version: a name in :data:`~pagedkv.releases.RELEASES` or a Release.
        platform: ``"cuda"`` or ``"rocm"``.

    Raises:
        ConfigError: a bad ``sm``, ``platform`` or ``sglang_version``.

    Source: 0.5.23 ``srt/arg_groups/model_overrides/gpt_oss.py`` ``_gpt_oss_overrides``; 0.5.9
    ``srt/server_args.py`` ``ServerArgs._handle_model_specific_adjustments``
    (``is_sm100_supported``, ``is_sm90_supported``, both false off CUDA).
    """
    release = as_release(sglang_version)
    if platform == "rocm":
        return "aiter" if release.gpt_oss_aiter_on_rocm else "triton"
    if platform != "cuda":
        raise bad_value("platform", platform, '"cuda" or "rocm"')
    major = check_positive_int("sm", sm, minimum=70) // 10
    return {9: "fa3", 10: "trtllm_mha"}.get(major, "triton")


#: The book's names for the backends gpt-oss's rule picks.
_SHOWN = {"fa3": "FA3", "trtllm_mha": "TRT-LLM", "triton": "Triton", "aiter": "aiter"}


def gpt_oss_rule_words() -> str:
    """gpt-oss's rule (:func:`gpt_oss_attention_backend`) in the book's words, per GPU class of
    :data:`GPU_CLASSES` and per release where they differ; chapters 3 and 6 both print it."""
    newest, oldest = RELEASES[SGLANG_VERSIONS[0]], RELEASES[SGLANG_VERSIONS[-1]]
    parts, rest = [], []
    for g in GPU_CLASSES:
        new, old = (gpt_oss_attention_backend(g.sm or 80, r, platform=g.platform)
                    for r in (newest, oldest))
        if g.platform != "cuda":
            same = f"{_SHOWN[new]} in both releases" if new == old else (
                f"{_SHOWN[new]} in {newest.name}, {_SHOWN[old]} in {oldest.name}")
            amd = f"on AMD GPUs {same}"
        elif new != old:
            raise AssertionError(f"the releases differ on {g.label}; say so per release")
        elif new == "triton":
            rest.append(g)
        else:
            parts.append(f"{_SHOWN[new]} on {g.label.split(' (')[0]} GPUs (sm_{g.sm}: {g.examples})")
    blackwell = next(g for g in rest if g.sm >= 100)
    parts.append(f"Triton on every other NVIDIA GPU, the {blackwell.examples} "
                 f"({blackwell.label.split(' (')[0]}, sm_{blackwell.sm}) included")
    return ", ".join(parts) + "; " + amd


def forced_page_sizes(backend: str, sglang_version: str | Release = DEFAULT_SGLANG_VERSION
                      ) -> tuple[tuple[int, ...], int] | None:
    """``(page sizes the backend accepts, the size any other becomes)``, or None when the
    backend takes any page size (``Release.forced_page_sizes``). Raises ConfigError for a
    backend the release lacks. Some rules hold only under conditions:
    :func:`forced_page_size_when`."""
    rule = _rule(backend, sglang_version)
    return None if rule is None else (rule[1], rule[2])


def forced_page_size_when(backend: str, sglang_version: str | Release = DEFAULT_SGLANG_VERSION
                          ) -> str:
    """When ``backend``'s forced page size holds, in words (``""``: whenever the backend runs,
    or it forces none). fa4's 128 has conditions in both releases: 0.5.23
    ``_fa4_page_constraint`` (non-MLA, sm_100, EAGLE topk <= 1); 0.5.9
    ``_handle_attention_backend_compatibility`` (non-MLA, ``--prefill-attention-backend fa4``).
    Raises ConfigError for a backend the release lacks."""
    rule = _rule(backend, sglang_version)
    return rule[3] if rule is not None and len(rule) > 3 else ""


def _rule(backend: str, sglang_version: str | Release) -> tuple | None:
    """The release's ``forced_page_sizes`` entry for ``backend`` (None: it forces none)."""
    release = as_release(sglang_version)
    if backend not in BACKENDS or backend not in release.attention_backends:
        offered = sorted(n for n in BACKENDS if n in release.attention_backends)
        raise bad_value("backend", backend,
                        f"a backend of SGLang {release.name}: {', '.join(offered)}")
    return next((rule for rule in release.forced_page_sizes if rule[0] == backend), None)


def resolve_page_size(backend: str, page_size: int | None = None,
                      sglang_version: str | Release = DEFAULT_SGLANG_VERSION) -> int:
    """The page size SGLang runs with, given ``--page-size`` (None: not given) and the backend.

    ``backend`` is the backend of both phases (``--attention-backend``, or the same value for
    ``--prefill-attention-backend`` and ``--decode-attention-backend``; 0.5.9 forces fa4's
    128 only through the prefill flag). A backend that accepts only some sizes turns any
    other, and an unset one, into its default (a warning in SGLang's log); otherwise an unset
    page size becomes 1. Where the rule has conditions (:func:`forced_page_size_when`: fa4's
    128, for a non-MLA model, in 0.5.23 on sm_100 with EAGLE topk <= 1, in 0.5.9 through the
    prefill flag), this function assumes they hold.

    Raises:
        ConfigError: ``page_size`` below 1, or a backend the release lacks.

    Source: see the module docstring.
    """
    if page_size is not None:
        check_positive_int("page_size", page_size)
    rule = forced_page_sizes(backend, sglang_version)
    if rule is None:
        return 1 if page_size is None else page_size
    accepted, forced = rule
    return page_size if page_size in accepted else forced


def backend_rows() -> list[tuple[GPUClass, str, str]]:
    """Per :data:`GPU_CLASSES` entry: ``(class, the newest release's default, the oldest's)``
    (0.5.23 and 0.5.9) for a plain MHA model (no attention sinks, equal K and V widths) with
    FlashInfer installed."""
    newest, oldest = SGLANG_VERSIONS[0], SGLANG_VERSIONS[-1]
    return [(g, default_attention_backend(g.sm or 80, newest, platform=g.platform),
             default_attention_backend(g.sm or 80, oldest, platform=g.platform))
            for g in GPU_CLASSES]
