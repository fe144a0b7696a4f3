"""SGLang's start-up defaults per card: its own ``ServerArgs`` against :mod:`pagedkv.server_args`.

SGLang resolves ``chunked_prefill_size``, the decode CUDA graphs' largest batch, the prefill
CUDA-graph sizes (0.5.23) and the default ``mem_fraction_static`` from the GPU's total memory
when a server starts. Here a real ``ServerArgs`` is built for a dense text model (Llama-3-8B's
``config.json``) with only the memory reading replaced, for every GPU preset and a sweep of
other sizes and tensor-parallel sizes. 0.5.23 captures prefill graphs by default on CUDA
only; this CPU is not CUDA, so the test sets the default backend as a CUDA machine gets it
(``breakable``) and, separately, ``disabled`` (what a ROCm card gets).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from pagedkv.gpus import GPU_PRESETS  # noqa: E402
from pagedkv.server_args import (  # noqa: E402
    default_mem_fraction_static,
    gpu_memory_defaults,
    prefill_cuda_graph_size_runs,
    prefill_cuda_graph_sizes,
)

VERSION = sgl_boot.VERSION
MODEL = Path(__file__).parents[2] / "pagedkv" / "presets" / "models" / "llama-3-8b.json"
rng = np.random.default_rng(0)
SIZES = sorted({g.memory_mib for g in GPU_PRESETS.values()}
               | {int(m) for m in rng.integers(8 * 1024, 200 * 1024, 24)}
               | {20 * 1024 - 1, 20 * 1024, 35 * 1024, 60 * 1024, 60 * 1024 + 1, 160 * 1024})


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("llama-3-8b")
    shutil.copy(MODEL, folder / "config.json")
    return str(folder)


def sglang_defaults(model_dir: str, memory_mib: int, tp: int,
                    prefill_backend: str) -> tuple[int, int, int, float]:
    """(chunk, decode graph max batch, prefill graph sizes, f) as SGLang resolves them."""
    if VERSION == "0.5.9":
        import sglang.srt.server_args as SA

        SA.get_device_memory_capacity = lambda *a, **k: memory_mib
        sa = SA.ServerArgs(model_path=model_dir, device="cuda", tp_size=tp)
        return sa.chunked_prefill_size, sa.cuda_graph_max_bs, 0, sa.mem_fraction_static
    import sglang.srt.arg_groups.memory_hook as MH
    import sglang.srt.model_executor.cuda_graph_config as CGC
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.server_args import ServerArgs

    MH.get_device_memory_capacity = lambda *a, **k: memory_mib
    CGC.default_prefill_backend = lambda: prefill_backend
    sa = ServerArgs(model_path=model_dir, device="cuda", tp_size=tp)
    sa.resolve_once()
    v = resolved_view(sa)
    graphs = v.cuda_graph_config
    n_prefill = len(graphs.prefill.bs or []) if graphs.prefill.backend != "disabled" else 0
    return v.chunked_prefill_size, graphs.decode.max_bs, n_prefill, v.mem_fraction_static


def pagedkv_defaults(memory_mib: int, tp: int, prefill_graph: bool) -> tuple[int, int, int, float]:
    chunk, graph_bs = gpu_memory_defaults(memory_mib, tp, VERSION)
    n_prefill = len(prefill_cuda_graph_sizes(chunk)) if VERSION != "0.5.9" and prefill_graph else 0
    f = default_mem_fraction_static(memory_mib, tp, sglang_version=VERSION,
                                    prefill_cuda_graph=prefill_graph)
    return chunk, graph_bs, n_prefill, f


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("prefill_graph", [True, False] if VERSION != "0.5.9" else [True])
def test_defaults_per_card(model_dir: str, tp: int, prefill_graph: bool) -> None:
    backend = "breakable" if prefill_graph else "disabled"
    for memory_mib in SIZES:
        theirs = sglang_defaults(model_dir, memory_mib, tp, backend)
        ours = pagedkv_defaults(memory_mib, tp, prefill_graph)
        compare.same("server defaults", theirs, ours,
                     f"{memory_mib} MiB, tp {tp}, prefill graphs {backend}")


@pytest.mark.parametrize("chunk", [-1, 1024, 2048, 6144, 12288, 32768])
def test_a_users_chunk_sets_the_default_fraction(model_dir: str, chunk: int) -> None:
    """``--chunked-prefill-size`` given by the user replaces the card's in SGLang's reserve
    (and, in 0.5.23, in the prefill graph sizes); -1 reserves for ``max_prefill_tokens``."""
    for memory_mib in (15360, 23034, 40960, 81559, 143771, 196592):
        if VERSION == "0.5.9":
            import sglang.srt.server_args as SA

            SA.get_device_memory_capacity = lambda *a, m=memory_mib, **k: m
            sa = SA.ServerArgs(model_path=model_dir, device="cuda", chunked_prefill_size=chunk)
            theirs = (sa.chunked_prefill_size, sa.mem_fraction_static)
        else:
            import sglang.srt.arg_groups.memory_hook as MH
            import sglang.srt.model_executor.cuda_graph_config as CGC
            from sglang.srt.arg_groups.overrides import resolved_view
            from sglang.srt.server_args import ServerArgs

            MH.get_device_memory_capacity = lambda *a, m=memory_mib, **k: m
            CGC.default_prefill_backend = lambda: "breakable"
            sa = ServerArgs(model_path=model_dir, device="cuda", chunked_prefill_size=chunk)
            sa.resolve_once()
            v = resolved_view(sa)
            theirs = (v.chunked_prefill_size, v.mem_fraction_static)
        ours = (chunk, default_mem_fraction_static(memory_mib, chunked_prefill_size=chunk,
                                                   sglang_version=VERSION))
        compare.same("server defaults", theirs, ours, f"{memory_mib} MiB, chunk {chunk}")


@pytest.mark.skipif(VERSION == "0.5.9", reason="0.5.9 captures no prefill graphs by default")
@pytest.mark.parametrize("max_bs", [1, 4, 100, 2048, 4096, 4608, 5000, 8192, 16384])
def test_prefill_graph_sizes_and_the_runs_the_book_lists(max_bs: int) -> None:
    """Chapter 1 lists the prefill sizes as runs of one step: they expand to SGLang's list."""
    from sglang.srt.arg_groups.cuda_graph_hook import generate_prefill_cuda_graph_batch_sizes

    theirs = generate_prefill_cuda_graph_batch_sizes(max_bs)
    expanded = [n for a, b, step in prefill_cuda_graph_size_runs(max_bs)
                for n in (range(a, b + 1, step) if step else [a])]
    compare.same("server defaults", theirs, prefill_cuda_graph_sizes(max_bs), f"max_bs {max_bs}")
    compare.same("server defaults", theirs, expanded, f"max_bs {max_bs}, as runs")


