"""Compile the decode kernels for NVIDIA GPUs on a machine without one, and read what came out.

Triton needs no GPU to compile: told the target (``GPUTarget("cuda", 90, 32)`` for an
H100) it runs its whole pipeline down to a cubin with the ``ptxas`` its wheel ships. What
it needs a driver for is *asking* which GPU is present and launching; here a stand-in
driver answers the first question with the target we choose, and each launch is replaced
by ``kernel.warmup(...)``, which compiles exactly what the launch would (the same
arguments from :func:`decode_attention.plan_launch`, so the same specialisations) and
runs nothing.

From the compiled kernel we read:

- registers per thread, local memory (spills) and stack: the cubin's resource table, the
  numbers the driver reports as ``n_regs`` / ``n_spills`` once it loads the kernel;
- shared memory: ``compiled.metadata.shared`` (Triton's own allocation);
- the machine instructions (SASS, from the wheel's ``cuobjdump``): tensor-core ``HMMA`` /
  ``HGMMA``, scalar ``FFMA``, asynchronous copies ``LDGSTS`` (the pipelined K/V loads),
  spill traffic ``STL`` / ``LDL``, and how many instructions one pass of the K/V loop
  issues.

Triton's interpreter and its compiler cannot live in one process (``TRITON_INTERPRET`` is
read when triton is imported): ``compile_matrix.py`` runs :func:`compile_build` in child
processes and caches the table.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from pagedkv.errors import PagedKVError, bad_value

TARGETS = (75, 80, 89, 90)  # compute capabilities: T4, A100, L4 / RTX 4090, H100 / H200
TENSOR_CORE_OPS = ("HMMA", "HGMMA")  # mma.sync and Hopper's wgmma, in SASS
COUNTED_OPS = (*TENSOR_CORE_OPS, "FFMA", "LDGSTS", "LDG", "STL", "LDL", "BAR", "MUFU")


@dataclass(frozen=True)
class Build:
    """One launch whose kernels we compile: a decode case and how it is walked.

    ``lens`` and the head geometry are those of a real launch (the benchmark's Llama-3-8B
    shape, or a chapter's example), because Triton specialises a kernel on its integer
    arguments (strides divisible by 16 or not) as well as on its constexprs.
    """

    purpose: str  # "benchmark" or "book"
    walk: str  # "per-slot" (req_to_token) or "per-page" (page table)
    page_size: int
    dtype: str  # "bfloat16", "float16" or "float32"
    lens: tuple[int, ...]
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dot_fp32: bool = False  # the interpreter's fp32 dots, compiled for contrast only


LLAMA3_8B = {"num_q_heads": 32, "num_kv_heads": 8, "head_dim": 128}
BOOK = {"num_q_heads": 8, "num_kv_heads": 2, "head_dim": 64}
TINY_LLAMA = {"num_q_heads": 4, "num_kv_heads": 2, "head_dim": 16}


def launched_builds() -> list[Build]:
    """Every launch configuration ``bench/bench_decode.py`` and chapter 6 use.

    The benchmark: Llama-3-8B heads, bf16 and fp16, the per-slot walk and the per-page walk
    at page sizes 1, 16 and 64 (its tables are all 16-divisible wide, as at context 4,096).
    The chapter: its kernel-vs-reference cases (fp32 and fp16, pages of 16), its split
    demonstration and the tiny Llama's decode steps (fp32, pages of 4).
    """
    builds = []
    for dtype in ("bfloat16", "float16"):
        builds.append(Build("benchmark", "per-slot", 16, dtype, (4096,), **LLAMA3_8B))
        builds += [Build("benchmark", "per-page", ps, dtype, (4096,), **LLAMA3_8B)
                   for ps in (1, 16, 64)]
    for dtype in ("float32", "float16"):
        builds += [Build("book", walk, 16, dtype, (1, 37, 100, 64), **BOOK)
                   for walk in ("per-slot", "per-page")]
    builds.append(Build("book", "per-slot", 4, "float32", (13,), **TINY_LLAMA))
    return builds


def contrast_builds() -> list[Build]:
    """The benchmark's bf16 per-page kernel with ``DOT_FP32`` forced on: what the dots cost
    when they are widened to fp32 (as the interpreter runs them). Never launched on a GPU."""
    return [Build("contrast", "per-page", 16, "bfloat16", (4096,), **LLAMA3_8B, dot_fp32=True)]


@dataclass(frozen=True)
class KernelResources:
    """What one compiled kernel uses and contains, for one target."""

    kernel: str  # "stage1 per-slot", "stage1 per-page", "stage2"
    arch: int  # compute capability, e.g. 90
    dtype: str
    page_size: int | None  # per-page walks only
    purpose: str
    dot_fp32: bool
    registers: int  # per thread
    spill_bytes: int  # local memory + stack frame per thread, where ptxas spills; 0: none
    shared_bytes: int  # per program (Triton's dynamic allocation + static)
    num_warps: int
    num_stages: int
    ops: dict[str, int] = field(default_factory=dict)  # SASS counts of COUNTED_OPS
    loop_ops: dict[str, int] = field(default_factory=dict)  # the same, in one loop pass
    loop_instructions: int = 0  # SASS instructions in one pass of the hot loop
    sass_instructions: int = 0


def _tool(name: str) -> str:
    """Path of a CUDA tool the triton wheel ships (``cuobjdump``)."""
    from triton import knobs

    return getattr(knobs.nvidia, name).path


def read_sass(cubin: bytes) -> tuple[str, str]:
    """The cubin's resource table and its disassembly, from the wheel's ``cuobjdump``."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage, sass = (subprocess.run([_tool("cuobjdump"), flag, f.name], check=True,
                                      capture_output=True, text=True).stdout
                       for flag in ("--dump-resource-usage", "-sass"))
    return usage, sass


