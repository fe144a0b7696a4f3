"""GPU presets: memory as the driver reports it, peak HBM bandwidth and peak dense bf16 FLOP/s.

``memory_mib`` is the total that ``nvidia-smi`` / ``rocm-smi`` reports (what SGLang reads to
pick its default ``mem_fraction_static``); the marketing size (80 GB, 141 GB) is decimal and
rounded. Bandwidth and FLOP/s are the vendors' datasheet peaks; real kernels reach a
fraction of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagedkv.errors import bad_value
from pagedkv.units import MiB


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator.

    Attributes:
        name: preset key, e.g. ``"h100-sxm-80gb"``.
        label: how people say it, e.g. ``"H100 SXM 80GB"``.
        memory_mib: total device memory in MiB as the driver reports it.
        hbm_bandwidth: peak memory bandwidth in bytes/s.
        bf16_flops: peak dense bf16 tensor FLOP/s (no sparsity).
        source: where the numbers come from.
        platform: ``"cuda"`` (NVIDIA) or ``"rocm"`` (AMD); SGLang 0.5.23 captures prefill
            CUDA graphs by default only on CUDA, which changes its default
            ``mem_fraction_static``.
    """

    name: str
    label: str
    memory_mib: int
    hbm_bandwidth: float
    bf16_flops: float
    source: str
    platform: str = "cuda"

    @property
    def memory_bytes(self) -> int:
        """Total device memory in bytes."""
        return self.memory_mib * MiB


_NVSMI = "total memory as nvidia-smi reports it"
GPU_PRESETS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("h100-sxm-80gb", "H100 SXM 80GB", 81559, 3.35e12, 989e12,
                f"NVIDIA H100 Tensor Core GPU datasheet (SXM5); {_NVSMI}"),
        GPUSpec("h200-141gb", "H200 141GB", 143771, 4.8e12, 989e12,
                f"NVIDIA H200 Tensor Core GPU datasheet (SXM); {_NVSMI}"),
        GPUSpec("a100-40gb", "A100 40GB", 40960, 1.555e12, 312e12,
                f"NVIDIA A100 datasheet (SXM4 40GB); {_NVSMI}"),
        GPUSpec("a100-80gb", "A100 80GB", 81920, 2.039e12, 312e12,
                f"NVIDIA A100 datasheet (SXM4 80GB); {_NVSMI}"),
        GPUSpec("l4", "L4 24GB", 23034, 300e9, 121e12,
                f"NVIDIA L4 datasheet; {_NVSMI}"),
        GPUSpec("rtx-4090", "RTX 4090 24GB", 24564, 1.008e12, 165.2e12,
                f"NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090); {_NVSMI}"),
        GPUSpec("t4", "T4 16GB", 15360, 320e9, 65e12,
                "NVIDIA T4 datasheet (peak fp16 tensor FLOP/s: the T4 has no bf16); "
                f"{_NVSMI}"),
        GPUSpec("mi300x", "MI300X 192GB", 196592, 5.3e12, 1307.4e12,
                "AMD Instinct MI300X datasheet; total memory as rocm-smi reports it", "rocm"),
    )
}


def get_gpu(name: str) -> GPUSpec:
    """The preset called ``name`` (case-insensitive).

    Raises:
        ConfigError: unknown preset; the message lists the valid names.
    """
    try:
        return GPU_PRESETS[name.lower()]
    except KeyError:
        raise bad_value("gpu", name, ", ".join(GPU_PRESETS)) from None