@pytest.mark.parametrize("disable", [False, True])
def test_the_overlap_loop_is_the_default(model_dir: str, disable: bool) -> None:
    """Both releases run ``event_loop_overlap`` unless ``--disable-overlap-schedule`` is
    given (a dense model on one 80 GB card): :class:`SchedulerConfig`'s default is theirs."""
    from pagedkv.managers.config import SchedulerConfig

    flags = {"disable_overlap_schedule": True} if disable else {}
    if VERSION == "0.5.9":
        import sglang.srt.server_args as SA

        SA.get_device_memory_capacity = lambda *a, **k: 81559
        theirs = SA.ServerArgs(model_path=model_dir, device="cuda", **flags).disable_overlap_schedule
    else:
        import sglang.srt.arg_groups.memory_hook as MH
        from sglang.srt.arg_groups.overrides import resolved_view
        from sglang.srt.server_args import ServerArgs

        MH.get_device_memory_capacity = lambda *a, **k: 81559
        sa = ServerArgs(model_path=model_dir, device="cuda", **flags)
        sa.resolve_once()
        theirs = resolved_view(sa).disable_overlap_schedule
    assert theirs is disable
    assert SchedulerConfig(**flags).disable_overlap_schedule is disable
    assert SchedulerConfig(sglang_version=VERSION).disable_overlap_schedule is False


def test_triton_attention_num_kv_splits_default_and_on_amd(model_dir: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``--triton-attention-num-kv-splits`` as each release resolves it, on a CUDA card and on
    an AMD (HIP) one: the constants chapter 6 prints. The platform is the one reading replaced
    (0.5.23: ``platform_hook.get_platform``; 0.5.9: ``server_args.is_hip``)."""
    from pagedkv.server_args import (
        TRITON_ATTENTION_NUM_KV_SPLITS,
        TRITON_ATTENTION_NUM_KV_SPLITS_AMD,
    )

    if VERSION != "0.5.9":
        from sglang.srt.arg_groups import platform_hook as PH

        real = PH.get_platform()

        class Platform:
            """The platform as SGLang reads it, ``is_hip`` as the case says."""

            is_hip = False

            def __getattr__(self, name: str) -> object:
                return getattr(real, name)

    theirs = []
    for hip in (False, True):
        if VERSION == "0.5.9":
            import sglang.srt.server_args as SA

            monkeypatch.setattr(SA, "get_device_memory_capacity", lambda *a, **k: 81559)
            sa = SA.ServerArgs(model_path=model_dir, device="cuda")
            monkeypatch.setattr(SA, "is_hip", lambda hip=hip: hip)
            sa._handle_amd_specifics()  # what __post_init__ runs, with the platform replaced
            theirs.append(sa.triton_attention_num_kv_splits)
        else:
            import sglang.srt.arg_groups.memory_hook as MH
            from sglang.srt.arg_groups.overrides import resolved_view
            from sglang.srt.server_args import ServerArgs

            Platform.is_hip = hip
            monkeypatch.setattr(MH, "get_device_memory_capacity", lambda *a, **k: 81559)
            monkeypatch.setattr(PH, "get_platform", Platform)
            sa = ServerArgs(model_path=model_dir, device="cuda")
            sa.resolve_once()
            theirs.append(resolved_view(sa).triton_attention_num_kv_splits)
    compare.same("server defaults", theirs,
                 [TRITON_ATTENTION_NUM_KV_SPLITS, TRITON_ATTENTION_NUM_KV_SPLITS_AMD],
                 "triton_attention_num_kv_splits (CUDA, AMD)")
