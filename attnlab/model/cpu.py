"""What attnlab reads of the CPU it runs on.

Three choices depend on it: which library multiplies fp32 layers when decoding (MKL runs its
AVX-512 kernels on Intel's CPUs only, `attnlab.model.linear`), which build of attnlab's C++
kernels a process may load (they are compiled for the instructions of the CPU that built them,
`attnlab.model.kernels`), and whether bf16 is worth computing in at all (`bf16_products`). And
how many threads a command may ask torch for (`check_threads`): no more than its cores.
"""

from __future__ import annotations

import os
import platform
from functools import cache
from pathlib import Path

import torch

from attnlab.errors import ConfigError

# What a user who asked for bf16 on such a CPU is told, by the trainer and by `attnlab.load`
BF16_EMULATED = (
    "this CPU has no bf16 matrix instructions (AVX-512 or AVX-NE-CONVERT), so PyTorch emulates bf16 products"
)


@cache
def cpu_fields() -> dict[str, str]:
    """The first processor's entry of /proc/cpuinfo ({"vendor_id": "GenuineIntel", "model
    name": ..., "flags": ...}); on systems without it, what `platform` tells."""
    fields: dict[str, str] = {}
    try:
        with Path("/proc/cpuinfo").open() as info:
            for line in info:
                if not line.strip():
                    break  # the end of the first processor's entry
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    if "vendor_id" not in fields:  # (Windows names the vendor in platform.processor())
        processor = platform.processor()
        fields = {"vendor_id": "GenuineIntel" if "GenuineIntel" in processor else "", "model name": processor}
    return fields


def cpu_vendor() -> str:
    """The CPU's vendor string ("GenuineIntel", "AuthenticAMD", ...; "" where none is found)."""
    return cpu_fields().get("vendor_id", "")


def cpu_signature() -> str:
    """What a `-march=native` build depends on: the machine, the CPU's vendor and model, and the
    instruction sets it reports."""
    fields = cpu_fields()
    return "|".join([platform.machine(), *(fields.get(key, "") for key in ("vendor_id", "model name", "flags"))])


@cache
def bf16_products() -> bool:
    """Whether oneDNN multiplies bf16 matrices on this CPU: it needs AVX-512 (BW, VL, DQ) or
    AVX-NE-CONVERT, and PyTorch's bf16 products go through it. Without them (an AVX2-only AMD
    EPYC of the Zen 3 family, many laptops) PyTorch falls back to a scalar loop: there a 2,048²
    bf16 product took 49 s against 0.1 s in fp32, a `small` training step 34 s against 1.1."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def check_threads(threads: int) -> None:
    """`--threads` that torch can run here: from 1 to the machine's cores. Below 1 was taken as 1
    without a word; far above, OpenMP could not create the threads at the first product
    (`heads profile --threads 100000` died of a segmentation fault after loading the model, and an
    explorer server would at its first translation); above the cores they only slow torch down."""
    if threads < 1:
        raise ConfigError(f"--threads must be ≥ 1, got {threads}")
    cores = os.cpu_count() or 1
    if threads > cores:
        raise ConfigError(f"--threads {threads} is more than this machine's {cores} CPU cores")


def set_threads(threads: int) -> None:
    """`torch.set_num_threads` of a `--threads` that `check_threads` takes."""
    check_threads(threads)
    torch.set_num_threads(threads)
