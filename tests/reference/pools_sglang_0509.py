"""SGLang 0.5.9's own KV-pool sizing for a ``config.json`` dict, run on this CPU.

0.5.9 sizes the pools inside ``ModelRunner`` (``model_executor/model_runner_kv_cache_mixin.py``,
``ModelRunnerKVCacheMixin``), with no configurator class to drive as 0.5.23 has
(:mod:`pools_sglang`). What runs here is 0.5.9's own code on a ``ModelRunner`` made with
``object.__new__`` (its ``__init__`` would start the distributed runtime and load the weights),
given the attributes ``ModelRunner.__init__`` / ``initialize`` / ``load_model`` would have set:

- ``ModelConfig`` parses the config (written to a temporary folder, so transformers' config
  classes fill their defaults as at server start), as ``ModelConfig.from_server_args`` builds it;
- ``ModelRunner.configure_kv_cache_dtype`` (real) turns ``--kv-cache-dtype`` into the torch dtype;
- ``ModelRunner.init_memory_pool`` (real) runs ``profile_max_num_token``,
  ``get_cell_size_per_token``, ``handle_max_mamba_cache`` and ``set_num_tokens_hybrid_swa``
  (all real), applies ``--max-total-tokens`` and the page rounding, and builds the request table
  and the KV pools, on torch's ``meta`` device so that the pools print their own allocation
  lines without taking memory; ``mambaish_config`` and the other model-family properties are
  ``ModelRunner``'s own;
- ``max_running_requests`` is the one expression ``ModelRunner.initialize`` computes after
  ``init_memory_pool`` (``min(tokens // 2 or --max-running-requests, req_to_token_pool.size)``);
  ``initialize`` itself cannot run without a model, so that expression is restated here.

Replaced, as nothing on a CPU can answer them: the free-memory reading after the weights
(``get_available_gpu_memory`` returns the caller's ``post`` GiB), the world group (one rank:
no all-reduce) and the attention-TP size (``get_attention_tp_size`` returns the case's ``tp``,
which the parallel groups would give). ``ServerArgs`` is a real one with its field defaults,
made without ``__post_init__`` (which would read the model from the hub), and the case's flags.
The sliding window ``load_model`` resolves from the model class (gpt-oss:
``get_attention_sliding_window_size`` = ``sliding_window - 1``; importing the class needs GPU
kernels) is given by the caller; without one, ``load_model``'s other branches are followed
(the config's window for a sliding-window hybrid, else ``attention_chunk_size``).
"""

from __future__ import annotations

import types
from typing import Any

import sgl_boot

sgl_boot.load()

import torch  # noqa: E402
from sgl_model_config import ModelConfigs, captured_logs  # noqa: E402
from sgl_standins import field_defaults  # noqa: E402
from sglang.srt.configs.model_config import AttentionArch, ModelConfig  # noqa: E402
from sglang.srt.layers import dp_attention as dp_mod  # noqa: E402
from sglang.srt.model_executor import model_runner_kv_cache_mixin as mixin_mod  # noqa: E402
from sglang.srt.model_executor.model_runner import ModelRunner  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

#: The loggers whose lines sizing and the pools print (warnings go to the root logger).
LOGGERS = ("sglang.srt.mem_cache.memory_pool", "sglang.srt.model_executor.model_runner_kv_cache_mixin",
           "sglang.srt.mem_cache.swa_memory_pool", "")


#: SGLang's ``ModelConfig`` for a config dict (parsed once per distinct config and flags).
model_config = ModelConfigs("pagedkv-pools-0509-")


