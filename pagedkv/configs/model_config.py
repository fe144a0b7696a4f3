"""A model's KV-cache geometry and weight size, read from a Hugging Face ``config.json``.

The fields that decide KV memory are few: layers ``L``, KV heads ``H_kv``, ``head_dim``
(and ``v_head_dim``), or for MLA models the compressed latent ``kv_lora_rank +
qk_rope_head_dim``. Everything else in a config only matters for the weight size.

Follows SGLang ``python/sglang/srt/configs/model_config.py`` (``ModelConfig``:
``get_num_kv_heads``, ``head_dim``, MLA detection) and 0.5.23
``srt/model_executor/pool_configurator.py`` (``DefaultPoolConfigurator._compute_cell_size``).
Which models have one such pool, and the refusal for the others, is
:mod:`pagedkv.configs.model_family`; the weight size comes from the checkpoint (:mod:`pagedkv.weights`);
the fields are read from ``config.json`` by :mod:`pagedkv.configs.config_json`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pagedkv.configs.config_json import spec_fields
from pagedkv.configs.dsa_config import indexer_bytes_per_token, latent_bytes_per_token
from pagedkv.configs.model_family import text_config
from pagedkv.configs.model_hybrid import gdn_state_bytes
from pagedkv.configs.moe_config import active_params
from pagedkv.errors import ConfigError, bad_value, check_positive_int
from pagedkv.units import kv_dtype_bytes
from pagedkv.weights import (
    count_parameters,
    count_routed_expert_parameters,
    preset_param_counts,
    preset_routed_expert_counts,
)

if TYPE_CHECKING:
    from pagedkv.releases import Release


@dataclass(frozen=True)
class ModelSpec:
    """What pagedkv needs to know about a model, read from its ``config.json``.

    Attributes:
        name: preset name or the config's path.
        num_hidden_layers: ``L``.
        num_attention_heads: query heads ``H_q``.
        num_key_value_heads: KV heads ``H_kv`` (``H_q`` when the config omits it: MHA).
        head_dim: K head size; taken from ``head_dim`` when the config gives it, never
            assumed to be ``hidden_size / H_q`` then (Qwen3-4B: 128, not 2560 / 32 = 80).
        v_head_dim: V head size (equal to ``head_dim`` outside MLA; MLA: ``v_head_dim``).
        kv_lora_rank, qk_rope_head_dim: MLA latent sizes (0 when not MLA).
        context_len: ``max_position_embeddings``: SGLang's context length when the rope
            is not scaled (see :meth:`sglang_context_len`).
        weight_dtype_bytes: bytes per weight as served: ``torch_dtype``, with float32
            checkpoints served in 16 bits as SGLang's ``--dtype auto`` does.
        num_experts: routed experts per MoE layer (0: a dense MLP).
        num_experts_per_tok: experts each token is routed to (``num_experts_per_tok``; 0 for
            a dense model or a config that does not say).
        quantization: the checkpoint's ``quantization_config.quant_method`` ("" if none).
        checkpoint_bytes: ``metadata.total_size`` of the checkpoint's safetensors index
            when the model was loaded from a folder holding one, else None.
        sglang_rank_bytes: ``((tp, bytes per GPU), ...)`` of weights as SGLang 0.5.23 builds a
            quantized preset (:func:`pagedkv.weights.preset_sglang_weight_bytes`; empty
            otherwise).
        sglang_refused_tp: ``((tp, SGLang's message), ...)``: the tp sizes at which SGLang
            0.5.23 cannot build a quantized preset
            (:func:`pagedkv.weights.preset_sglang_refused_tp`; empty otherwise).
        model_type: the config's ``model_type``.
        config: the parsed ``config.json`` (for :attr:`num_params`).
        architecture: the config's first ``architectures`` entry, e.g. ``"LlamaForCausalLM"``
            (the model class SGLang names in its "Load weight end" line).
        family: the pools SGLang builds (:func:`pagedkv.configs.model_family.attention_family`):
            ``"dense"``, ``"mla"``, ``"swa"`` (a full and a sliding-window pool) or
            ``"linear"`` (KV for the full-attention layers plus per-request state slots).
        num_swa_layers: window layers of a sliding-window hybrid (0 otherwise).
        sliding_window: SGLang's ``sliding_window_size`` for a sliding-window hybrid (the
            model class's: ``sliding_window - 1`` for gpt-oss), else None.
        num_linear_layers: linear-attention (state, no KV) layers of a linear hybrid.
        vision: a multimodal model's vision encoder, ``(num_hidden_layers, hidden_size)``
            of its ``vision_config`` (None for a text-only model).
        rope_factor: the ``rope_scaling`` factor SGLang's ``get_context_length`` applies
            (:func:`pagedkv.configs.model_family.rope_context_factor`; 1 for most models).
        rope_per_layer_type: transformers 5 keeps this model's rope per layer type (Gemma 3).
        head_dim_left_none: the config omits ``head_dim`` and transformers' class for it
            stores None (Mistral, Mixtral): see ``Release.null_head_dim_sized``.
        index_head_dim: DeepSeek V3.2's indexer key width (0: no sparse-attention indexer;
            :mod:`pagedkv.dsa_indexer`).
    """

    name: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    v_head_dim: int
    hidden_size: int
    context_len: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    weight_dtype_bytes: int
    num_experts: int = 0
    num_experts_per_tok: int = 0
    quantization: str = ""
    architecture: str = ""
    checkpoint_bytes: int | None = None
    sglang_rank_bytes: tuple[tuple[int, int], ...] = ()
    sglang_refused_tp: tuple[tuple[int, str], ...] = ()
    model_type: str = ""
    config: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    family: str = "dense"
    num_swa_layers: int = 0
    sliding_window: int | None = None
    num_linear_layers: int = 0
    vision: tuple[int, int] | None = None
    rope_factor: float = 1
    rope_per_layer_type: bool = False
    head_dim_left_none: bool = False
    index_head_dim: int = 0

    def sglang_context_len(self, release: Release) -> int:
        """SGLang's ``context_len`` under ``release``: ``int(max_position_embeddings *
        rope_factor)``, the factor left out where the release's transformers keeps the rope
        per layer type (``Release.context_len_skips_layered_rope``: Gemma 3 is 131,072
        tokens in 0.5.23 and 1,048,576 in 0.5.9)."""
        skip = self.rope_per_layer_type and release.context_len_skips_layered_rope
        return self.context_len if skip else int(self.rope_factor * self.context_len)

    @property
    def is_multimodal(self) -> bool:
        """A vision encoder in front of the decoder. SGLang 0.5.23 serves Gemma 3 text-only
        unless ``--enable-multimodal`` is given (``ModelConfig``'s ``mm_disabled_models``);
        only then does it reserve memory for image features (see :func:`plan_pool`)."""
        return self.vision is not None

    @property
    def is_hybrid(self) -> bool:
        """A sliding-window or linear-attention hybrid: more than one kind of pool."""
        return self.family in ("swa", "linear")

    @property
    def num_full_attention_layers(self) -> int:
        """Layers that keep full-length KV (every layer of a one-pool model)."""
        return self.num_hidden_layers - self.num_swa_layers - self.num_linear_layers

    def full_cell_size(self, kv_cache_dtype: str = "bf16", tp: int = 1) -> int:
        """KV bytes one token costs on one GPU over the full-attention layers only (a hybrid's
        full pool; :meth:`cell_size` for a one-pool model)."""
        return self._per_layer(kv_cache_dtype, tp) * self.num_full_attention_layers

    def swa_cell_size(self, kv_cache_dtype: str = "bf16", tp: int = 1) -> int:
        """KV bytes one token costs on one GPU over the window layers (0 without any)."""
        return self._per_layer(kv_cache_dtype, tp) * self.num_swa_layers

    def state_bytes(self, tp: int = 1) -> tuple[int, int]:
        """Bytes of one request's state slot on one GPU, ``(conv_state, ssm_state)``
        (linear-attention hybrids; ``(0, 0)`` otherwise): see
        :func:`pagedkv.configs.model_hybrid.gdn_state_bytes`.

        Raises:
            ConfigError: a ``tp`` that does not divide the linear-attention heads.
        """
        if self.family != "linear":
            return 0, 0
        return gdn_state_bytes(text_config(self.config), tp, self.name)

    @property
    def is_moe(self) -> bool:
        """Mixture of experts: routed experts replace the MLP in some or all layers."""
        return self.num_experts > 0

    @property
    def is_quantized(self) -> bool:
        """The checkpoint stores quantized weights (``quantization_config``)."""
        return bool(self.quantization)

    @functools.cached_property
    def num_params(self) -> int:
        """Tensor elements of the checkpoint, counted on the meta device (see
        :mod:`pagedkv.weights`); a preset's count is read from the shipped table.

        Raises:
            ConfigError: transformers cannot build this model.
        """
        table = preset_param_counts()
        if self.name in table:
            return table[self.name]
        return count_parameters(self.config)

    @functools.cached_property
    def num_routed_expert_params(self) -> int:
        """Tensor elements of the routed experts, every MoE layer together (0 for a dense
        model), counted as :attr:`num_params` is
        (:func:`pagedkv.weights.count_routed_expert_parameters`).

        Raises:
            ConfigError: transformers cannot build this model.
        """
        if not self.is_moe:
            return 0
        table = preset_routed_expert_counts()
        if self.name in table:
            return table[self.name]
        return count_routed_expert_parameters(self.config)

    @property
    def num_active_params(self) -> int:
        """Parameters one token runs through (:func:`pagedkv.configs.moe_config.active_params`;
        :attr:`num_params` for a dense model).

        Raises:
            ConfigError: a MoE config without a valid ``num_experts_per_tok``.
        """
        if not self.is_moe:
            return self.num_params
        return active_params(self.num_params, self.num_routed_expert_params,
                             self.num_experts, self.num_experts_per_tok, self.name)

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): one latent per token."""
        return self.kv_lora_rank > 0

    @property
    def attention_kind(self) -> str:
        """``"MLA"``, ``"MHA"`` (H_kv == H_q), ``"MQA"`` (H_kv == 1) or ``"GQA"``."""
        if self.is_mla:
            return "MLA"
        if self.num_key_value_heads == self.num_attention_heads:
            return "MHA"
        return "MQA" if self.num_key_value_heads == 1 else "GQA"

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        """KV heads each attention-TP rank stores (SGLang ``get_num_kv_heads``).

        Heads are split across ranks; when ``tp > H_kv`` each rank keeps one replica.
        Raises ConfigError unless ``tp`` divides ``H_kv`` or ``H_kv`` divides ``tp``.
        """
        check_positive_int("tp", tp)
        h = self.num_key_value_heads
        if h % tp and tp % h:
            raise bad_value("tp", tp, f"a divisor or a multiple of num_key_value_heads={h}")
        self.check_attention_tp(tp)
        return max(1, h // tp)

    def check_attention_tp(self, tp: int) -> None:
        """Raise ConfigError unless ``tp`` divides the query heads (SGLang asserts the same)."""
        if self.num_attention_heads % tp:
            raise bad_value("tp", tp, f"a divisor of num_attention_heads={self.num_attention_heads}")

    def _per_layer(self, kv_cache_dtype: str, tp: int) -> int:
        elem = kv_dtype_bytes(kv_cache_dtype)
        if self.is_mla:
            check_positive_int("tp", tp)
            self.check_attention_tp(tp)
            if self.index_head_dim:  # DSA: its own latent layout plus the index key
                return (latent_bytes_per_token(self.kv_lora_rank, self.qk_rope_head_dim,
                                               kv_cache_dtype)
                        + indexer_bytes_per_token(self.index_head_dim))
            return (self.kv_lora_rank + self.qk_rope_head_dim) * elem
        return self.kv_heads_per_rank(tp) * (self.head_dim + self.v_head_dim) * elem

    def cell_size(self, kv_cache_dtype: str = "bf16", tp: int = 1) -> int:
        """KV bytes one token costs on one GPU if every layer that keeps KV keeps it at full
        length (SGLang's ``cell_size`` for a one-pool model).

        MHA/GQA/MQA: ``H_kv_per_rank * (head_dim + v_head_dim) * L * bytes``, i.e.
        ``2 * L * H_kv * d_head * bytes`` when K and V heads are equal. MLA:
        ``(kv_lora_rank + qk_rope_head_dim) * L * bytes``, never divided by TP. A
        sliding-window hybrid counts its window layers too (what
        ``--disable-hybrid-swa-memory`` allocates; SGLang's own split is
        :meth:`full_cell_size` + :meth:`swa_cell_size`); a linear-attention hybrid only its
        full-attention layers (the others keep state, :meth:`state_bytes`).

        Raises:
            ConfigError: unknown ``kv_cache_dtype`` or a ``tp`` that does not fit ``H_kv``.
        """
        return self._per_layer(kv_cache_dtype, tp) * (
            self.num_hidden_layers - self.num_linear_layers)

    def weight_bytes(self, tp: int = 1) -> int:
        """Bytes of weights one GPU holds: the checkpoint's bytes / ``tp``.

        The checkpoint's bytes are its index's ``total_size`` when known (exact, quantized
        tensors included), else ``num_params * weight_dtype_bytes`` (exact for unquantized
        checkpoints: Llama-3-8B 8,030,261,248 parameters, 16.06 GB in bf16). Under TP SGLang
        splits the attention and MLP matrices and the vocabulary, and shards MoE experts
        across the same ranks (tensor-parallel experts by default; ``--ep-size`` equal to
        ``tp`` gives each rank whole experts: the same share); norms and routers are
        replicated, a few MiB pagedkv splits with the rest. A safetensors index also counts
        DeepSeek's multi-token-prediction layer, which SGLang 0.5.23 loads only for speculative
        decoding; pagedkv keeps it (a documented over-count: :mod:`pagedkv.weights`). A
        quantized preset's index total is shipped with the package
        (:func:`pagedkv.weights.preset_checkpoint_bytes`) where public sources quote it.
        Without one, a quantized preset's bytes are SGLang 0.5.23's own model on the meta
        device (:attr:`sglang_rank_bytes`): exact per GPU at the tp sizes shipped (replicated
        norms and routers, padded expert shards included), else the tp=1 bytes / ``tp``, the
        share rule above. At the tp sizes where SGLang 0.5.23 cannot build the preset
        (:attr:`sglang_refused_tp`: DeepSeek-V3, V3.2 and Kimi-K2's fp8 dense MLP at tp 32)
        there are no weights to count: refused, naming SGLang's reason.

        Raises:
            ConfigError: a quantized checkpoint without an index (its bytes depend on the
                format); pass the real size (``weights_gib`` / ``--weights-gib``); a tp size
                at which SGLang 0.5.23 cannot build the quantized preset.
        """
        check_positive_int("tp", tp)
        refused = dict(self.sglang_refused_tp)
        if tp in refused:
            builds = ", ".join(str(t) for t, _ in self.sglang_rank_bytes)
            raise ConfigError(
                f"model={self.name!r} at tp={tp}: SGLang 0.5.23 cannot build this quantized "
                f"checkpoint at tp={tp} ({refused[tp]}); valid: tp in {{{builds}}}, the sizes "
                "SGLang builds it at (pagedkv/presets/models/sglang_weight_bytes.json)")
        if self.checkpoint_bytes is not None:
            return self.checkpoint_bytes // tp
        if self.sglang_rank_bytes:
            per_rank = dict(self.sglang_rank_bytes)
            return per_rank.get(tp, per_rank[1] // tp)
        if self.is_quantized:
            raise ConfigError(
                f"model {self.name!r} is quantized (quantization_config.quant_method="
                f"{self.quantization!r}); its weight size cannot be derived from the config: "
                "pass the real size (weights_gib / --weights-gib) or a checkpoint folder "
                "holding model.safetensors.index.json"
            )
        return self.num_params * self.weight_dtype_bytes // tp

    @classmethod
    def from_config(cls, config: dict[str, Any], name: str = "custom",
                    checkpoint_bytes: int | None = None,
                    disable_hybrid_swa_memory: bool = False) -> ModelSpec:
        """Build a ModelSpec from a parsed ``config.json`` dict
        (:func:`pagedkv.configs.config_json.spec_fields` reads it).

        Multimodal wrappers are read through their ``text_config`` (SGLang's
        ``hf_text_config``); ``checkpoint_bytes`` is the checkpoint index's ``total_size``;
        ``disable_hybrid_swa_memory`` is SGLang's flag of that name (a sliding-window hybrid
        then gets one full-length pool for every layer).

        Raises:
            ConfigError: a required field is missing or not a positive integer, or a model
                whose pools pagedkv does not size exactly (see
                :func:`pagedkv.configs.model_family.attention_family`).
        """
        return cls(**spec_fields(config, name, checkpoint_bytes, disable_hybrid_swa_memory))