_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)([^;]*);")


def sass_instructions(sass: str) -> list[tuple[int, str, str]]:
    """``(address, opcode, operands)`` of every instruction in ``cuobjdump -sass`` output
    (opcode without its ``.`` modifiers)."""
    return [(int(a, 16), op, rest) for a, op, rest in _SASS_LINE.findall(sass)]


def hot_loop(instrs: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    """The instructions of the largest backward-branch region: one pass of the kernel's
    main loop (stage 1: one K/V tile), empty when there is no loop."""
    best: list[tuple[int, str, str]] = []
    for address, op, rest in instrs:
        target = re.search(r"0x([0-9a-f]+)", rest) if op == "BRA" else None
        if target and int(target.group(1), 16) < address:
            start = int(target.group(1), 16)
            body = [i for i in instrs if start <= i[0] <= address]
            best = body if len(body) > len(best) else best
    return best


def resources(compiled: object, kernel: str, arch: int, build: Build) -> KernelResources:
    """Read registers, spills, shared memory and instruction counts of a compiled kernel."""
    usage, sass = read_sass(compiled.asm["cubin"])
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", usage)
    if found is None:
        raise PagedKVError(f"cuobjdump printed no resource usage for {kernel}:\n{usage}")
    regs, stack, static_shared, local = (int(x) for x in found.groups())
    instrs = sass_instructions(sass)
    loop = hot_loop(instrs)
    counts, loop_counts = Counter(op for _, op, _ in instrs), Counter(op for _, op, _ in loop)
    meta = compiled.metadata
    return KernelResources(
        kernel=kernel, arch=arch, dtype=build.dtype,
        page_size=build.page_size if kernel == "stage1 per-page" else None,
        purpose=build.purpose, dot_fp32=build.dot_fp32, registers=regs,
        spill_bytes=stack + local,
        shared_bytes=meta.shared + static_shared, num_warps=meta.num_warps,
        num_stages=meta.num_stages, ops={op: counts[op] for op in COUNTED_OPS},
        loop_ops={op: loop_counts[op] for op in COUNTED_OPS}, loop_instructions=len(loop),
        sass_instructions=len(instrs))


def _target_driver(arch: int) -> object:
    """A driver that reports the NVIDIA target ``sm_<arch>`` and can do nothing else."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class TargetOnly(DriverBase):
        @classmethod
        def is_active(cls) -> bool:
            return False

        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", arch, 32)

        def get_active_torch_device(self) -> torch.device:
            return torch.device("cpu")

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def get_benchmarker(self) -> None:
            raise PagedKVError("a compile-only driver cannot time kernels")

        def map_python_to_cpp_type(self, ty: str) -> str:
            raise PagedKVError("a compile-only driver cannot launch kernels")

    return TargetOnly()


def compile_build(build: Build, arch: int) -> list[KernelResources]:
    """Compile both stages of ``build`` for ``sm_<arch>`` by warm-up, and read them back.

    Runs in a process where triton was imported with ``TRITON_INTERPRET=0`` (see
    ``compile_matrix.py``); the inputs are small CPU tensors with the launch's dtypes and
    strides, and any split count serves (``num_splits`` is not specialised on).

    Raises:
        PagedKVError: called under the interpreter, or the compile failed.
        ConfigError: ``arch`` is not one of :data:`TARGETS`.
    """
    import torch
    from triton.runtime.driver import driver

    from pagedkv.layers.attention import decode_attention as da
    from pagedkv.layers.attention.checks import interpreted
    from pagedkv.lessons.kernel.cases import random_decode_case

    if interpreted():
        raise PagedKVError("compile_build needs triton imported with TRITON_INTERPRET=0")
    if arch not in TARGETS:
        raise bad_value("arch", arch, f"one of {TARGETS}")
    case = random_decode_case(list(build.lens), num_q_heads=build.num_q_heads,
                              num_kv_heads=build.num_kv_heads, head_dim=build.head_dim,
                              page_size=build.page_size, dtype=getattr(torch, build.dtype))
    plan = case.plan(per_page=build.walk == "per-page", num_kv_splits=2)
    if build.dot_fp32:
        plan.kwargs1["DOT_FP32"] = True
    previous = driver._active  # None until something asked for the real driver
    driver.set_active(_target_driver(arch))
    try:
        out = []
        for name, kernel, grid, args, kwargs in (
            (f"stage1 {build.walk}", da._decode_stage1, plan.grid1, plan.args1, plan.kwargs1),
            ("stage2", da._decode_stage2, plan.grid2, plan.args2, plan.kwargs2),
        ):
            kernel.device_caches.clear()  # its binder remembers the previous target
            compiled = kernel.warmup(*args, grid=grid, **kwargs)
            out.append(resources(compiled, name, arch, build))
        return out
    finally:
        driver._active = previous  # reset_active() would look for a GPU driver


def loaded_resources(plan: object) -> dict[str, dict[str, int]]:
    """Registers, local memory and shared memory of both stages as the CUDA driver loaded
    them, for a plan about to run on a GPU: ``registers`` (``n_regs``), ``spill_bytes``
    (the local memory per thread: Triton's ``n_spills`` counts it in 4-byte words) and
    ``shared_bytes`` (``metadata.shared``).

    Compiles (or fetches from Triton's cache) by warm-up; the benchmark records the result
    next to its timings. Returns ``{}`` under the interpreter, which compiles nothing.
    """
    from pagedkv.layers.attention import decode_attention as da
    from pagedkv.layers.attention.checks import interpreted

    if interpreted():
        return {}
    out = {}
    for name, kernel, grid, args, kwargs in (
        ("stage1", da._decode_stage1, plan.grid1, plan.args1, plan.kwargs1),
        ("stage2", da._decode_stage2, plan.grid2, plan.args2, plan.kwargs2),
    ):
        compiled = kernel.warmup(*args, grid=grid, **kwargs)
        compiled._init_handles()  # loads the binary: the driver fills n_regs and n_spills
        out[name] = {"registers": compiled.n_regs, "spill_bytes": 4 * compiled.n_spills,
                     "shared_bytes": compiled.metadata.shared}
    return out