def readable_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` as 0.5.9's transformers (4.57.1) can read it here: Kimi K2's ``kimi_k2`` type
    is known only through the checkpoint's own code (``auto_map``: ``DeepseekV3Config``), which
    ``--trust-remote-code`` would import from the checkpoint folder; transformers' own
    ``DeepseekV3Config`` stands in for it."""
    config = dict(config)
    if config.get("model_type") == "kimi_k2":
        config.pop("auto_map", None)
        config["model_type"] = "deepseek_v3"
    return config


def server_args(**flags: Any) -> ServerArgs:
    """A real 0.5.9 ``ServerArgs`` with its field defaults and ``flags`` (no ``__post_init__``)."""
    sa = field_defaults(ServerArgs)
    for name, value in flags.items():
        if not hasattr(sa, name):
            raise AttributeError(f"0.5.9's ServerArgs has no {name}")
        setattr(sa, name, value)
    return sa


def _sliding_window(mc: ModelConfig, window: int | None) -> int | None:
    """``ModelRunner.load_model``'s window: the model class's (``window``, from the caller),
    else a sliding-window hybrid's config window, else ``attention_chunk_size``."""
    if window is not None:
        return window
    if mc.is_hybrid_swa and mc.sliding_window_size is not None:
        return mc.sliding_window_size
    return mc.attention_chunk_size


def runner(config: dict[str, Any], *, mem_fraction_static: float, tp: int, page_size: int,
           kv_cache_dtype: str, sliding_window_size: int | None = None,
           **flags: Any) -> ModelRunner:
    """A ``ModelRunner`` as ``initialize`` leaves it just before ``init_memory_pool``."""
    mc = model_config(config, bool(flags.get("disable_hybrid_swa_memory")),
                      flags.pop("enable_multimodal", None))
    sa = server_args(mem_fraction_static=mem_fraction_static, tp_size=tp, page_size=page_size,
                     kv_cache_dtype=kv_cache_dtype, device="cpu", **flags)
    mr = object.__new__(ModelRunner)
    layers = max(mc.num_hidden_layers, mc.num_attention_layers)
    mr.__dict__.update(
        model_config=mc, server_args=sa, device="cpu", gpu_id=0, tp_size=tp, tp_rank=0,
        dp_size=1, pp_size=1, page_size=page_size, mem_fraction_static=mem_fraction_static,
        is_draft_worker=False, spec_algorithm=SpeculativeAlgorithm.NONE,
        is_hybrid_swa=mc.is_hybrid_swa, is_hybrid_swa_compress=mc.is_hybrid_swa_compress,
        use_mla_backend=mc.attention_arch == AttentionArch.MLA, dtype=mc.dtype,
        model=types.SimpleNamespace(), start_layer=0, end_layer=layers,
        num_effective_layers=layers, req_to_token_pool=None, token_to_kv_pool_allocator=None,
        sliding_window_size=_sliding_window(mc, sliding_window_size))
    mr.configure_kv_cache_dtype()
    return mr


def pool_sizes(config: dict[str, Any], *, pre_gib: float, post_gib: float,
               mem_fraction_static: float, tp: int = 1, page_size: int = 1,
               kv_cache_dtype: str = "auto", sliding_window_size: int | None = None,
               **flags: Any) -> dict[str, Any]:
    """What SGLang 0.5.9 sizes on one attention-TP rank: the bytes per token, the token
    counts (full and SWA), the state slots, the request table, ``max_running_requests`` and
    the lines logged from sizing to the pools, or the start-up error's first words
    (``"TypeError"`` where 0.5.9's sizing fails on a ``v_head_dim`` left None; the bytes per
    token are then None)."""
    mr = runner(config, mem_fraction_static=mem_fraction_static, tp=tp, page_size=page_size,
                kv_cache_dtype=kv_cache_dtype, sliding_window_size=sliding_window_size, **flags)
    with captured_logs(LOGGERS) as handler:
        names = ("get_available_gpu_memory", "get_world_group", "get_attention_tp_size")
        saved = {name: getattr(mixin_mod, name) for name in names}
        mixin_mod.get_available_gpu_memory = lambda *a, **k: float(post_gib)
        mixin_mod.get_world_group = lambda: types.SimpleNamespace(world_size=1, cpu_group=None)
        mixin_mod.get_attention_tp_size = lambda: tp
        tp_size, dp_mod.get_attention_tp_size = dp_mod.get_attention_tp_size, lambda: tp  # state shapes
        had_meta = hasattr(torch, "meta")
        if not had_meta:  # the pools ask the device module for streams; meta has none
            torch.meta = torch.cpu
        out: dict[str, Any] = {"context_len": mr.model_config.context_len, "cell_size": None}
        try:
            cell_size = mr.get_cell_size_per_token  # noted as profile_max_num_token asks it

            def noted(num_layers: int) -> int:
                out["cell_size"] = cell_size(num_layers)
                return out["cell_size"]

            mr.get_cell_size_per_token = noted
            mr.device = "meta"
            try:
                mr.init_memory_pool(pre_gib)
            except (ValueError, RuntimeError) as exc:
                out["error"] = str(exc).split(":")[0].split(".")[0]
                return out
            except TypeError:  # a Mistral/Mixtral config without head_dim: v_head_dim is None
                out["error"] = "TypeError"
                return out
            sa = mr.server_args
            out["max_total_num_tokens"] = mr.max_total_num_tokens
            out["swa_max_total_num_tokens"] = (mr.swa_max_total_num_tokens if mr.is_hybrid_swa
                                               else None)
            out["max_mamba_cache_size"] = (sa.max_mamba_cache_size
                                           if mr.mambaish_config is not None else None)
            out["req_to_token_size"] = mr.req_to_token_pool.size
            # ModelRunner.initialize, right after init_memory_pool (dp_size 1):
            out["max_running_requests"] = min(
                mr.max_total_num_tokens // 2 if sa.max_running_requests is None
                else sa.max_running_requests // mr.dp_size, mr.req_to_token_pool.size)
            if out["max_running_requests"] == 0:  # TpModelWorker.__init__ asserts next
                out["error"] = "max_running_request is zero"
        finally:
            for name, fn in saved.items():
                setattr(mixin_mod, name, fn)
            dp_mod.get_attention_tp_size = tp_size
            if not had_meta:
                del torch.meta
    # the closing "Memory pool end. avail mem=..." line reads the (stubbed) free memory
    out["log_lines"] = [x for x in handler.lines if not x.startswith("Memory pool end.")]
    return out
